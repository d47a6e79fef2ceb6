"""Seed statistics for paper tables: summaries per regime, comparisons with a baseline, factorial effects.

The statistics themselves (bootstrap intervals, Welch's t, permutation tests) are ``aah_viz.stats``';
here they are applied to the runs of a table. Randomness always comes from a
``numpy.random.default_rng(seed)``: the same input and seed give the same interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from aah_viz.regimes import FACTOR_LABELS, FACTORS, regime_named
from aah_viz.stats.resampling import bootstrap_ci, bootstrap_mean_difference
from aah_viz.stats.significance import TestResult, finite, paired_permutation_test, permutation_test, welch_t_test

NO_VARIANCE = "n = 1, no variance estimate"
DEFAULT_BOOT = 2000
DEFAULT_SEED = 0


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


def summarize(
    values: Sequence[float], *, n_boot: int = DEFAULT_BOOT, level: float = 0.95, seed: int = DEFAULT_SEED
) -> Summary:
    """Summary of the finite values (NaN and None are dropped; n counts what is left)."""
    arr = finite(values)
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


# --- comparisons --------------------------------------------------------------------------


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
        na, nb = len(finite(vals)), len(finite(base))
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
                "mean": float(np.mean(finite(vals))) if na else math.nan,
                "mean_baseline": float(np.mean(finite(base))) if nb else math.nan,
                "diff": float(np.mean(finite(vals)) - np.mean(finite(base))) if na and nb else math.nan,
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
            on, off = finite(by_regime[ra]), finite(by_regime[rb])
            effects.append(on.mean() - off.mean() if on.size and off.size else math.nan)
        n_on = sum(len(finite(by_regime[a])) for a, _ in pairs)
        n_off = sum(len(finite(by_regime[b])) for _, b in pairs)
        finite_effects = [e for e in effects if np.isfinite(e)]
        effect = float(np.mean(finite_effects)) if finite_effects else math.nan
        if len(pairs) == 1:
            on, off = finite(by_regime[pairs[0][0]]), finite(by_regime[pairs[0][1]])
            test = welch_t_test(on, off)
            lo, hi = bootstrap_mean_difference(on, off, n_boot=n_boot, seed=seed)
        else:
            test = TestResult(math.nan, math.nan, note="several pairs: mean of pair effects")
            lo, hi = bootstrap_ci(finite_effects, n_boot=n_boot, seed=seed)
        note = NO_VARIANCE if min(len(finite(by_regime[a])) for pair in pairs for a in pair) < 2 else test.note
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
