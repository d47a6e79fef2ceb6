"""Statistics across regimes: tables comparing each regime with a baseline (final values and per-step
difference curves), the factorial view, the baseline notes under a table, and which best means are
significant (bold).

Regimes are compared on each run's final training metrics (:func:`finals_frame`) or validation
curves (:func:`val_loss_curves`) through :mod:`aah_viz.export.stats`; the tests themselves are
:mod:`aah_viz.stats.significance`.
"""

from __future__ import annotations

import math

import pandas as pd

from aah_viz.errors import AAHVizError
from aah_viz.export import records, stats
from aah_viz.export.headers import SHORT_HEADERS
from aah_viz.export.runs import check_same_config, open_runs
from aah_viz.export.table import Table, blank_like, label_slug
from aah_viz.regimes import paper_rank

SIGNIFICANCE = 0.05


def significant_best(groups: pd.DataFrame, per_run: pd.DataFrame, keys, value_cols, direction) -> pd.DataFrame:
    """True where a group's mean is the column's best and differs significantly (Welch's t-test,
    p < ``SIGNIFICANCE``) from the next best group's; groups with fewer than two runs never count."""
    best = pd.DataFrame(False, index=groups.index, columns=groups.columns)
    if len(groups) < 2:
        return best
    key_tuples = [tuple(r) for r in groups[keys].itertuples(index=False)]
    members = per_run.groupby(keys, sort=False, dropna=False).groups
    for col in value_cols:
        d = direction(col)
        if d == 0 or col not in groups or col not in per_run:
            continue
        means = pd.to_numeric(groups[col], errors="coerce")
        if means.notna().sum() < 2:
            continue
        order = means.dropna().sort_values(ascending=d < 0, kind="stable").index
        first, second = order[0], order[1]
        if means[first] == means[second]:
            continue

        def sample(i):
            key = key_tuples[groups.index.get_loc(i)]
            rows = members.get(key if len(keys) > 1 else key[0], [])
            return pd.to_numeric(per_run.loc[rows, col], errors="coerce").dropna().to_numpy(dtype=float)

        a, b = sample(first), sample(second)
        if len(a) < 2 or len(b) < 2:
            continue
        p = stats.welch_t_test(a, b).p_value
        if p == p and p < SIGNIFICANCE:
            best.loc[first, col] = True
    return best


def baseline_notes(finals: pd.DataFrame, baseline: str, *, seed: int) -> list[str]:
    """One note per regime: its final val_loss against ``baseline``'s (Welch's t-test and a permutation test)."""
    try:
        cmp = stats.compare_to_baseline(finals, baseline, metric="val_loss", seed=seed)
    except ValueError as err:
        raise AAHVizError(str(err)) from None
    out = []
    for _, r in cmp.iterrows():
        if r["n"] == 0 or r["n_baseline"] == 0:
            out.append(f"{r['regime']} vs {baseline}: no val_loss to compare.")
        elif r["note"]:
            out.append(f"{r['regime']} vs {baseline}: difference in val_loss {r['diff']:+.4f} ({r['note']}).")
        else:
            out.append(
                f"{r['regime']} vs {baseline}: difference in val_loss {r['diff']:+.4f}; Welch t = {r['welch_t']:.3f} "
                f"(df {r['welch_df']:.1f}), p = {r['welch_p']:.4g}; {r['perm_method']} p = {r['perm_p']:.4g} "
                f"(n = {int(r['n'])} vs {int(r['n_baseline'])})."
            )
    return out


def finals_frame(runs) -> pd.DataFrame:
    """One row per run: regime, seed, run and the final training metrics (for stats and the factorial view)."""
    runs = open_runs(runs)
    cfg = check_same_config(runs)
    windows = cfg[1] or tuple(sorted({int(w) for r in runs for w in r.windows}))
    return pd.DataFrame([records.training_record(r, windows) for r in runs])


