"""``aah-viz bench routing``: one routing update per layer next to that layer's attention forward.

A routing update is everything the control path does at a control step (head features, feature
EMA, clustering, hierarchy, controller, selection); the attention forward is the layer's Q/K/V
projection, banded execution and output projection with the routing cached. Both are timed on the
``small`` preset shape for 8, 16, 32 and 64 heads, interleaved, and reported as medians.
"""

from __future__ import annotations

import json
import statistics
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "routing",
        help="routing-update time per layer vs that layer's attention forward (JSON)",
        description="Time one AAH-v3 routing update of one layer (features, EMA, clustering, hierarchy, controller, "
        "selection) next to the same layer's attention forward at the small preset, for several head counts. "
        'Prints {"rows": [{"heads", "routing_update_ms", "attention_forward_ms", "ratio"}, ...]} '
        "with medians of interleaved repeats.",
    )
    parser.add_argument("--heads", default="8,16,32,64", help="comma-separated head counts (must divide n_embd=192)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved timing repeats per head count")
    parser.add_argument("--batch", type=int, default=4, help="batch size of the attention input")
    parser.add_argument("--regime", default="full_adaptive", help="regime whose update path is timed")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    parser.add_argument("--json", action="store_true", help="print JSON (the default output; kept for symmetry)")
    parser.set_defaults(func=run)


def bench_rows(heads: list[int], *, repeats: int, batch: int, regime: str) -> list[dict]:
    import torch

    from aah_viz.errors import ConfigError
    from instrumentation.attention import AAHAttention
    from instrumentation.config import AAHConfig

    rows = []
    for n_head in heads:
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
        rows.append(
            {
                "heads": n_head,
                "routing_update_ms": round(r, 3),
                "attention_forward_ms": round(a, 3),
                "ratio": round(r / a, 4) if a > 0 else None,
            }
        )
    return rows


def run(args) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.torch_import import require_torch

    torch = require_torch()
    torch.set_num_threads(max(1, args.threads))
    try:
        heads = [int(h) for h in str(args.heads).split(",") if h.strip()]
    except ValueError as err:
        raise ConfigError(f"--heads: expected comma-separated integers, got {args.heads!r}") from err
    rows = bench_rows(heads, repeats=max(1, args.repeats), batch=max(1, args.batch), regime=args.regime)
    print(
        json.dumps(
            {
                "preset": "small",
                "regime": args.regime,
                "batch": args.batch,
                "threads": args.threads,
                "repeats": args.repeats,
                "rows": rows,
            },
            indent=2,
        )
    )
    return 0
