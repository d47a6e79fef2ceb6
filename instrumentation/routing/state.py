"""What AAH-v3 remembers between forwards of one layer (method §8.2), as an immutable value.

``route_step`` reads a ``RoutingState`` and returns a new one; nothing changes one in place, so a
caller can keep, compare or drop states freely (an evaluation forward that must not change
routing simply drops the returned state). The state lives on the host (small CPU tensors and
lists) except the previous forward's head statistics, which stay on the model's device until the
next routing update reads them, so cached forwards never synchronise with an accelerator.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RoutingState:
    """One layer's routing memory; every field is replaced, never mutated."""

    prev_stats: torch.Tensor | None = None  # (H, 3) [entropy, norm, usage] of the previous forward (device)
    ema: torch.Tensor | None = None  # (H, 9) smoothed head features (§4.3)
    cached_idx: torch.Tensor | None = None  # (H,) per-head indices of the last control update (pre-EMA)
    cached_labels: tuple[int, ...] | None = None  # level-0 group id per head
    cached_group_counts: tuple[int, ...] | None = None
    last_control_step: int | None = None
    topology: tuple | None = None  # freeze_learned_topology: every level's group lists
    fixed_groups: tuple | None = None  # fixed_random / fixed_deterministic level-0 groups
    pooled_cache: torch.Tensor | None = None  # warm-up path: pooled group features ...
    pooled_cache_step: int | None = None  # ... and the step they were computed at
    res_ema: torch.Tensor | None = None  # (H,) float resolution EMA (§8.3)
    executed_idx: torch.Tensor | None = None  # (H,) indices executed by the last forward
    control_enabled: bool = True  # set_control's flag (§8.6)
    # Level-0 scoring inputs of the last update, for the opt-in trainable controller.
    score_inputs: torch.Tensor | None = None  # (n0, in_dim)
    score_parent: tuple[int, ...] | None = None  # level-0 -> level-1 map (None when level 0 is the top)
    score_parent_final: torch.Tensor | None = None  # (n0,) parent's final index (None at the top)
    score_labels: tuple[int, ...] | None = None  # head -> level-0 row
    score_pairwise: bool = True

    def replace(self, **changes: Any) -> RoutingState:
        return dataclasses.replace(self, **changes)

    def with_control(self, enabled: bool) -> RoutingState:
        """``set_control`` of §8.6: False clears the control caches (EMA, statistics, topology and
        fixed groups stay); True only sets the flag."""
        if enabled:
            return self.replace(control_enabled=True)
        return self.replace(
            control_enabled=False,
            cached_idx=None,
            cached_labels=None,
            cached_group_counts=None,
            last_control_step=None,
            pooled_cache=None,
            pooled_cache_step=None,
            res_ema=None,
        )

    def with_stats(self, stats: torch.Tensor | None) -> RoutingState:
        """After execution: the (H, 3) statistics the next forward's features read (§4.1)."""
        return self if stats is None else self.replace(prev_stats=stats)

    # ------------------------------------------------------------------ checkpoints
    def to_plain(self) -> dict[str, Any]:
        """Detached CPU copies of every field, lists for tuples (``torch.save``-able with weights_only)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu().clone()
            elif isinstance(v, tuple):
                v = _lists(v)
            out[f.name] = v
        return out

    @classmethod
    def from_plain(cls, d: dict[str, Any], device=None) -> RoutingState:
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in d:
                continue
            v = d[f.name]
            if isinstance(v, torch.Tensor):
                v = v.clone()
                if f.name == "prev_stats" and device is not None:
                    v = v.to(device)
            elif isinstance(v, list):
                v = _tuples(v)
            changes[f.name] = v
        return cls(**changes)


def _lists(v):
    return [_lists(x) for x in v] if isinstance(v, (tuple, list)) else copy.copy(v)


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, (tuple, list)) else v
