"""One routing update per layer next to that layer's attention forward (``aah-viz bench routing``).

A routing update is everything the control path does at a control step (head features, feature
EMA, clustering, hierarchy, controller, selection); the attention forward is the layer's Q/K/V
projection, execution (``banded`` unless ``backend`` says otherwise) and output projection with the
routing cached. Both are timed at a
preset's shape (``--seq-len`` sets T, with candidate windows T/8, T/4, T/2, T) for each head
count, in paired rounds (``aah_viz.paired_timing``): each row's ``ratio`` is the median of the
per-round ratios update / forward with a bootstrap 95% interval. With ``feature_token_stride`` > 1 the
update under that approximate option (docs/model.md) runs in the same rounds, as each row's ``strided``.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

from aah_viz.errors import ConfigError
from aah_viz.paired_timing import DEFAULT_PAIRS, by_clock, paired_report, pairs_of, round_robin, timed
from instrumentation.attention import AAHAttention, split_heads
from instrumentation.config import AAHConfig, windows_for
from instrumentation.routing.step import RoutingInputs, route_step


def _config(preset: str, regime: str, n_head: int, seq_len: int | None, backend: str) -> AAHConfig:
    overrides = dict(regime=regime, n_head=n_head, dropout=0.0, attention_backend=backend)
    if seq_len is not None:
        overrides.update(block_size=seq_len, windows=windows_for(seq_len))
    cfg = AAHConfig.from_preset(preset, **overrides)
    if not cfg.enabled:
        raise ConfigError(f"--regime {regime!r} has no routing to time; pick an AAH regime")
    if cfg.n_embd % n_head:
        raise ConfigError(f"--heads {n_head}: must divide n_embd={cfg.n_embd} of preset {preset!r}")
    return cfg


def _sides(cfg: AAHConfig, batch: int, feature_token_stride: int = 1) -> dict:
    """``routing_update`` and ``attention_forward`` of one layer on one fixed input, and
    ``routing_update_strided`` when ``feature_token_stride`` > 1."""
    torch.manual_seed(0)
    layer = AAHAttention(cfg, 0)
    x = torch.randn(batch, cfg.block_size, cfg.n_embd)
    layer.train()
    with torch.no_grad():
        layer.set_step(None)
        layer(x)  # fills the previous-forward statistics and a first decision
    qkv = {}

    def project():
        # Off the clock: an update reads the Q/K/V its forward has just written, so each timed
        # update gets them fresh (and in cache) as in training, not left cold by the other sides.
        with torch.no_grad():
            qkv["qkv"] = tuple(split_heads(x, layer.c_attn, cfg.n_head))

    def update_with(update_cfg: AAHConfig):
        def update():
            with torch.no_grad():
                layer.train()
                layer.set_step(None)  # every forward without a step is a routing update (method §8.6)
                route_step(layer.state, RoutingInputs(*qkv["qkv"], step=None), update_cfg, layer.networks)

        return update

    def forward():
        with torch.no_grad():
            layer.eval()  # frozen evaluation forward: cached windows, no routing work
            layer(x)

    sides = {
        "routing_update": timed(update_with(cfg), setup=project),
        "attention_forward": timed(forward),
    }
    if feature_token_stride > 1:
        strided = dataclasses.replace(cfg, feature_token_stride=feature_token_stride)
        sides["routing_update_strided"] = timed(update_with(strided), setup=project)
    return sides


def bench_routing(
    heads: list[int],
    *,
    preset: str = "small",
    seq_len: int | None = None,
    pairs: int = DEFAULT_PAIRS,
    clock: str = "cpu",
    batch: int = 4,
    regime: str = "full_adaptive",
    backend: str = "banded",
    feature_token_stride: int = 1,
    progress=None,
) -> dict:
    """Per head count: median routing-update and attention-forward times and their paired ratio; with
    ``feature_token_stride`` > 1 also the update with that option, in the same rounds (``strided``)."""
    if feature_token_stride < 1:
        raise ConfigError(f"--feature-token-stride {feature_token_stride}: must be a positive integer")
    rows, raw_s, warnings = [], {}, []
    for n_head in heads:
        cfg = _config(preset, regime, n_head, seq_len, backend)
        times = round_robin(_sides(cfg, batch, feature_token_stride), pairs=pairs, progress=progress)
        key = f"routing_vs_attention_h{n_head}"
        strided_key = f"strided_routing_vs_attention_h{n_head}"
        comparisons = {key: ("routing_update", "attention_forward")}
        if feature_token_stride > 1:
            comparisons[strided_key] = ("routing_update_strided", "attention_forward")
        doc = paired_report(pairs_of(times, comparisons), sides=comparisons, clock=clock)
        med = {side: statistics.median(by_clock(ms)[clock]) * 1e3 for side, ms in times.items()}
        row = {
            "heads": n_head,
            "seq_len": cfg.block_size,
            "routing_update_ms": round(med["routing_update"], 3),
            "attention_forward_ms": round(med["attention_forward"], 3),
            "ratio": doc["ratios"][key],
            "ratio_by_clock": {c: figs[key] for c, figs in doc["ratios_by_clock"].items()},
        }
        if feature_token_stride > 1:
            row["strided"] = {
                "feature_token_stride": feature_token_stride,
                "routing_update_ms": round(med["routing_update_strided"], 3),
                "ratio": doc["ratios"][strided_key],
                "ratio_by_clock": {c: figs[strided_key] for c, figs in doc["ratios_by_clock"].items()},
            }
        rows.append(row)
        raw_s.update(doc["raw_s"])
        warnings += doc["warnings"]
    return {
        "clock": clock,
        "preset": preset,
        "regime": regime,
        "attention_backend": backend,
        "batch": batch,
        "feature_token_stride": feature_token_stride,
        "pairs": pairs,
        "threads": torch.get_num_threads(),
        "rows": rows,
        "raw_s": raw_s,
        "warnings": warnings,
    }
