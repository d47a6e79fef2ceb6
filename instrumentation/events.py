"""The routing event: one small typed object per AAH layer per forward.

The attention module builds it only when somebody subscribes (``AAHAttention.subscribe``), so a
model without subscribers pays nothing. Tensors stay on the model's device and are never read
back here: a subscriber that wants host values copies them with ``non_blocking=True`` and
converts them at flush time, so the hot path never forces a GPU sync. The hierarchy itself
(group lists) is plain Python: it is computed on the host at routing updates anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class ClusterFacts:
    """What the clustering call that produced one hierarchy level did (method section 11.5)."""

    origin: str  # natural, forced_bipartition, collapsed, single_item, fixed, frozen, passthrough
    forced_split: bool = False
    merged: int = 0
    groups_before_merge: int = 0
    anchor_similarity: float | None = None
    sim_mean: float | None = None
    sim_std: float | None = None
    sim_min: float | None = None
    sim_max: float | None = None
    # the closest any comparison of the clustering came to going the other way (similarity units;
    # ``routing.clustering.ClusterResult.decision_margin``); None where nothing was clustered
    decision_margin: float | None = None


@dataclass
class TreeLevel:
    """One level of a layer's hierarchy at a routing update (level 0 groups heads)."""

    level: int
    groups: list[list[int]]  # level 0: head indices; level l>0: indices of level l-1 groups
    parent: list[int] | None  # parent node (index at level+1) of each group; None at the top
    members: list[list[int]]  # member heads of each group (the leaves), ascending
    base_logits: torch.Tensor  # (n_groups, K) controller logits before any pairwise term
    logits: torch.Tensor  # (n_groups, K) final logits (after joint scorer / sibling bias)
    raw_idx: torch.Tensor  # (n_groups,) argmax of the final logits
    final_idx: torch.Tensor  # (n_groups,) after the parent constraint
    joint_paired: list[bool]  # scored jointly with a sibling
    facts: ClusterFacts
    features: torch.Tensor | None = None  # (n_groups, 9) feature rows fed to the controller


@dataclass
class RoutingEvent:
    """Everything one forward of one AAH layer decided."""

    layer: int
    step: int | None  # the training step set by set_step; None at stand-alone inference
    path_mode: str  # method section 11.4 names
    updated: bool  # routing was (re)computed on this forward (a control update, or a shadow rebuild)
    applied: bool  # decisions were executed (False in warm-up / control off: shadow only)
    in_warmup: bool
    training: bool
    window_idx: torch.Tensor  # (H,) executed candidate index per head (device, long)
    windows: torch.Tensor  # (H,) executed window in tokens per head (device, long)
    seq_len: int
    candidate_windows: tuple[int, ...]
    raw_head_idx: torch.Tensor | None = None  # (H,) level-0 raw argmax per head, update forwards only
    tree: list[TreeLevel] | None = None  # the hierarchy, on forwards that (re)built it
    head_features: torch.Tensor | None = None  # (H, 9) smoothed (EMA) features, when computed
    group_change_rate: float | None = None
    resolution_delta: float | None = None
    backend: str = "dense_masked"
    realised_work: float | None = None  # computed score elements / T(T+1)/2 per head
    pre_execution_idx: torch.Tensor | None = None  # (H,) chosen index before resolution EMA, ramp, override
    group_counts: list[int] | None = None  # groups per level of the current (or cached) hierarchy
    froze_topology: bool | None = None  # freeze_learned_topology: this update stored the topology
    shadow_idx: torch.Tensor | None = None  # (H,) the decision a warm-up / control-off build would take
    group_ratios: list[float] | None = None  # mean window / T per level-0 group (method §11.4, §15.6)
    fallback_reason: str | None = None  # why the requested attention backend did not run


Subscriber = Callable[[RoutingEvent], None]
