"""Heads grouped on any similarity matrix, and two groupings compared against chance: the method's
level-0 procedure written on the similarity (sequential centroid assignment, forced bipartition,
small-group merge), complete linkage at the same group count, and the ARI of two groupings against a
permutation null. Pure numpy; :mod:`aah_viz.analysis.head_similarity` builds its table with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis.partitions import ari_rows
from aah_viz.analysis.similarity_measures import NORM_EPS
from aah_viz.method import SIM_THRESHOLD

PROCEDURES = ("method", "complete")  # the method's level-0 procedure; complete linkage at its group count
TIE_EPS = 1e-8  # the forced bipartition's tie band (instrumentation.routing.clustering)
SELF_MERGE_SCORE = -1.0  # a group's own score in the small-group merge (method §5.6)
ALPHA = 0.05  # stability and agreement: p-value at or below it

DEFAULT_AGREEMENT_SAMPLES = 999

# Words of the stability and agreement verdicts.
STABLE, UNSTABLE = "stable", "unstable"
AGREE = "agree"
UNDEFINED = cv.UNDEFINED


def _centroid_score(sim: np.ndarray, i: int, members: list[int]) -> float:
    """u_i . unit(mean of the members' u), from the similarity matrix alone (a kernel form of the
    centroid cosine): mean_m S[i, m] / |mean u|, with |mean u|^2 = mean_{m, m'} S[m, m']. A group of
    one keeps its member's own row as its centroid, as the routine does."""
    if len(members) == 1:
        return float(sim[i, members[0]])
    norm = np.sqrt(max(float(sim[np.ix_(members, members)].mean()), 0.0))
    return float(sim[i, members].mean() / max(norm, NORM_EPS))


def _forced_bipartition(sim: np.ndarray) -> list[list[int]]:
    """Split around the least similar pair (method §5.5): every other head joins the anchor it is
    more similar to; ties (within ``TIE_EPS``) go to the smaller group."""
    n = sim.shape[0]
    s = np.array(sim, dtype=np.float64, copy=True)
    np.fill_diagonal(s, 2.0)
    i0, i1 = divmod(int(np.argmin(s)), n)  # the first minimum in row-major order
    g0, g1 = [i0], [i1]
    for j in range(n):
        if j in (i0, i1):
            continue
        d = sim[j, i0] - sim[j, i1]
        if d > TIE_EPS:
            g0.append(j)
        elif d < -TIE_EPS:
            g1.append(j)
        elif len(g0) <= len(g1):
            g0.append(j)
        else:
            g1.append(j)
    return [g0, g1]


def _merge_small(groups: list[list[int]], sim: np.ndarray, threshold: float, min_group_size: int) -> list[list[int]]:
    """The small-group merge of method §5.6 with the reference's quirks: groups below the minimum
    size, in order, join the group whose (not re-normalised) mean row has the largest dot product
    with theirs if it reaches the threshold and more than two groups remain; an emptied group keeps
    its stale mean (the members it had when its mean was last set)."""
    groups = [list(g) for g in groups]
    mean_of = [list(g) for g in groups]  # the members each group's mean was computed from
    small = [gid for gid, g in enumerate(groups) if len(g) < min_group_size]
    for gid in small:
        if len(groups[gid]) >= min_group_size:
            continue
        scores = [float(sim[np.ix_(m, mean_of[gid])].mean()) for m in mean_of]
        scores[gid] = SELF_MERGE_SCORE
        best = max(range(len(scores)), key=scores.__getitem__)
        if scores[best] < threshold or sum(1 for g in groups if g) <= 2:
            continue
        groups[best].extend(groups[gid])
        groups[gid] = []
        mean_of[best] = list(groups[best])
    return [g for g in groups if g]


