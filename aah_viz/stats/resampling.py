"""Seeded bootstrap intervals, all ending in one percentile interval.

The draw schemes differ where the numbers already published depend on them: a bootstrap of values draws
indices (``resample_indices``), a cluster bootstrap draws how often each cluster is taken
(``resample_counts``, or ``multinomial_counts`` for the syntax probes' interval of a difference).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

LEVEL = 0.95
DEFAULT_BOOT = 2000
DEFAULT_SEED = 0


def percentile_interval(draws: np.ndarray, level: float = LEVEL, axis: int | None = None):
    """The central ``level`` percentile interval of bootstrap draws (along ``axis``): (low, high)."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha], axis=axis)
    return lo, hi


def resample_indices(n: int, n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n_boot, n) indices drawn with replacement from ``default_rng(seed)``: one resample per row."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap_ci(
    values: Sequence[float],
    *,
    statistic: Callable[..., np.ndarray] = np.mean,
    n_boot: int = DEFAULT_BOOT,
    level: float = LEVEL,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` (``np.mean``, ``np.median``: called with ``axis=1``)
    of the values; ``(nan, nan)`` for fewer than two values. The same values and seed give the same interval."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return (math.nan, math.nan)
    lo, hi = percentile_interval(statistic(arr[resample_indices(arr.size, n_boot, seed)], axis=1), level)
    return (float(lo), float(hi))


def bootstrap_mean_difference(
    on: np.ndarray, off: np.ndarray, *, n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of mean(on) - mean(off), resampling each side independently."""
    if on.size < 2 or off.size < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    da = on[rng.integers(0, on.size, size=(n_boot, on.size))].mean(axis=1)
    db = off[rng.integers(0, off.size, size=(n_boot, off.size))].mean(axis=1)
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return (float(lo), float(hi))


def as_columns(values: np.ndarray) -> np.ndarray:
    """Values as float64 columns: (n_items,) becomes (n_items, 1)."""
    values = np.asarray(values, dtype=np.float64)
    return values[:, None] if values.ndim == 1 else values


def cluster_sums(clusters: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: the sum of each column (n_clusters, k) and the number of items (n_clusters,)."""
    _, inverse = np.unique(clusters, return_inverse=True)
    n_c = int(inverse.max()) + 1 if len(inverse) else 0
    sums = np.zeros((n_c, values.shape[1]))
    np.add.at(sums, inverse, values)
    counts = np.bincount(inverse, minlength=n_c).astype(np.float64)
    return sums, counts


def resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) how often each of n clusters is drawn when n are drawn with replacement, per resample
    (a multinomial(n, uniform) row, built from n_boot * n uniform draws: cheaper than ``rng.multinomial``)."""
    draws = rng.integers(0, n, size=(n_boot, n), dtype=np.int64) + (np.arange(n_boot) * n)[:, None]
    return np.bincount(draws.ravel(), minlength=n_boot * n).reshape(n_boot, n)


def multinomial_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The same counts as :func:`resample_counts` drawn by ``rng.multinomial`` (another random stream)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)


def cluster_bootstrap_interval(
    clusters: np.ndarray,
    values: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
    level: float = LEVEL,
    counts_of: Callable[[int, int, np.random.Generator], np.ndarray] = resample_counts,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of each column's mean over items, resampling clusters with replacement
    (how often each is drawn: ``counts_of``), since items of a cluster (sentence, document) move together.

    ``values``: (n_items,) or (n_items, k); returns two (k,) arrays (NaN with fewer than 2 clusters)."""
    values = as_columns(values)
    sums, counts = cluster_sums(np.asarray(clusters), values)
    n = len(counts)
    k = values.shape[1]
    if n < 2 or n_boot < 1:
        return np.full(k, np.nan), np.full(k, np.nan)
    weights = counts_of(n, n_boot, rng)
    # whole numbers (hit counts) stay exact in float32 below 2**24, and the product runs twice as fast
    exact = np.all(sums == np.round(sums)) and np.abs(sums).sum() * n < 2**24
    kind = np.float32 if exact else np.float64
    totals = (weights.astype(kind) @ sums.astype(kind)).astype(np.float64)
    boot = totals / np.maximum(weights @ counts, 1.0)[:, None]
    return percentile_interval(boot, level, axis=0)


def cluster_mean_interval(
    clusters: np.ndarray, values: np.ndarray, n_boot: int, rng: np.random.Generator, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile interval of the mean of one column of values, resampling whole clusters with
    ``rng.multinomial`` (the syntax probes' interval of a head's lead over the best fixed offset)."""
    lo, hi = cluster_bootstrap_interval(clusters, values, n_boot, rng, level, counts_of=multinomial_counts)
    return float(lo[0]), float(hi[0])
