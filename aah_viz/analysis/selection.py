"""Statistics for claims about the *best* of many heads: intervals, selection-aware scores, nulls.

A probe scores every head on the same items and reports the best one. The best of 270 noisy
accuracies is optimistic, so a claim about it needs statistics that know a head was chosen:

- :func:`cluster_bootstrap_interval`: a percentile interval of every column's mean (a head's
  accuracy), resampling whole clusters (sentences, documents), since items of a cluster move together;
- :func:`split_half_best`: the best column chosen on a random half of the clusters and scored on the
  other half (both ways round, averaged over splits): an honest estimate of what the chosen head does
  on items it was not chosen on;
- :func:`max_null`: a permutation null for the best column. Within each item the gold label is moved
  at random among the item's choices (which candidate is right is shuffled, what each head picked is
  kept), every head is rescored and the best of all heads taken, per draw. The adjusted p of the
  observed best accuracy (:func:`adjusted_p`) then accounts for the choice among all heads;
- :func:`mantel`: a within-layer Mantel test between two distance matrices over the same heads
  (Spearman's rho over the pairs, heads relabelled for the null; every relabelling when they are few);
- :func:`holm`: Holm's step-down adjustment of several p-values.

Pure numpy and scipy; every random draw comes from the generator passed in.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse

LEVEL = 0.95
DEFAULT_SPLITS = 20
DEFAULT_NULL_DRAWS = 200
EXACT_LIMIT = 5040  # relabellings enumerated in full up to 7! heads


def _cluster_sums(clusters: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: the sum of each column (n_clusters, k) and the number of items (n_clusters,)."""
    _, inverse = np.unique(clusters, return_inverse=True)
    n_c = int(inverse.max()) + 1 if len(inverse) else 0
    sums = np.zeros((n_c, values.shape[1]))
    np.add.at(sums, inverse, values)
    counts = np.bincount(inverse, minlength=n_c).astype(np.float64)
    return sums, counts


def _as_columns(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[:, None] if values.ndim == 1 else values


def resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) how often each of n clusters is drawn when n are drawn with replacement, per resample
    (a multinomial(n, uniform) row, built from n_boot * n uniform draws: cheaper than ``rng.multinomial``)."""
    draws = rng.integers(0, n, size=(n_boot, n), dtype=np.int64) + (np.arange(n_boot) * n)[:, None]
    return np.bincount(draws.ravel(), minlength=n_boot * n).reshape(n_boot, n)


def cluster_bootstrap_interval(
    clusters: np.ndarray, values: np.ndarray, n_boot: int, rng: np.random.Generator, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of each column's mean over items, resampling clusters with replacement
    (:func:`resample_counts`).

    ``values``: (n_items,) or (n_items, k); returns two (k,) arrays (NaN with fewer than 2 clusters)."""
    values = _as_columns(values)
    sums, counts = _cluster_sums(np.asarray(clusters), values)
    n = len(counts)
    k = values.shape[1]
    if n < 2 or n_boot < 1:
        return np.full(k, np.nan), np.full(k, np.nan)
    weights = resample_counts(n, n_boot, rng)
    # whole numbers (hit counts) stay exact in float32 below 2**24, and the product runs twice as fast
    exact = np.all(sums == np.round(sums)) and np.abs(sums).sum() * n < 2**24
    kind = np.float32 if exact else np.float64
    totals = (weights.astype(kind) @ sums.astype(kind)).astype(np.float64)
    boot = totals / np.maximum(weights @ counts, 1.0)[:, None]
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha], axis=0)
    return lo, hi


@dataclass(frozen=True)
class SplitHalf:
    score: float  # the mean over splits (both halves each) of the chosen column's held-out mean
    chosen_share: float  # how often the column best on all items was the one chosen
    n_splits: int


def split_half_best(
    clusters: np.ndarray, values: np.ndarray, rng: np.random.Generator, n_splits: int = DEFAULT_SPLITS
) -> SplitHalf:
    """The best column chosen on half of the clusters, scored on the other half (and the other way
    round), averaged over ``n_splits`` random halvings. Ties go to the first column, as the probe's."""
    values = _as_columns(values)
    sums, counts = _cluster_sums(np.asarray(clusters), values)
    n = len(counts)
    if n < 2 or n_splits < 1:
        return SplitHalf(np.nan, np.nan, 0)
    overall = int(np.argmax(sums.sum(0) / counts.sum()))
    scores, same = [], 0
    for _ in range(n_splits):
        half = np.zeros(n, dtype=bool)
        half[rng.permutation(n)[: n // 2]] = True
        for pick, score_on in ((half, ~half), (~half, half)):
            chosen = int(np.argmax(sums[pick].sum(0) / counts[pick].sum()))
            scores.append(sums[score_on, chosen].sum() / counts[score_on].sum())
            same += chosen == overall
    return SplitHalf(float(np.mean(scores)), same / (2 * n_splits), n_splits)


def _choice_matrix(n_choices: np.ndarray, choice: np.ndarray) -> tuple[sparse.csc_matrix, np.ndarray]:
    """(sum n_choices, k) 0/1: row (item, group) has a 1 in the columns that picked that group."""
    offsets = np.concatenate([[0], np.cumsum(n_choices)[:-1]]).astype(np.int64)
    item, col = np.nonzero(choice >= 0)
    rows = offsets[item] + choice[item, col]
    total = int(n_choices.sum())
    m = sparse.csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, col)), shape=(total, choice.shape[1]))
    return m, offsets


