"""Seed statistics for paper tables: summaries, bootstrap intervals, significance, factorial effects.

Everything here is a pure function of numbers (numpy/scipy), so the tests check it against
scipy on known data. Randomness (bootstrap, Monte-Carlo permutations) always comes from a
``numpy.random.default_rng(seed)``: the same input and seed give the same interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import stdtr  # Student t CDF; scipy.stats is heavier to import

from aah_viz.regimes import FACTOR_LABELS, FACTORS, regime_named

NO_VARIANCE = "n = 1, no variance estimate"
DEFAULT_BOOT = 2000
DEFAULT_SEED = 0
EXACT_PERMUTATION_LIMIT = 20000  # enumerate every relabelling up to this many, else sample


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof=1), n and a percentile-bootstrap interval of the mean."""

    mean: float
    std: float  # nan when n < 2
    n: int
    ci_low: float  # nan when n < 2
    ci_high: float
    level: float = 0.95

    @property
    def has_spread(self) -> bool:
        return self.n >= 2

    def spread_text(self) -> str:
        return "" if self.has_spread else NO_VARIANCE


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = DEFAULT_BOOT, level: float = 0.95, seed: int = DEFAULT_SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; ``(nan, nan)`` for fewer than two values.

    Seeded and deterministic: resampling indices come from ``default_rng(seed)``.
    """
    arr = _finite(values)
    if arr.size < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    means = arr[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def summarize(
    values: Sequence[float], *, n_boot: int = DEFAULT_BOOT, level: float = 0.95, seed: int = DEFAULT_SEED
) -> Summary:
    """Summary of the finite values (NaN and None are dropped; n counts what is left)."""
    arr = _finite(values)
    n = int(arr.size)
    if n == 0:
        return Summary(math.nan, math.nan, 0, math.nan, math.nan, level)
    mean = float(arr.mean())
    if n < 2:
        return Summary(mean, math.nan, 1, math.nan, math.nan, level)
    lo, hi = bootstrap_ci(arr, n_boot=n_boot, level=level, seed=seed)
    return Summary(mean, float(arr.std(ddof=1)), n, lo, hi, level)


def summaries_by_group(
    df: pd.DataFrame,
    value_columns: Sequence[str],
    *,
    by: str | Sequence[str] = "regime",
    n_boot: int = DEFAULT_BOOT,
    seed: int = DEFAULT_SEED,
) -> list[tuple[dict, dict[str, Summary]]]:
    """Per group (the column ``by``, or several), in order of first appearance: its key columns and
    ``n`` (the number of rows, i.e. runs), and the :func:`summarize` of each value column (text that
    is not a number counts as missing)."""
    keys = [by] if isinstance(by, str) else list(by)
    out = []
    for key, part in df.groupby(keys, sort=False, dropna=False):
        ident = {**dict(zip(keys, key)), "n": int(len(part))}
        cols = {
            col: summarize(pd.to_numeric(part[col], errors="coerce").tolist(), n_boot=n_boot, seed=seed)
            for col in value_columns
        }
        out.append((ident, cols))
    return out


def group_summaries(df: pd.DataFrame, value_columns: Sequence[str], **options) -> pd.DataFrame:
    """:func:`summaries_by_group` (``options``: by, n_boot, seed) as one wide frame: per group its keys,
    ``n``, and ``<col>``, ``<col>_std``, ``<col>_ci_low``, ``<col>_ci_high``, ``<col>_n`` (the finite
    values counted). A value column named like another's interval is overwritten by it here."""
    rows = []
    for ident, cols in summaries_by_group(df, value_columns, **options):
        row = dict(ident)
        for col, s in cols.items():
            row.update({col: s.mean, f"{col}_std": s.std, f"{col}_ci_low": s.ci_low, f"{col}_ci_high": s.ci_high})
            row[f"{col}_n"] = s.n
        rows.append(row)
    return pd.DataFrame(rows)


# --- significance -------------------------------------------------------------------------