def val_loss_curves(runs) -> pd.DataFrame:
    """``regime, seed, run, step, val_loss`` for every validation of every run."""
    parts = []
    for run in open_runs(runs):
        sc = run.scalar("val_loss")
        if sc.empty:
            continue
        parts.append(
            pd.DataFrame(
                {
                    "regime": run.regime,
                    "seed": run.seed,
                    "run": run.run_id,
                    "step": sc["step"].astype("int64"),
                    "val_loss": sc["value"].astype(float),
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=["regime", "seed", "run", "step", "val_loss"])
    return pd.concat(parts, ignore_index=True)


def _final_words(metric: str) -> str:
    """ "Final validation loss (nats)" for val_loss: a caption's words, not the column name ("Final val\\_loss")."""
    words = SHORT_HEADERS[metric][1] if metric in SHORT_HEADERS else metric.replace("_", " ")
    return words[0].upper() + words[1:] if words.startswith("final") else f"Final {words}"


def comparison_table(runs, baseline: str, *, metric: str = "val_loss", seed: int = stats.DEFAULT_SEED) -> Table:
    """Regimes against ``baseline`` on the final ``metric``: difference, Welch's t, permutation p."""
    finals = finals_frame(runs)
    try:
        cmp = stats.compare_to_baseline(finals, baseline, metric=metric, seed=seed)
    except ValueError as err:
        raise AAHVizError(str(err)) from None
    if cmp.empty or "regime" not in cmp:
        others = sorted(set(finals["regime"]) - {baseline}) if "regime" in finals else []
        raise AAHVizError(
            f"--baseline {baseline}: no other regime among these runs to compare with it"
            + (f" (found {', '.join(others)})" if others else "")
            + "; add runs of another regime, or leave out --baseline"
        )
    values = [
        "n",
        "n_baseline",
        "mean",
        "mean_baseline",
        "diff",
        "welch_t",
        "welch_df",
        "welch_p",
        "perm_p",
        "n_paired",
        "paired_perm_p",
    ]
    cmp = cmp.sort_values("regime", key=lambda col: col.map(paper_rank), kind="stable").reset_index(drop=True)
    df = cmp[["regime", "baseline"] + values + ["perm_method", "note"]]
    caption = (
        f"{_final_words(metric)} of each regime against {baseline}: difference of means, Welch's t-test, a "
        "permutation test relabelling runs, and a sign-flip test over the seeds both regimes ran."
    )
    t = Table(
        "comparison",
        df,
        caption,
        f"tab:aah-comparison-{label_slug(metric)}-vs-{label_slug(baseline)}",
        id_columns=["regime", "baseline"],
        value_columns=values + ["perm_method", "note"],
        by="regime",
    )
    t.decimals = {
        "mean": 4,
        "mean_baseline": 4,
        "diff": 4,
        "welch_t": 3,
        "welch_df": 1,
        "welch_p": 4,
        "perm_p": 4,
        "n": 0,
        "n_baseline": 0,
        "n_paired": 0,
        "paired_perm_p": 4,
    }
    t.best, t.uncertainty = blank_like(df, False), blank_like(df, math.nan)
    return t


def factorial_table(runs, *, metric: str = "val_loss", seed: int = stats.DEFAULT_SEED) -> Table:
    """The effect of each factor (grouping, hierarchy refresh, freeze, joint scoring, window control)."""
    finals = finals_frame(runs)
    eff = stats.factorial_effects(finals, metric=metric, seed=seed)
    values = ["covered", "pairs", "effect", "ci_low", "ci_high", "welch_p", "n_on", "n_off", "note"]
    df = eff[["factor"] + values]
    t = Table(
        "factorial",
        df,
        f"Effect of each factor on the final {metric} (factor on minus off), from regime pairs "
        "that differ in that factor alone.",
        f"tab:aah-factorial-{label_slug(metric)}",
        id_columns=["factor"],
        value_columns=values,
        by="regime",
    )
    t.decimals = {"effect": 4, "ci_low": 4, "ci_high": 4, "welch_p": 4, "n_on": 0, "n_off": 0}
    t.best, t.uncertainty = blank_like(df, False), blank_like(df, math.nan)
    uncovered = df.loc[~df["covered"].astype(bool), "factor"].tolist()
    if uncovered:
        t.notes.append("Not covered by these runs: " + ", ".join(uncovered) + ".")
    return t


def difference_curve_table(runs, regime: str, baseline: str, *, seed: int = stats.DEFAULT_SEED) -> Table:
    """Per-step paired difference of validation loss (regime - baseline) over shared seeds."""
    curves = val_loss_curves(runs)
    curve = stats.paired_difference_curve(curves, regime, baseline, seed=seed)
    t = Table(
        "difference_curve",
        curve,
        f"Validation loss of {regime} minus {baseline} per step, paired by seed "
        "(mean, std, n, 95% bootstrap interval).",
        f"tab:aah-difference-{label_slug(regime)}-vs-{label_slug(baseline)}",
        id_columns=["step"],
        value_columns=["mean_diff", "std", "n", "ci_low", "ci_high"],
        by="regime",
    )
    t.decimals = {"mean_diff": 4, "std": 4, "n": 0, "ci_low": 4, "ci_high": 4}
    t.best, t.uncertainty = blank_like(curve, False), blank_like(curve, math.nan)
    if curve.empty:
        t.notes.append(f"no step has validation loss for both {regime} and {baseline} on a shared seed")
    return t


def difference_curves_table(runs, baseline: str, *, seed: int = stats.DEFAULT_SEED) -> Table:
    """Every other regime's :func:`difference_curve_table` in one table (``regime``, then ``step``): one
    file for the export, not one a regime."""
    runs = open_runs(runs)
    regimes = sorted({str(r.regime) for r in runs} - {baseline}, key=paper_rank)
    parts = [difference_curve_table(runs, regime, baseline, seed=seed) for regime in regimes]
    frames = [p.df.assign(regime=r)[["regime", *p.df.columns]] for r, p in zip(regimes, parts) if not p.df.empty]
    curve = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["regime", "step"])
    t = Table(
        "difference_curves",
        curve,
        f"Validation loss of each regime minus {baseline} per step, paired by seed "
        "(mean, std, n, 95% bootstrap interval).",
        f"tab:aah-differences-vs-{label_slug(baseline)}",
        id_columns=["regime", "step"],
        value_columns=["mean_diff", "std", "n", "ci_low", "ci_high"],
        by="regime",
        empty_message=f"no step has validation loss for another regime and {baseline} on a shared seed",
    )
    t.decimals = {"mean_diff": 4, "std": 4, "n": 0, "ci_low": 4, "ci_high": 4}
    t.best, t.uncertainty = blank_like(curve, False), blank_like(curve, math.nan)
    t.notes += [n for p in parts for n in p.notes]
    return t