def max_null(
    n_choices: np.ndarray,
    n_correct: np.ndarray,
    choice: np.ndarray,
    n_draws: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The best column's accuracy under the within-item label shuffle, one value per draw.

    Item ``i`` has ``n_choices[i]`` candidate groups (words, mentions), ``n_correct[i]`` of them right;
    ``choice[i, h]`` is the group column ``h`` picked (-1: none, never right). Each draw makes a random
    ``n_correct[i]``-subset of the groups right, independently per item, and takes the best column's
    share of items whose picked group is right."""
    n_choices = np.asarray(n_choices, dtype=np.int64)
    n_correct = np.minimum(np.asarray(n_correct, dtype=np.int64), n_choices)
    choice = np.asarray(choice, dtype=np.int64)
    n_items = len(n_choices)
    if n_items == 0 or n_draws < 1:
        return np.zeros(0)
    if np.any(choice >= n_choices[:, None]):
        raise ValueError("a choice index is not below its item's number of choices")
    m, offsets = _choice_matrix(n_choices, choice)
    one = np.nonzero(n_correct == 1)[0]
    many = np.nonzero(n_correct > 1)[0]
    rows, cols = [], []
    draws = np.arange(n_draws)
    if len(one):  # the common case (one gold head word, one gold name): one uniform group per item
        picked = offsets[one][None, :] + (rng.random((n_draws, len(one))) * n_choices[one][None, :]).astype(np.int64)
        rows.append(np.repeat(draws, len(one)))
        cols.append(picked.ravel())
    for i in many:  # several right groups: a random subset of that size, per draw
        keys = rng.random((n_draws, n_choices[i]))
        picked = np.argsort(keys, axis=1)[:, : n_correct[i]] + offsets[i]
        rows.append(np.repeat(draws, n_correct[i]))
        cols.append(picked.ravel())
    if not rows:
        return np.zeros(n_draws)
    r, c = np.concatenate(rows), np.concatenate(cols)
    order = np.argsort(r, kind="stable")  # rows in draw order: the CSR structure directly, no conversion
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_draws))])
    select = sparse.csr_matrix((np.ones(len(r)), c[order], indptr), shape=(n_draws, int(n_choices.sum())))
    hits = (select @ m).toarray()  # (n_draws, k): items each column gets right under this draw
    return hits.max(axis=1) / n_items


def adjusted_p(observed: float, null: np.ndarray) -> float:
    """(1 + #null >= observed) / (1 + draws): the p-value of the best column against the max null."""
    if len(null) == 0 or not np.isfinite(observed):
        return np.nan
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + len(null)))


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN kept out of the count and returned as NaN)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.nonzero(np.isfinite(p))[0]
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        out[index] = running
    return out


@dataclass(frozen=True)
class Mantel:
    rho: float  # Spearman's rho between the two matrices' off-diagonal pairs
    p_value: float  # one-sided: relabellings with rho at least the observed one
    null_mean: float
    null_p95: float
    exact: bool  # every relabelling of the heads enumerated
    n_relabelings: int  # relabellings in the null (all of them when exact)
    n_items: int


def _ranks(values: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(values)


def mantel(
    a: np.ndarray,
    b: np.ndarray,
    n_perm: int,
    rng: np.random.Generator,
    exact_limit: int = EXACT_LIMIT,
) -> Mantel:
    """Mantel test of two symmetric (n, n) distance matrices over the same items.

    The statistic is Spearman's rho over the pairs i < j; the null relabels the items of ``b`` (the same
    permutation on rows and columns). When n! is at most ``max(n_perm, exact_limit)`` every relabelling
    is taken (the identity included), so the p-value is exact; else ``n_perm`` random ones, and
    p = (1 + #null >= rho) / (1 + n_perm)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[0]
    if a.shape != (n, n) or b.shape != (n, n):
        raise ValueError(f"the two matrices must be square and the same size, got {a.shape} and {b.shape}")
    iu = np.triu_indices(n, 1)
    if n < 3 or np.ptp(a[iu]) == 0 or np.ptp(b[iu]) == 0:
        return Mantel(np.nan, np.nan, np.nan, np.nan, False, 0, n)
    ra = _ranks(a[iu])
    ra = (ra - ra.mean()) / np.linalg.norm(ra - ra.mean())
    rank_b = np.zeros((n, n))
    rank_b[iu] = _ranks(b[iu])
    rank_b = rank_b + rank_b.T  # ranks are fixed by the values, so relabelling only moves them

    def rho(perm: np.ndarray) -> float:
        rb = rank_b[np.ix_(perm, perm)][iu]
        rb = rb - rb.mean()
        return float(ra @ rb / np.linalg.norm(rb))

    observed = rho(np.arange(n))
    exact = math.factorial(n) <= max(n_perm, exact_limit)
    if exact:
        null = np.array([rho(np.array(p)) for p in itertools.permutations(range(n))])
        p_value = float(np.mean(null >= observed - 1e-12))
    else:
        null = np.array([rho(rng.permutation(n)) for _ in range(n_perm)])
        p_value = float((1 + np.sum(null >= observed - 1e-12)) / (1 + n_perm))
    return Mantel(observed, p_value, float(null.mean()), float(np.quantile(null, 0.95)), exact, len(null), n)
