"""A stand-alone inference pass: loss, speed, memory and the routing a model executes on held-out text.

Works on any model with ``RoutedLayers`` routing: an ``AAHTransformer`` loaded from a checkpoint of
``aah-viz train`` or a Hugging Face model patched by ``instrumentation.retrofit``. By default
routing is frozen as loaded (evaluation forwards execute the checkpoint's windows and change
nothing); ``reference_eval=True`` lets every forward run the state machine and change routing,
as the reference's evaluation does (what the paper's Table 2 numbers come from).

The result is the detail of an ``inference`` event (docs/export.md): ``val_loss``, ``val_ppl``,
``tokens_per_s``, ``elapsed_s``, ``peak_mem_mb``, ``acr``, ``acr_causal``, ``flops_ratio_est``,
``flops_reduction_pct``, ``realised_work``, ``window_frac``, ``windows`` and ``n_batches``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F

from aah_viz import coverage
from aah_viz.errors import ConfigError
from instrumentation.model import model_logits


class _Windows:
    """Executed windows and realised work per forward and layer, from the routing events."""

    def __init__(self, n_layer: int):
        self.n_layer = n_layer
        self.rows: list[np.ndarray] = []
        self.work: list[float] = []
        self.updates = 0  # routing updates (control decisions or re-clusterings) during the pass
        self._now: dict[int, np.ndarray] = {}

    def __call__(self, ev) -> None:
        self._now[int(ev.layer)] = ev.windows.detach().to("cpu", torch.long).numpy()
        if ev.realised_work is not None:
            self.work.append(float(ev.realised_work))
        self.updates += bool(ev.updated)

    def close_forward(self, routed) -> None:
        if len(self._now) == self.n_layer:
            self.rows.append(np.stack([self._now[i] for i in range(self.n_layer)]))
        else:  # layers that emitted nothing: their current windows
            self.rows.append(routed.current_windows().numpy())
        self._now = {}


def _peak_memory_mb(device: torch.device) -> float:
    from instrumentation.recorder.model_state import peak_memory_mb

    return float(peak_memory_mb(device))


def inference_pass(
    model: torch.nn.Module,
    routed,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    reference_eval: bool = False,
    logits_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = model_logits,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Evaluate ``model`` on ``batches`` of (inputs, targets) and return the ``inference`` detail.

    ``routed`` is the model's ``RoutedLayers`` (the model itself, or a patched model's handle).
    """
    cfg = routed.cfg
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seen = _Windows(int(cfg.n_layer))
    losses, tokens, lengths = [], 0, []
    was_training = model.training
    model.eval()
    mode = routed.routing_mode("mutate" if reference_eval else "frozen")
    sub = routed.subscribe(seen)
    started = time.perf_counter()
    try:
        with mode, sub, torch.no_grad():
            for x, y in batches:
                logits = logits_fn(model, x)
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="none")
                losses.append(nll.view(y.shape).sum(dim=1))  # per sequence (block): the unit of resampling
                tokens += int(y.numel())
                lengths.append(int(x.shape[1]))
                seen.close_forward(routed)
                if progress is not None:
                    progress(1)
            block_nll = torch.cat(losses).tolist() if losses else []  # one sync, at the end
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - started
    finally:
        model.train(was_training)
    if not losses:
        raise ConfigError("the evaluation data gave no batch: use a longer text or a shorter --seq-len")
    loss = math.fsum(block_nll) / tokens
    detail = summarise(cfg, seen.rows, lengths, seen.work, loss, tokens, elapsed, _peak_memory_mb(device))
    detail["routing_updates"] = seen.updates
    detail["block_nll"] = block_nll
    return detail


def summarise(
    cfg,
    windows: list[np.ndarray],
    lengths: list[int],
    work: list[float],
    loss: float,
    tokens: int,
    elapsed: float,
    peak_mb: float,
) -> dict:
    """The ``inference`` detail from per-forward (n_layer, n_head) windows at their sequence lengths."""
    from aah_viz.runlog.rows import layer_coverage

    wins = np.stack(windows)  # (S, L, H)
    T = np.asarray(lengths, dtype=np.int64)
    acr, causal = layer_coverage(wins, T, int(getattr(cfg, "w_min", 0) or 0), int(getattr(cfg, "sink_tokens", 0) or 0))
    acr_value = float(acr.mean())
    detail = dict(
        n_batches=len(lengths),
        tokens=int(tokens),
        seq_len=int(T.max()),
        val_loss=float(loss),
        val_ppl=float(math.exp(loss)) if loss < 700 else None,
        tokens_per_s=float(tokens / elapsed) if elapsed > 0 else None,
        elapsed_s=float(elapsed),
        peak_mem_mb=float(peak_mb),
        acr=acr_value,
        acr_causal=float(causal.mean()),
        realised_work=float(np.mean(work)) if work else None,
        window_frac={str(w): float((wins == w).mean()) for w in executed_buckets(cfg.windows, wins)},
        windows=wins[-1].tolist(),
    )
    n_embd, n_ff = getattr(cfg, "n_embd", None), getattr(cfg, "n_ff", None)
    if n_embd and n_ff:
        detail["flops_ratio_est"] = coverage.flops_ratio_est(acr_value, seq_len=int(T.max()), n_embd=n_embd, n_ff=n_ff)
        detail["flops_reduction_pct"] = 100.0 * (1.0 - detail["flops_ratio_est"])
    return detail


def executed_buckets(candidates, wins: np.ndarray) -> list[int]:
    """The windows ``window_frac`` is over: the candidates when every executed window is one of them (a
    routing regime, where an unused candidate is a finding), else the windows the model executed (a fixed
    or sliding window outside the candidate list, whose candidates would all read zero)."""
    executed = sorted({int(w) for w in np.unique(wins)})
    cands = sorted(int(w) for w in candidates)
    return cands if set(executed) <= set(cands) else executed


def eval_batches(blocks: np.ndarray, batch_size: int, device) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) batches of consecutive blocks of T+1 tokens, in order."""
    for start in range(0, blocks.shape[0], batch_size):
        block = torch.from_numpy(blocks[start : start + batch_size]).to(device)
        yield block[:, :-1], block[:, 1:]
