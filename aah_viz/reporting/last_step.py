"""What a trainer's logger reads of the recorder's last closed step, beyond its windows and groups: the
step, its length, each layer's realised work, the controller's gradient norm, and each layer's latest
routing update (its group change rate, whether level 0 was a forced split). The recorder feeds it from
the routing events; ``rows`` hands it to the sinks as ``RoutingRows``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from aah_viz.reporting.scalars import RoutingRows
from aah_viz.runlog import rows as row_values


class LastStep:
    def __init__(self, n_layer: int, candidates: tuple[int, ...], w_min: int, sinks: int):
        self.candidates, self.w_min, self.sinks = candidates, w_min, sinks
        self.step: int | None = None
        self.seq_len = 0
        self.work: dict = {}
        self.grad_norm: Any = None
        self.change = np.full(n_layer, np.nan)  # each layer's latest routing update
        self.forced = np.full(n_layer, np.nan)
        self.updated = False  # some layer updated since the last closed step
        self.routing_update_steps = 0  # closed steps on which some layer (re)built its routing

    def take_update(self, layer: int, change: float | None, origin: str | None) -> None:
        self.updated = True
        self.change[layer] = np.nan if change is None else float(change)
        if origin is not None:
            self.forced[layer] = float(origin == "forced_bipartition")

    def restore(self, run_dir: Path) -> None:
        """After a resume: each layer's latest routing update as the run holds it."""
        from aah_viz.reporting.from_run import level0_forced, update_rates
        from aah_viz.runlog import load_run

        run = load_run(run_dir)
        for target, found in ((self.change, update_rates(run)), (self.forced, level0_forced(run))):
            for layer, (_, values) in found.items():
                if 0 <= layer < len(target) and len(values):
                    target[layer] = values[-1]

    def take_step(self, step: int, seq_len: int, work: dict) -> None:
        if self.updated:
            self.routing_update_steps += 1
        self.step, self.seq_len, self.work, self.updated = step, int(seq_len), work, False

    def layer_work(self) -> np.ndarray:
        out = np.full(len(self.change), np.nan)
        for layer, value in self.work.items():
            out[layer] = float_or_nan(value)
        return out

    def rows(self, windows: np.ndarray, groups: np.ndarray) -> RoutingRows | None:
        """The last closed step with its (layer, head) windows and (layer, level, head) groups; None before
        the first step."""
        if self.step is None:
            return None
        return RoutingRows(
            steps=np.asarray([self.step]),
            candidates=self.candidates,
            windows=windows[None],
            seq_len=np.asarray([self.seq_len]),
            w_min=self.w_min,
            sinks=self.sinks,
            groups=groups[None],
            layer_work=self.layer_work()[None],
            controller_grad_norm=np.asarray([float_or_nan(self.grad_norm)]),
            group_change_rate=self.change[None].copy(),
            level0_forced=self.forced[None].copy(),
        )


def float_or_nan(value: Any) -> float:
    value = row_values.float_or_none(value) if value is not None else None  # a tensor: one item() call
    return np.nan if value is None else value
