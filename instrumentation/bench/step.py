"""One whole training step of AAH (banded execution) vs full attention (``aah-viz bench step``).

A training step is forward, backward and an AdamW step of the whole model on one batch. The
AAH model is regime ``full_adaptive`` with ``attention_backend="banded"``; the baseline is
regime ``full_attention``. Both run at a sequence length where windows matter (candidate
windows T/8, T/4, T/2, T by default), past warm-up so that the controller's windows are
executed, in paired rounds (``aah_viz.paired_timing``): ``ratios.aah_vs_full_step`` is the median
of the per-round ratios with a bootstrap 95% interval. A third model, the same AAH model with
``stats_on_update_only`` (head statistics only where routing reads them), runs in the same rounds:
``ratios.aah_stats_on_update_only_vs_aah_step`` is its saving.
"""

from __future__ import annotations

import statistics

import torch

from aah_viz.errors import ConfigError
from aah_viz.paired_timing import DEFAULT_PAIRS, by_clock, paired_report, pairs_of, resolve_clock, round_robin, timed
from instrumentation.backends import causal_coverage
from instrumentation.config import AAHConfig, windows_for
from instrumentation.model import AAHTransformer


def _build(preset: str, regime: str, seq_len: int, windows, backend: str | None, dropout, seed: int, **extra):
    overrides = dict(block_size=seq_len, windows=tuple(windows), **extra)
    if backend is not None:
        overrides["attention_backend"] = backend
    if dropout is not None:
        overrides["dropout"] = dropout
    cfg = AAHConfig.from_preset(preset, regime=regime, **overrides)
    torch.manual_seed(seed)
    model = AAHTransformer(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return cfg, model, opt


def _step(model, opt, idx, targets, step: int) -> None:
    model.prepare_step(step)
    out = model(idx, targets=targets)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _side(model, opt, idx, targets, first_step: int):
    """A timed side that trains one step per call, the step counter advancing."""
    steps = iter(range(first_step, 1 << 62))
    return timed(lambda: _step(model, opt, idx, targets, next(steps)))


def bench_step(
    *,
    preset="small",
    seq_len=1024,
    windows=None,
    batch=2,
    pairs=DEFAULT_PAIRS,
    clock="auto",
    backend="banded",
    dropout=None,
    seed=0,
    progress=None,
) -> dict:
    """Paired step times of both models, their median per-round ratio with its interval, and the windows
    the AAH model executed."""
    if windows is None:
        windows = windows_for(seq_len)
    if seq_len < 2 or any(w < 1 for w in windows):
        raise ConfigError("bench step: --seq-len must be >= 2 and every window >= 1")
    aah_cfg, aah, aah_opt = _build(preset, "full_adaptive", seq_len, windows, backend, dropout, seed)
    full_cfg, full, full_opt = _build(preset, "full_attention", seq_len, windows, None, dropout, seed)
    _, lean, lean_opt = _build(
        preset, "full_adaptive", seq_len, windows, backend, dropout, seed, stats_on_update_only=True
    )
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(aah_cfg.vocab_size, (batch, seq_len + 1), generator=gen)
    x, y = idx[:, :-1], idx[:, 1:]
    # start past warm-up so the controller's windows execute (method section 8.2)
    step = aah_cfg.warmup_steps + 1
    sides = {
        "full_adaptive": _side(aah, aah_opt, x, y, step),
        "full_adaptive_stats_on_update_only": _side(lean, lean_opt, x, y, step),
        "full_attention": _side(full, full_opt, x, y, step),
    }
    times = round_robin(sides, pairs=pairs, warmup=2, progress=progress)
    step += pairs + 2
    seen = []  # one untimed step with a subscriber: which backend ran and its realised work
    handle = aah.subscribe(lambda event: seen.append((event.backend, event.realised_work)))
    try:
        _step(aah, aah_opt, x, y, step)
    finally:
        handle.remove()
    executed = aah.current_windows()
    executed_list = [[int(w) for w in row] for row in executed.tolist()]
    flat = [w for row in executed_list for w in row]
    backends = sorted({name for name, _ in seen if name})
    works = [w for _, w in seen if w is not None]
    clock = resolve_clock(clock, "cpu")
    wanted = {
        "aah_vs_full_step": ("full_adaptive", "full_attention"),
        "aah_stats_on_update_only_vs_aah_step": ("full_adaptive_stats_on_update_only", "full_adaptive"),
        "aah_stats_on_update_only_vs_full_step": ("full_adaptive_stats_on_update_only", "full_attention"),
    }
    doc = paired_report(pairs_of(times, wanted), sides=wanted, clock=clock)
    return {
        **doc,
        "config": dict(
            preset=preset,
            seq_len=seq_len,
            candidate_windows=list(windows),
            batch=batch,
            pairs=pairs,
            attention_backend=backend,
            dropout=aah_cfg.dropout,
            n_layer=aah_cfg.n_layer,
            n_head=aah_cfg.n_head,
            n_embd=aah_cfg.n_embd,
            torch=torch.__version__,
            threads=torch.get_num_threads(),
        ),
        "executed_windows": executed_list,
        "executed_causal_coverage": causal_coverage(flat, seq_len) if flat else None,
        "backends_seen": backends,
        "realised_work_mean": (sum(works) / len(works)) if works else None,
        "medians_s": {name: statistics.median(by_clock(ms)[clock]) for name, ms in times.items()},
    }
