"""The generic AAH-v3 clustering routine (method §5.1-§5.7), reproducing the reference exactly.

Pure functions on float32 tensors. Group order and member order are part of the result: parent
maps and the joint sibling scorer depend on them. The reference's quirks are kept on purpose:
the churn bonus only moves the forced-bipartition anchor (§5.4), and the small-group merge keeps
stale means of emptied groups, ignores the norm penalty and never merges with two or fewer
non-empty groups (§5.6). Ties always go to the first index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from aah_viz.errors import ConfigError
from instrumentation.config import CHOICES, SELF_MERGE_SCORE, merge_can_pick_itself

METRICS = CHOICES["upper_cluster_metric"]
NORM_EPS = 1e-6  # floor of every norm in a denominator
TIE_EPS = 1e-8  # |delta| below this counts as a tie in the forced bipartition
CHURN_CLAMPS = CHOICES["churn_clamp"]


@dataclass
class ClusterResult:
    """The groups of one clustering call and the facts the reference logs about it (§11.5)."""

    groups: list[list[int]]  # creation order, members in insertion order
    origin: str  # natural | forced_bipartition | collapsed | single_item
    forced_bipartition: bool
    groups_before_merge: int
    groups_after_merge: int
    merged_count: int
    small_groups_before_merge: int
    singletons_before_merge: int
    groups_before_force: int
    anchor_similarity: float | None
    sim_mean: float
    sim_std: float
    sim_min: float
    sim_max: float
    threshold: float
    threshold_kind: str
    metric: str
    n_items: int
    allow_forced_bipartition: bool = False
    min_group_size: int = 1
    anchor_pair: tuple[int, int] | None = None
    # How far the closest comparison this call made was from going the other way (see
    # ``_margin``): a tiny margin means float rounding of another CPU could give other groups.
    decision_margin: float = math.inf
    extra: dict = field(default_factory=dict)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def summary(self) -> dict:
        """The scalar facts (no group lists), e.g. for a routing event or a debug table."""
        return {k: v for k, v in asdict(self).items() if k not in ("groups", "extra")}


def labels_from_groups(groups: Sequence[Sequence[int]], n: int) -> list[int]:
    """Group id of each of the n items (-1 for an item in no group)."""
    labels = [-1] * n
    for gid, members in enumerate(groups):
        for item in members:
            labels[item] = gid
    return labels


def _check_input(X: torch.Tensor) -> torch.Tensor:
    if not isinstance(X, torch.Tensor):
        X = torch.as_tensor(X, dtype=torch.float32)
    if X.dim() != 2:
        raise ValueError(f"cluster expects an (n, d) feature matrix, got shape {tuple(X.shape)}")
    # Host float32: the group lists are host data anyway, and the reference ran on CPU.
    return X.detach().to(device="cpu", dtype=torch.float32)


def _score_vectors(X: torch.Tensor, metric: str) -> torch.Tensor:
    """The vectors u_i the centroid assignment works on (§5.1 step 2)."""
    if metric == "l2":
        return X
    if metric == "centered_cosine":
        X = X - X.mean(dim=0, keepdim=True)
    return X / torch.linalg.vector_norm(X, dim=-1, keepdim=True).clamp_min(NORM_EPS)


def _norm_penalty(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """lambda * |a - b| / max(a, b, eps), elementwise on norms (cosine_normdiff)."""
    return scale * (a - b).abs() / torch.maximum(a, b).clamp_min(NORM_EPS)


def _similarity_matrix(X: torch.Tensor, u: torch.Tensor, metric: str, normdiff_scale: float) -> torch.Tensor:
    """The full matrix S (§5.1 step 3), used for statistics and the forced-split anchor."""
    if metric == "l2":
        return -torch.cdist(X, X)
    S = u @ u.T
    if metric == "cosine_normdiff":
        norms = torch.linalg.vector_norm(X, dim=-1)
        S = S - _norm_penalty(norms[:, None], norms[None, :], normdiff_scale)
    return S


def _offdiag_stats(S: torch.Tensor) -> tuple[float, float, float, float]:
    n = S.shape[0]
    if n < 2:
        return 1.0, 0.0, 1.0, 1.0
    off = S.reshape(-1)[1:].view(n - 1, n + 1)[:, :-1].reshape(-1)  # off-diagonal entries, row-major
    mean, std, lo, hi = torch.stack([off.mean(), off.std(unbiased=False), off.min(), off.max()]).tolist()
    return mean, std, lo, hi


def _first_argmax(values: list[float]) -> int:
    """Index of the first maximum: explicit tie-breaking that never depends on a kernel."""
    return max(range(len(values)), key=values.__getitem__)


def _margin(values: list[float], best: int, threshold: float | None) -> float:
    """Distance of one argmax-and-threshold decision from flipping.

    The smaller of: the best value's distance from the threshold (when there is one), and its
    lead over the runner-up (0 for a tie, which the first index wins).
    """
    m = math.inf if threshold is None else abs(values[best] - threshold)
    if len(values) > 1:
        m = min(m, values[best] - max(v for k, v in enumerate(values) if k != best))
    return m


def _unit(c: torch.Tensor) -> torch.Tensor:
    return c / torch.linalg.vector_norm(c).clamp_min(NORM_EPS)


def _assign_sequential(
    X: torch.Tensor, u: torch.Tensor, threshold: float, metric: str, normdiff_scale: float
) -> tuple[list[list[int]], float]:
    """Sequential centroid assignment in item order (§5.1 step 5); returns groups and decision margin.

    Centroids live in one preallocated matrix, so each item costs one matrix-vector product and
    one host read. A centroid is recomputed (mean of its members' u, re-normalised except for l2)
    only when an item joins; each group's member rows are kept contiguous in insertion order, so
    that mean is the same reduction as ``u[members].mean(0)`` without gathering.
    """
    n, d = u.shape
    groups: list[list[int]] = [[0]]
    margin = math.inf
    centroids = u.new_empty((n, d))
    centroids[0] = u[0]
    member_u = u.new_empty((n, n, d))  # [group slot, insertion rank] -> u row
    member_u[0, 0] = u[0]
    normdiff = metric == "cosine_normdiff"
    if normdiff:
        x_norms = torch.linalg.vector_norm(X, dim=-1)
        mean_norms = x_norms.clone()  # norm of each group's mean raw row, by group slot
        member_x = X.new_empty((n, n, d))
        member_x[0, 0] = X[0]
    for i in range(1, n):
        n_groups = len(groups)
        ui = u[i]
        C = centroids[:n_groups]
        if metric == "l2":
            sims = -torch.linalg.vector_norm(C - ui, dim=-1)
        else:
            sims = C @ ui
            if normdiff:
                sims = sims - _norm_penalty(mean_norms[:n_groups], x_norms[i], normdiff_scale)
        values = sims.tolist()
        best = _first_argmax(values)
        margin = min(margin, _margin(values, best, threshold))
        if values[best] >= threshold:
            members = groups[best]
            size = len(members)
            members.append(i)
            member_u[best, size] = ui
            c = member_u[best, : size + 1].mean(dim=0)
            centroids[best] = c if metric == "l2" else _unit(c)
            if normdiff:
                member_x[best, size] = X[i]
                mean_norms[best] = torch.linalg.vector_norm(member_x[best, : size + 1].mean(dim=0))
        else:
            centroids[n_groups] = ui
            member_u[n_groups, 0] = ui
            if normdiff:
                mean_norms[n_groups] = x_norms[i]
                member_x[n_groups, 0] = X[i]
            groups.append([i])
    return groups, margin


def _apply_churn(S: torch.Tensor, prev_labels: Sequence[int], churn: float, clamp: str) -> torch.Tensor:
    """The churn bonus of §5.1 step 4 for pairs previously grouped together, then the clamp at 1.

    ``clamp="all"`` (the reference) clamps every entry of S at 1, also those without the bonus
    (float32 cosines can exceed 1 by an ulp); ``"bonus"`` (the method text) only the bonused ones.
    """
    if isinstance(prev_labels, torch.Tensor):
        labels = prev_labels.detach().to(device="cpu", dtype=torch.long).reshape(-1)
    else:
        labels = torch.as_tensor(list(prev_labels), dtype=torch.long)
    same = labels[:, None] == labels[None, :]
    if clamp == "bonus":
        return torch.where(same, (S + churn).clamp(max=1.0), S)
    return torch.where(same, S + churn, S).clamp(max=1.0)


def _forced_bipartition(S: torch.Tensor, u: torch.Tensor) -> tuple[list[list[int]], float, tuple[int, int], float]:
    """Split around the least similar pair (§5.5); returns groups, anchor similarity, anchor pair, margin.

    The margin is the smaller of the anchor's lead over the next least similar entry (often the
    same pair transposed) and every member's distance from the tie band of ``delta``.
    """
    n = S.shape[0]
    S = S.clone()
    S.fill_diagonal_(2.0)
    flat = S.reshape(-1).tolist()
    low = min(flat)
    pos = flat.index(low)  # the first occurrence in row-major order
    # Row-major first minimum. u @ u.T is not exactly symmetric in float32, so i0 > i1 happens;
    # the reference keeps that order (group 0 is the one holding i0).
    i0, i1 = divmod(pos, n)
    margin = sorted(flat)[1] - low
    delta = (u @ u[i0] - u @ u[i1]).tolist()
    g0, g1 = [i0], [i1]
    for j in range(n):
        if j == i0 or j == i1:
            continue
        d = delta[j]
        margin = min(margin, abs(abs(d) - TIE_EPS))
        if d > TIE_EPS:
            g0.append(j)
        elif d < -TIE_EPS:
            g1.append(j)
        elif len(g0) <= len(g1):
            g0.append(j)
        else:
            g1.append(j)
    return [g0, g1], low, (i0, i1), margin


def _group_means(groups: Sequence[Sequence[int]], rows: torch.Tensor) -> torch.Tensor:
    """Mean row of each group: ``rows[g].mean(0)``, with all singletons gathered in one step."""
    means = rows.new_empty((len(groups), rows.shape[-1]))
    singles = [k for k, g in enumerate(groups) if len(g) == 1]
    if singles:
        means[singles] = rows[[groups[k][0] for k in singles]]
    for k, g in enumerate(groups):
        if len(g) > 1:
            means[k] = rows[list(g)].mean(dim=0)
    return means


def _merge_small_groups(
    groups: list[list[int]], u: torch.Tensor, threshold: float, min_group_size: int
) -> tuple[list[list[int]], int, float]:
    """Merge groups below min_group_size into their best match (§5.6), quirks included.

    Returns the groups, the number merged and the decision margin."""
    groups = [list(g) for g in groups]
    means = _group_means(groups, u)  # M_g, not re-normalised
    small = [gid for gid, g in enumerate(groups) if len(g) < min_group_size]
    merged = 0
    margin = math.inf
    for gid in small:
        if len(groups[gid]) >= min_group_size:
            continue
        scores = (means @ means[gid]).tolist()  # emptied groups keep their stale mean
        scores[gid] = SELF_MERGE_SCORE
        best = _first_argmax(scores)
        margin = min(margin, _margin(scores, best, threshold))
        if scores[best] < threshold:
            continue
        if sum(1 for g in groups if g) <= 2:
            continue
        groups[best].extend(groups[gid])
        groups[gid] = []
        means[best] = u[groups[best]].mean(dim=0)
        merged += 1
    return [g for g in groups if g], merged, margin


@torch.no_grad()
def cluster(
    X: torch.Tensor,
    *,
    threshold: float,
    metric: str = "cosine",
    prev_labels: Sequence[int] | None = None,
    allow_forced_bipartition: bool = False,
    min_group_size: int = 1,
    churn_penalty: float = 0.0,
    normdiff_scale: float = 16.0,
    upper_l2_threshold: float = 0.0,
    threshold_kind: str = "sim_threshold",
    churn_clamp: str = "all",
) -> ClusterResult:
    """CLUSTER(X, tau, metric, prev, allow_forced) of method §5.1 on an (n, d) float32 matrix.

    Refuses (``ConfigError``) a threshold at which the small-group merge could pick a group's own
    score of -1 and merge the group into itself (a defect of the reference's merge).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown clustering metric {metric!r}; allowed: {', '.join(METRICS)}")
    if churn_clamp not in CHURN_CLAMPS:
        raise ValueError(f"unknown churn_clamp {churn_clamp!r}; allowed: {', '.join(CHURN_CLAMPS)}")
    X = _check_input(X)
    n = X.shape[0]
    tau = float(upper_l2_threshold) if metric == "l2" else float(threshold)
    if merge_can_pick_itself(tau, min_group_size):
        raise ConfigError(
            f"clustering threshold {tau} with min_group_size={min_group_size}: a small group could merge into "
            f"itself (its own merge score is {SELF_MERGE_SCORE}); use a threshold above {SELF_MERGE_SCORE}"
        )
    common = dict(
        threshold=tau,
        threshold_kind=threshold_kind,
        metric=metric,
        n_items=n,
        allow_forced_bipartition=allow_forced_bipartition,
        min_group_size=min_group_size,
    )
    if n <= 1:
        groups = [[0]] if n == 1 else []
        return ClusterResult(
            groups=groups,
            origin="single_item",
            forced_bipartition=False,
            groups_before_merge=len(groups),
            groups_after_merge=len(groups),
            merged_count=0,
            small_groups_before_merge=0,
            singletons_before_merge=len(groups),
            groups_before_force=len(groups),
            anchor_similarity=None,
            sim_mean=1.0,
            sim_std=0.0,
            sim_min=1.0,
            sim_max=1.0,
            **common,
        )

    u = _score_vectors(X, metric)
    S = _similarity_matrix(X, u, metric, normdiff_scale)
    sim_mean, sim_std, sim_min, sim_max = _offdiag_stats(S)
    if metric == "cosine" and prev_labels is not None and churn_penalty > 0 and len(prev_labels) == n:
        S = _apply_churn(S, prev_labels, churn_penalty, churn_clamp)

    groups, margin = _assign_sequential(X, u, tau, metric, normdiff_scale)
    groups_before_force = len(groups)
    forced = False
    anchor_similarity = None
    anchor_pair = None
    if len(groups) == 1:
        if allow_forced_bipartition:
            groups, anchor_similarity, anchor_pair, forced_margin = _forced_bipartition(S, u)
            margin = min(margin, forced_margin)
            forced = True
            origin = "forced_bipartition"
        else:
            origin = "collapsed"
    else:
        origin = "natural"

    sizes = [len(g) for g in groups]
    small_before = sum(1 for s in sizes if s < min_group_size)
    singletons_before = sum(1 for s in sizes if s == 1)
    groups_before_merge = len(groups)
    merged = 0
    # With two groups or fewer no merge can happen (the merge needs > 2 non-empty groups).
    if min_group_size > 1 and len(groups) > 2 and small_before and not forced:
        groups, merged, merge_margin = _merge_small_groups(groups, u, tau, min_group_size)
        margin = min(margin, merge_margin)

    return ClusterResult(
        groups=groups,
        origin=origin,
        forced_bipartition=forced,
        groups_before_merge=groups_before_merge,
        groups_after_merge=len(groups),
        merged_count=merged,
        small_groups_before_merge=small_before,
        singletons_before_merge=singletons_before,
        groups_before_force=groups_before_force,
        anchor_similarity=anchor_similarity,
        anchor_pair=anchor_pair,
        decision_margin=margin,
        sim_mean=sim_mean,
        sim_std=sim_std,
        sim_min=sim_min,
        sim_max=sim_max,
        **common,
    )


def aggregate_group_features(groups: Sequence[Sequence[int]], rows: torch.Tensor, mode: str = "mean") -> torch.Tensor:
    """One feature row per group from its members' rows (§5.7); unknown modes fall back to the mean.

    ``mean``: the mean row; ``mean_std`` / ``mean_var``: plus the population std / variance per
    dimension (0 for one row); ``mean_global_offset``: plus (mean - mean of all rows of the level).
    """
    rows = rows.detach().to(dtype=torch.float32)
    if not groups:
        return rows.new_zeros((0, rows.shape[-1]))
    mu = _group_means(groups, rows)
    if mode in ("mean_std", "mean_var"):
        spread = torch.zeros_like(mu)
        for k, g in enumerate(groups):
            if len(g) > 1:
                R = rows[list(g)]
                spread[k] = R.std(dim=0, unbiased=False) if mode == "mean_std" else R.var(dim=0, unbiased=False)
        return mu + spread
    if mode == "mean_global_offset":
        return mu + (mu - rows.mean(dim=0))
    return mu
