"""The routing hierarchy: levels of groups over heads (method §5.2, §5.3, §5.8-§5.11).

Level 0 groups heads; level l >= 1 groups the groups of level l-1. Every builder is a pure
function returning a ``Hierarchy``; the group lists are plain Python. Builds run in float32 on
the CPU (n <= 64 items, many tiny sequential steps, and the reference's float rounding was a
CPU's); the feature rows are handed back on the caller's device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from instrumentation.routing.clustering import ClusterResult, aggregate_group_features, cluster, labels_from_groups

LEVEL0_ONLY_KEYS = {
    "sim_threshold",
    "churn_penalty",
    "churn_clamp",
    "prev_labels",
}  # accepted and ignored by grow_upper_levels


def _host(features: torch.Tensor) -> torch.Tensor:
    """Float32 on the CPU: the builds run on the host, as the reference's did."""
    return features.detach().to(device="cpu", dtype=torch.float32)


def _finish(levels: list[Level], device: torch.device, stop: str, attempts: list[ClusterResult]) -> Hierarchy:
    """Hand the feature rows back on the caller's device."""
    if device.type != "cpu":
        for level in levels:
            level.features = level.features.to(device, non_blocking=True)
    return Hierarchy(levels, stop, attempts)


@dataclass
class Level:
    """One hierarchy level: its groups (indices into the level below) and one feature row per group."""

    groups: list[list[int]]
    features: torch.Tensor
    facts: ClusterResult | None = None  # the clustering call that produced it; None when given


@dataclass
class Hierarchy:
    levels: list[Level]
    stop_reason: str = ""  # "", level0_collapsed, upper_level_collapsed
    attempts: list[ClusterResult] = field(default_factory=list)  # every clustering call, in build order

    def group_counts(self) -> list[int]:
        """Groups per level, level 0 first (the paper's "topology", e.g. [2, 2, 2, 2])."""
        return [len(level.groups) for level in self.levels]

    def parent_maps(self) -> list[list[int]]:
        """For each level below the top, the index of the level-(l+1) group holding each group (§5.11)."""
        maps = []
        for below, above in zip(self.levels[:-1], self.levels[1:]):
            maps.append(labels_from_groups(above.groups, len(below.groups)))
        return maps

    def head_group_maps(self, n_heads: int) -> list[list[int]]:
        """For each level, the group id of every head (level-0 labels composed with the parent maps)."""
        if not self.levels:
            return []
        labels = labels_from_groups(self.levels[0].groups, n_heads)
        maps = [labels]
        for parent in self.parent_maps():
            labels = [parent[g] if g >= 0 else -1 for g in labels]
            maps.append(labels)
        return maps

    def members(self, level: int) -> list[list[int]]:
        """Member heads of each group at ``level``, ascending."""
        heads = [sorted(g) for g in self.levels[0].groups]
        for above in self.levels[1 : level + 1]:
            heads = [sorted(h for child in g for h in heads[child]) for g in above.groups]
        return heads

    def topology(self) -> list[list[list[int]]]:
        """A copy of every level's group lists (what freeze_learned_topology stores)."""
        return [[list(g) for g in level.groups] for level in self.levels]

    def level_added(self) -> list[bool]:
        """For each attempt, whether its level was added (a collapsed upper attempt is not)."""
        added = [True] * len(self.attempts)
        if self.stop_reason == "upper_level_collapsed" and added:
            added[-1] = False
        return added


def _grow(
    levels: list[Level],
    attempts: list[ClusterResult],
    *,
    super_threshold: float,
    max_depth: int,
    upper_metric: str,
    normdiff_scale: float,
    min_group_size: int,
    group_feature_mode: str,
    upper_l2_threshold: float,
) -> str:
    """Add upper levels in place until one collapses or max_depth levels exist (§5.3)."""
    if len(levels) < max_depth and len(levels[-1].groups) < 2:
        return "level0_collapsed"  # one level-0 group: nothing to group above it
    while len(levels) < max_depth:
        below = levels[-1]
        res = cluster(
            below.features,
            threshold=super_threshold,
            metric=upper_metric,
            prev_labels=None,
            allow_forced_bipartition=False,
            min_group_size=min_group_size,
            normdiff_scale=normdiff_scale,
            upper_l2_threshold=upper_l2_threshold,
            threshold_kind="super_threshold",
        )
        attempts.append(res)
        if len(res.groups) == 1:
            return "upper_level_collapsed"
        feats = aggregate_group_features(res.groups, below.features, group_feature_mode)
        levels.append(Level(res.groups, feats, res))
    return ""


