"""One routing update per layer next to that layer's attention forward (``aah-viz bench routing``).

A routing update is everything the control path does at a control step (head features, feature
EMA, clustering, hierarchy, controller, selection); the attention forward is the layer's Q/K/V
projection, banded execution and output projection with the routing cached. Both are timed on the
``small`` preset shape for each head count, interleaved, and reported as medians.
"""

from __future__ import annotations

import statistics
import time

import torch

from aah_viz.errors import ConfigError
from instrumentation.attention import AAHAttention
from instrumentation.config import AAHConfig


def _routing_row(n_head: int, *, repeats: int, batch: int, regime: str) -> dict:
    cfg = AAHConfig.from_preset("small", regime=regime, n_head=n_head, dropout=0.0)
    if not cfg.enabled:
        raise ConfigError(f"--regime {regime!r} has no routing to time; pick an AAH regime")
    torch.manual_seed(0)
    layer = AAHAttention(cfg, 0)
    x = torch.randn(batch, cfg.block_size, cfg.n_embd)
    T = cfg.block_size
    layer.train()
    with torch.no_grad():
        layer.set_step(None)
        layer(x)  # fills the previous-forward statistics and a first decision
        C = cfg.n_embd
        q, k, v = layer.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(batch, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
    route_ms, attn_ms = [], []
    for _ in range(repeats):
        with torch.no_grad():
            layer.set_step(None)  # every forward without a step is a routing update (method §8.6)
            t0 = time.perf_counter()
            route = layer._route(q, k, v, T)
            layer._post_process(route.idx, route.in_warmup)
            route_ms.append((time.perf_counter() - t0) * 1e3)
            layer.eval()  # frozen evaluation forward: cached windows, no routing work
            t0 = time.perf_counter()
            layer(x)
            attn_ms.append((time.perf_counter() - t0) * 1e3)
            layer.train()
    r, a = statistics.median(route_ms), statistics.median(attn_ms)
    return {
        "heads": n_head,
        "routing_update_ms": round(r, 3),
        "attention_forward_ms": round(a, 3),
        "ratio": round(r / a, 4) if a > 0 else None,
    }


def bench_routing(heads: list[int], *, repeats: int = 15, batch: int = 4, regime: str = "full_adaptive") -> dict:
    """Median routing-update and attention-forward times per head count, with their ratio."""
    rows = [_routing_row(n, repeats=max(1, repeats), batch=max(1, batch), regime=regime) for n in heads]
    return {
        "preset": "small",
        "regime": regime,
        "batch": batch,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "rows": rows,
    }
