"""Tests of a difference and p-values against a null: Welch's t, permutation and sign-flip tests, Holm.

Monte-Carlo draws come from ``numpy.random.default_rng(seed)``: the same input and seed give the same p.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr  # Student t CDF; scipy.stats is heavier to import

DEFAULT_SEED = 0
EXACT_PERMUTATION_LIMIT = 20000  # enumerate every relabelling up to this many, else sample


@dataclass(frozen=True)
class TestResult:
    statistic: float
    p_value: float
    df: float = math.nan
    n_a: int = 0
    n_b: int = 0
    method: str = ""
    note: str = ""


def finite(values: Iterable[float]) -> np.ndarray:
    """The finite values as a float array (None, NaN and infinities dropped)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Welch's two-sided t-test of mean(a) - mean(b) with the Welch-Satterthwaite degrees of freedom.

    Needs at least two values on each side and some variance; otherwise the p-value is NaN and
    ``note`` says why.
    """
    x, y = finite(a), finite(b)
    na, nb = int(x.size), int(y.size)
    if na < 2 or nb < 2:
        return TestResult(math.nan, math.nan, math.nan, na, nb, "welch_t", "needs n >= 2 per regime")
    va, vb = x.var(ddof=1) / na, y.var(ddof=1) / nb
    se2 = va + vb
    if se2 == 0:
        return TestResult(math.nan, math.nan, math.nan, na, nb, "welch_t", "zero variance in both regimes")
    t = (x.mean() - y.mean()) / math.sqrt(se2)
    dof = se2**2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    p = 2.0 * float(stdtr(dof, -abs(t)))
    return TestResult(float(t), float(min(1.0, p)), float(dof), na, nb, "welch_t")


def permutation_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = 9999,
    seed: int = DEFAULT_SEED,
    exact_limit: int = EXACT_PERMUTATION_LIMIT,
) -> TestResult:
    """Two-sided permutation test of the difference of means, relabelling runs (seeds) between regimes.

    Every relabelling is enumerated when there are at most ``exact_limit`` of them (the p-value is
    then exact, as in ``scipy.stats.permutation_test``); otherwise ``n_resamples`` random ones are
    drawn from ``default_rng(seed)`` and p = (1 + #extreme) / (1 + n_resamples).
    """
    x, y = finite(a), finite(b)
    na, nb = int(x.size), int(y.size)
    if na < 2 or nb < 2:  # with one run on a side no relabelling can reach significance
        return TestResult(math.nan, math.nan, math.nan, na, nb, "permutation (not run)", "needs n >= 2 per regime")
    pooled = np.concatenate([x, y])
    observed = x.mean() - y.mean()
    total = pooled.sum()
    n = na + nb
    eps = 1e-12 * max(1.0, abs(observed))
    n_comb = math.comb(n, na)
    if n_comb <= exact_limit:
        sums = np.array([pooled[list(c)].sum() for c in itertools.combinations(range(n), na)])
        diffs = sums / na - (total - sums) / nb
        p = float(np.mean(np.abs(diffs) >= abs(observed) - eps))
        method = "permutation (exact)"
    else:
        rng = np.random.default_rng(seed)
        extreme = 0
        for _ in range(n_resamples):
            perm = rng.permutation(n)
            sa = pooled[perm[:na]].sum()
            if abs(sa / na - (total - sa) / nb) >= abs(observed) - eps:
                extreme += 1
        p = (1 + extreme) / (1 + n_resamples)
        method = f"permutation ({n_resamples} random)"
    return TestResult(float(observed), min(1.0, p), math.nan, na, nb, method)


def paired_permutation_test(
    differences: Sequence[float], *, n_resamples: int = 9999, seed: int = DEFAULT_SEED, exact_limit: int = 1 << 16
) -> TestResult:
    """Two-sided sign-flip test of mean(differences) = 0 for runs paired by seed.

    Under the null each seed's difference is as likely negated; all 2**n sign patterns are
    enumerated when there are at most ``exact_limit`` (as ``scipy.stats.permutation_test`` with
    ``permutation_type="samples"``), else ``n_resamples`` seeded random ones.
    """
    d = finite(differences)
    n = int(d.size)
    if n < 2:
        return TestResult(
            math.nan, math.nan, math.nan, n, n, "paired sign-flip (not run)", "needs at least 2 shared seeds"
        )
    observed = float(d.mean())
    eps = 1e-12 * max(1.0, abs(observed))
    if 2**n <= exact_limit:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        method = "paired sign-flip (exact)"
    else:
        signs = np.random.default_rng(seed).choice([-1, 1], size=(n_resamples, n))
        method = f"paired sign-flip ({n_resamples} random)"
    means = (signs * d).mean(axis=1)
    extreme = int(np.sum(np.abs(means) >= abs(observed) - eps))
    p = extreme / len(means) if 2**n <= exact_limit else (1 + extreme) / (1 + n_resamples)
    return TestResult(observed, min(1.0, float(p)), math.nan, n, n, method)


def adjusted_p(observed: float, null: np.ndarray) -> float:
    """(1 + #null >= observed) / (1 + draws): the one-sided p-value of ``observed`` against sampled null
    values (of the best of many columns: adjusted for the choice); NaN without a null or an observation."""
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