@dataclass(frozen=True)
class TestResult:
    statistic: float
    p_value: float
    df: float = math.nan
    n_a: int = 0
    n_b: int = 0
    method: str = ""
    note: str = ""


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Welch's two-sided t-test of mean(a) - mean(b) with the Welch-Satterthwaite degrees of freedom.

    Needs at least two values on each side and some variance; otherwise the p-value is NaN and
    ``note`` says why.
    """
    x, y = _finite(a), _finite(b)
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
    x, y = _finite(a), _finite(b)
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
    d = _finite(differences)
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


def paired_difference_curve(
    values: pd.DataFrame,
    regime: str,
    baseline: str,
    *,
    metric: str = "val_loss",
    n_boot: int = DEFAULT_BOOT,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """Per-step paired difference ``regime - baseline`` over the seeds both regimes share.

    ``values`` has columns ``regime, seed, step, <metric>`` (one row per run and step). Returns
    ``step, mean_diff, std, n, ci_low, ci_high`` for steps where at least one seed has both values.
    """
    need = {"regime", "seed", "step", metric}
    missing = need - set(values.columns)
    if missing:
        raise ValueError(f"paired_difference_curve needs columns {sorted(need)}; missing {sorted(missing)}")
    a = values[values["regime"] == regime].groupby(["seed", "step"])[metric].mean()
    b = values[values["regime"] == baseline].groupby(["seed", "step"])[metric].mean()
    diff = (a - b).dropna()
    rows = []
    for step, part in diff.groupby(level="step"):
        s = summarize(part.to_numpy(), n_boot=n_boot, seed=seed)
        rows.append(
            {"step": int(step), "mean_diff": s.mean, "std": s.std, "n": s.n, "ci_low": s.ci_low, "ci_high": s.ci_high}
        )
    return pd.DataFrame(rows, columns=["step", "mean_diff", "std", "n", "ci_low", "ci_high"])


def compare_to_baseline(
    finals: pd.DataFrame,
    baseline: str,
    *,
    metric: str = "val_loss",
    n_resamples: int = 9999,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """For every regime other than ``baseline``: difference of means, Welch's t and a permutation test.

    ``finals`` has one row per run with ``regime`` and ``metric``. A regime with a single run gets
    the difference but NaN p-values and the note "n = 1, no variance estimate".
    """
    if baseline not in set(finals["regime"]):
        known = ", ".join(sorted(map(str, set(finals["regime"]))))
        raise ValueError(f"baseline regime {baseline!r} has no runs here; regimes present: {known}")
    base = finals.loc[finals["regime"] == baseline, metric].to_numpy(dtype=float)
    rows = []
    for regime, part in finals.groupby("regime", sort=False):
        if regime == baseline:
            continue
        vals = part[metric].to_numpy(dtype=float)
        w = welch_t_test(vals, base)
        p = permutation_test(vals, base, n_resamples=n_resamples, seed=seed)
        na, nb = len(_finite(vals)), len(_finite(base))
        note = NO_VARIANCE if min(na, nb) < 2 else ""
        paired = _paired_differences(part, finals[finals["regime"] == baseline], metric)
        pp = paired_permutation_test(paired, n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                "regime": regime,
                "baseline": baseline,
                "metric": metric,
                "n": na,
                "n_baseline": nb,
                "mean": float(np.mean(_finite(vals))) if na else math.nan,
                "mean_baseline": float(np.mean(_finite(base))) if nb else math.nan,
                "diff": float(np.mean(_finite(vals)) - np.mean(_finite(base))) if na and nb else math.nan,
                "welch_t": w.statistic,
                "welch_df": w.df,
                "welch_p": w.p_value,
                "perm_p": p.p_value,
                "perm_method": p.method,
                "n_paired": len(paired),
                "paired_perm_p": pp.p_value,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def _paired_differences(a: pd.DataFrame, b: pd.DataFrame, metric: str) -> list[float]:
    """metric(a) - metric(b) for every seed both frames hold (one run per seed; duplicates averaged)."""
    if "seed" not in a.columns or "seed" not in b.columns:
        return []
    ma = a.dropna(subset=["seed"]).groupby("seed")[metric].mean()
    mb = b.dropna(subset=["seed"]).groupby("seed")[metric].mean()
    both = ma.index.intersection(mb.index)
    return [float(ma[s] - mb[s]) for s in both if np.isfinite(ma[s] - mb[s])]


# --- factorial view -----------------------------------------------------------------------


def regime_factors(regime: str) -> dict | None:
    """The factor levels of a named regime (method section 13), or None for a regime outside the factorial
    design; ``other`` names the flags outside the five factors (``aah_viz.regimes``)."""
    row = regime_named(regime)
    return None if row is None or row.factors is None else {"other": "", **row.factors}


def _differs_only_in(fa: Mapping, fb: Mapping, factor: str) -> bool:
    if fa.get(factor) is None or fb.get(factor) is None or fa[factor] == fb[factor]:
        return False
    if fa.get("other", "") != fb.get("other", ""):
        return False
    for f in FACTORS:
        if f == factor:
            continue
        # a factor that does not apply on one side (None) is nested under the one that varies
        if fa.get(f) is None or fb.get(f) is None:
            if factor != "grouping":
                return False
            continue
        if fa[f] != fb[f]:
            return False
    return True


def factorial_effects(
    finals: pd.DataFrame,
    *,
    metric: str = "val_loss",
    factors_of=regime_factors,
    n_boot: int = DEFAULT_BOOT,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """The effect of each factor on ``metric``: mean(factor on) - mean(factor off) over regime pairs
    that differ in that factor only.

    ``finals`` has one row per run (``regime``, ``metric``). A factor no pair of present regimes
    isolates is reported with ``covered = False`` and a note naming what is missing; an effect
    estimated from n = 1 per side carries the no-variance note instead of a p-value.
    """
    by_regime = {r: part[metric].to_numpy(dtype=float) for r, part in finals.groupby("regime", sort=False)}
    levels = {r: factors_of(r) for r in by_regime}
    known = {r: f for r, f in levels.items() if f is not None}
    rows = []
    for factor in FACTORS:
        pairs = []
        for ra, rb in itertools.permutations(known, 2):
            fa, fb = known[ra], known[rb]
            if fa.get(factor) == 1 and fb.get(factor) == 0 and _differs_only_in(fa, fb, factor):
                pairs.append((ra, rb))
        if not pairs:
            rows.append(
                {
                    "factor": factor,
                    "description": FACTOR_LABELS[factor],
                    "covered": False,
                    "pairs": "",
                    "effect": math.nan,
                    "ci_low": math.nan,
                    "ci_high": math.nan,
                    "welch_p": math.nan,
                    "n_on": 0,
                    "n_off": 0,
                    "note": "not covered: no two regimes here differ in this factor alone",
                }
            )
            continue
        effects = []
        for ra, rb in pairs:
            on, off = _finite(by_regime[ra]), _finite(by_regime[rb])
            effects.append(on.mean() - off.mean() if on.size and off.size else math.nan)
        n_on = sum(len(_finite(by_regime[a])) for a, _ in pairs)
        n_off = sum(len(_finite(by_regime[b])) for _, b in pairs)
        finite_effects = [e for e in effects if np.isfinite(e)]
        effect = float(np.mean(finite_effects)) if finite_effects else math.nan
        if len(pairs) == 1:
            on, off = _finite(by_regime[pairs[0][0]]), _finite(by_regime[pairs[0][1]])
            test = welch_t_test(on, off)
            lo, hi = _bootstrap_diff(on, off, n_boot=n_boot, seed=seed)
        else:
            test = TestResult(math.nan, math.nan, note="several pairs: mean of pair effects")
            lo, hi = bootstrap_ci(finite_effects, n_boot=n_boot, seed=seed)
        note = NO_VARIANCE if min(len(_finite(by_regime[a])) for pair in pairs for a in pair) < 2 else test.note
        rows.append(
            {
                "factor": factor,
                "description": FACTOR_LABELS[factor],
                "covered": True,
                "pairs": "; ".join(f"{a} - {b}" for a, b in pairs),
                "effect": effect,
                "ci_low": lo,
                "ci_high": hi,
                "welch_p": test.p_value,
                "n_on": n_on,
                "n_off": n_off,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def _bootstrap_diff(on: np.ndarray, off: np.ndarray, *, n_boot: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(on) - mean(off), resampling each side independently."""
    if on.size < 2 or off.size < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    da = on[rng.integers(0, on.size, size=(n_boot, on.size))].mean(axis=1)
    db = off[rng.integers(0, off.size, size=(n_boot, off.size))].mean(axis=1)
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return (float(lo), float(hi))