def method_partition(
    sim: np.ndarray, threshold: float = SIM_THRESHOLD, *, min_group_size: int = 1, allow_forced: bool = True
) -> tuple[np.ndarray, str]:
    """The method's level-0 grouping (method §5.1, §5.5, §5.6; no churn) of the items of ``sim``.

    Items in index order join the most similar existing group (first on ties) if its centroid
    score reaches ``threshold``, else open a new group; one group out of two or more items becomes a
    forced bipartition (``allow_forced``) or stays collapsed; small groups are then merged. Written
    on the similarity matrix, so it groups by any similarity; on cosine similarities it is the model's
    ``instrumentation.routing.clustering.cluster`` (tests compare them). Returns dense labels and the
    origin (``natural``, ``forced_bipartition``, ``collapsed``, ``single_item``).
    """
    sim = np.asarray(sim, dtype=np.float64)
    n = sim.shape[0]
    if n <= 1:
        return np.zeros(n, dtype=np.int64), "single_item"
    groups: list[list[int]] = [[0]]
    for i in range(1, n):
        scores = [_centroid_score(sim, i, g) for g in groups]
        best = max(range(len(scores)), key=scores.__getitem__)
        if scores[best] >= threshold:
            groups[best].append(i)
        else:
            groups.append([i])
    origin = "natural"
    if len(groups) == 1:
        if not allow_forced:
            return np.zeros(n, dtype=np.int64), "collapsed"
        groups, origin = _forced_bipartition(sim), cv.FORCED
    elif min_group_size > 1 and len(groups) > 2 and any(len(g) < min_group_size for g in groups):
        groups = _merge_small(groups, sim, threshold, min_group_size)
    labels = np.empty(n, dtype=np.int64)
    for gid, members in enumerate(groups):
        labels[members] = gid
    return cv.dense_labels(labels), origin


def complete_partition(sim: np.ndarray, n_groups: int) -> np.ndarray:
    """Complete linkage on ``1 - sim`` into ``n_groups`` groups (``cluster_validity``'s batched routine)."""
    return cv.complete_linkage_labels(cv.cosine_distance(np.asarray(sim, dtype=np.float64))[None], n_groups)[0]


def group(sim: np.ndarray, procedure: str, *, threshold: float, min_group_size: int) -> tuple[np.ndarray, str]:
    """Both procedures: the method's, and complete linkage at the method's group count."""
    labels, origin = method_partition(sim, threshold, min_group_size=min_group_size)
    if procedure == "method":
        return labels, origin
    if procedure != "complete":
        raise ValueError(f"unknown grouping procedure {procedure!r}; allowed: {', '.join(PROCEDURES)}")
    return complete_partition(sim, int(labels.max()) + 1), "complete_linkage"


# ---------------------------------------------------------------------------- ARI against chance


@dataclass(frozen=True)
class Agreement:
    """The ARI of two groupings of the same heads against a permutation null."""

    ari: float
    null_mean: float
    null_p95: float
    p_value: float
    verdict: str  # agree (or stable) when p <= ALPHA, else chance (unstable); undefined for trivial groupings


def _trivial(labels: np.ndarray) -> bool:
    k = len(np.unique(labels))
    return k < 2 or k >= len(labels)


def ari_against_chance(
    a, b, *, samples: int = DEFAULT_AGREEMENT_SAMPLES, rng: np.random.Generator, yes: str = AGREE, no: str = cv.CHANCE
) -> Agreement:
    """ARI of groupings ``a`` and ``b``, and its chance: ``b``'s labels permuted ``samples`` times
    (every grouping with ``b``'s group sizes equally likely, independent of ``a``); ``yes`` when the
    p-value is at most ``ALPHA``. ARI takes few values on a dozen heads, so many null draws tie with
    the observed one; ties are broken at random (p = (#null > observed + U (1 + #null == observed)) /
    (1 + samples), U uniform in (0, 1], from ``rng``), which gives independent groupings a false
    ``yes`` in ALPHA of cases exactly, where counting ties as exceedances gives about 3%. A grouping
    with one group or every head alone says nothing: ``undefined``."""
    a, b = np.asarray(a), np.asarray(b)
    if _trivial(a) or _trivial(b):
        return Agreement(np.nan, np.nan, np.nan, np.nan, UNDEFINED)
    observed = float(ari_rows(a[None], b[None])[0])
    permuted = np.stack([rng.permutation(b) for _ in range(samples)])
    null = ari_rows(np.broadcast_to(a, permuted.shape), permuted)
    greater = np.count_nonzero(null > observed + 1e-12)
    ties = np.count_nonzero(np.abs(null - observed) <= 1e-12)
    p_value = (greater + (1.0 - rng.random()) * (1 + ties)) / (1 + samples)
    verdict = yes if p_value <= ALPHA else no
    return Agreement(observed, float(null.mean()), float(np.quantile(null, 0.95)), float(p_value), verdict)


# ---------------------------------------------------------------------------- the table