def build_hierarchy(
    head_features: torch.Tensor,
    *,
    sim_threshold: float,
    super_threshold: float,
    max_depth: int,
    upper_metric: str = "cosine",
    normdiff_scale: float = 16.0,
    min_group_size: int = 1,
    churn_penalty: float = 0.0,
    group_feature_mode: str = "mean",
    prev_labels: Sequence[int] | None = None,
    upper_l2_threshold: float = 0.0,
    churn_clamp: str = "all",
) -> Hierarchy:
    """The adaptive build (§5.8): cluster the (EMA) head features, then grow upper levels."""
    device = head_features.device
    head_features = _host(head_features)
    res = cluster(
        head_features,
        threshold=sim_threshold,
        metric="cosine",
        prev_labels=prev_labels,
        allow_forced_bipartition=True,
        min_group_size=min_group_size,
        churn_penalty=churn_penalty,
        churn_clamp=churn_clamp,
        normdiff_scale=normdiff_scale,
        threshold_kind="sim_threshold",
    )
    feats = aggregate_group_features(res.groups, head_features, group_feature_mode)
    levels = [Level(res.groups, feats, res)]
    attempts = [res]
    stop = _grow(
        levels,
        attempts,
        super_threshold=super_threshold,
        max_depth=max_depth,
        upper_metric=upper_metric,
        normdiff_scale=normdiff_scale,
        min_group_size=min_group_size,
        group_feature_mode=group_feature_mode,
        upper_l2_threshold=upper_l2_threshold,
    )
    return _finish(levels, device, stop, attempts)


def grow_upper_levels(
    level0_groups: Sequence[Sequence[int]],
    level0_features: torch.Tensor,
    *,
    super_threshold: float,
    max_depth: int,
    upper_metric: str = "cosine",
    normdiff_scale: float = 16.0,
    min_group_size: int = 1,
    group_feature_mode: str = "mean",
    upper_l2_threshold: float = 0.0,
    **_level0_only,
) -> Hierarchy:
    """Upper re-clustering over a given level-0 partition (§5.9; reuse and warm-up paths).

    ``level0_features`` has one row per level-0 group (the pooled Q/K/V features of §4.2).
    Level-0-only settings (sim_threshold, churn_penalty, churn_clamp, prev_labels) are accepted and ignored,
    so callers can pass the same keyword set as to ``build_hierarchy``.
    """
    unknown = set(_level0_only) - LEVEL0_ONLY_KEYS
    if unknown:
        raise TypeError(f"grow_upper_levels got unexpected keyword(s) {sorted(unknown)}")
    levels = [Level([list(g) for g in level0_groups], _host(level0_features), None)]
    attempts: list[ClusterResult] = []
    stop = _grow(
        levels,
        attempts,
        super_threshold=super_threshold,
        max_depth=max_depth,
        upper_metric=upper_metric,
        normdiff_scale=normdiff_scale,
        min_group_size=min_group_size,
        group_feature_mode=group_feature_mode,
        upper_l2_threshold=upper_l2_threshold,
    )
    return _finish(levels, level0_features.device, stop, attempts)


def passthrough_hierarchy(
    level0_groups: Sequence[Sequence[int]],
    level0_features: torch.Tensor,
    max_depth: int,
    group_feature_mode: str = "mean",
) -> Hierarchy:
    """Level 0 as given, then singleton levels up to exactly max_depth levels (§5.9 passthrough)."""
    levels = [Level([list(g) for g in level0_groups], _host(level0_features), None)]
    for _ in range(1, max(1, max_depth)):
        singletons = [[i] for i in range(len(levels[-1].groups))]
        levels.append(Level(singletons, aggregate_group_features(singletons, levels[-1].features, group_feature_mode)))
    return _finish(levels, level0_features.device, "", [])


def hierarchy_from_topology(
    topology: Sequence[Sequence[Sequence[int]]], level0_features: torch.Tensor, group_feature_mode: str = "mean"
) -> Hierarchy:
    """Every level's groups from a stored topology; level-0 rows given, upper rows aggregated (§5.9)."""
    if not topology:
        raise ValueError("a stored topology needs at least one level")
    levels = [Level([list(g) for g in topology[0]], _host(level0_features), None)]
    for groups in topology[1:]:
        groups = [list(g) for g in groups]
        levels.append(Level(groups, aggregate_group_features(groups, levels[-1].features, group_feature_mode)))
    return _finish(levels, level0_features.device, "", [])


def fixed_random_partition(n_heads: int, seed: int) -> list[list[int]]:
    """Balanced random bipartition (§5.10 fixed_random).

    The first floor(H/2) heads of ``torch.randperm`` with a CPU generator seeded with ``seed`` form
    group 0, the rest group 1. The partition is a labelling, so members are listed ascending.
    """
    perm = torch.randperm(n_heads, generator=torch.Generator(device="cpu").manual_seed(int(seed))).tolist()
    half = n_heads // 2
    return [g for g in (sorted(perm[:half]), sorted(perm[half:])) if g]


def fixed_deterministic_partition(n_heads: int) -> list[list[int]]:
    """Head h -> group h mod 2 (§5.10 fixed_deterministic)."""
    return [g for g in (list(range(0, n_heads, 2)), list(range(1, n_heads, 2))) if g]
