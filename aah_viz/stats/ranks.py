"""Rank statistics: Spearman's rho row by row, within strata (with a permutation null and a bootstrap
interval), and the Mantel test between two distance matrices. Ranks are scipy's (ties averaged)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from aah_viz.stats.resampling import LEVEL, percentile_interval
from aah_viz.stats.significance import adjusted_p

EXACT_LIMIT = 5040  # relabellings enumerated in full up to 7! items


def rankdata(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Ranks from 1 along ``axis``, ties given their average rank (``scipy.stats.rankdata``, imported on
    use: scipy.stats is slow to import)."""
    from scipy.stats import rankdata as scipy_rankdata

    return scipy_rankdata(np.asarray(a, dtype=np.float64), axis=axis)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of x against each row of y (ties averaged); NaN where a side is constant."""
    rx = rankdata(x, axis=-1)
    ry = rankdata(y, axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    denom = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 1e-12, (rx * ry).sum(-1) / np.where(denom > 1e-12, denom, 1), np.nan)


def stratified_spearman(
    windows: list[np.ndarray],
    scores: list[np.ndarray],
    n_boot: int = 1000,
    permutations: int = 1000,
    seed: int = 0,
    level: float = LEVEL,
) -> dict:
    """Head-weighted mean of within-stratum Spearman rhos, with a within-stratum permutation null
    (two-sided p) and a bootstrap over heads within strata. Strata where windows or scores are
    constant, or with fewer than 3 heads, are left out (``reason`` says why when none is left)."""
    use_w, use_s, reasons = [], [], set()
    for w, s in zip(windows, scores):
        ok = np.isfinite(w) & np.isfinite(s)
        w, s = np.asarray(w, dtype=np.float64)[ok], np.asarray(s, dtype=np.float64)[ok]
        if len(w) < 3:
            reasons.add("fewer than 3 heads")
        elif len(np.unique(w)) < 2:
            reasons.add("all heads one window")
        elif len(np.unique(s)) < 2:
            reasons.add("score constant")
        else:
            use_w.append(w)
            use_s.append(s)
    n_heads = int(sum(len(w) for w in use_w))
    out = {"rho": np.nan, "null_mean": np.nan, "p_value": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    out.update(
        n_heads=n_heads, n_layers=len(use_w), degenerate=not use_w, reason="" if use_w else "; ".join(sorted(reasons))
    )
    if not use_w:
        return out
    weights = np.array([len(w) for w in use_w], dtype=np.float64)
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    rho = float(sum(wt * spearman_rows(w[None], s[None])[0] for wt, w, s in zip(weights, use_w, use_s)))
    null = np.zeros(permutations)
    boot = np.zeros(n_boot)
    boot_ok = np.ones(n_boot, dtype=bool)
    for wt, w, s in zip(weights, use_w, use_s):
        perm = np.stack([rng.permutation(w) for _ in range(permutations)])
        null += wt * spearman_rows(perm, np.broadcast_to(s, perm.shape))
        idx = rng.integers(0, len(w), size=(n_boot, len(w)))
        b = spearman_rows(w[idx], s[idx])
        boot_ok &= np.isfinite(b)
        boot += wt * np.nan_to_num(b)
    boot = boot[boot_ok]
    lo, hi = percentile_interval(boot, level) if len(boot) else (np.nan, np.nan)
    out.update(
        rho=rho,
        null_mean=float(null.mean()),
        p_value=adjusted_p(abs(rho), np.abs(null)),  # two-sided: |rho| against |null|
        ci_low=float(lo),
        ci_high=float(hi),
    )
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
    ra = rankdata(a[iu])
    ra = (ra - ra.mean()) / np.linalg.norm(ra - ra.mean())
    rank_b = np.zeros((n, n))
    rank_b[iu] = rankdata(b[iu])
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
        p_value = adjusted_p(observed, null)
    return Mantel(observed, p_value, float(null.mean()), float(np.quantile(null, 0.95)), exact, len(null), n)
