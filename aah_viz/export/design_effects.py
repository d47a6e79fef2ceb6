"""The effects of a sweep's design on its runs: the runs' final metrics by cell, and the tables of
``aah-viz effects`` (effects with intervals and Holm-corrected p-values; the cells' means over seeds).

A run belongs to the design when its directory's name is one of the design's trials (``CELL__seed-S``, as
``aah-viz sweep`` names them); runs that did not finish are left out and named in the notes. A metric is a
training run's final value (``val_loss``) or, for a frontier sweep, a column of one configuration's row of
each run's frontier table (``ppl@sliding_window_128``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from aah_viz.analysis.frontier import run_frontier_table
from aah_viz.errors import AAHVizError
from aah_viz.export import effects, records
from aah_viz.export.table import Table, blank_like, label_slug
from aah_viz.runlog import discover_runs, load_run
from aah_viz.sweep.design import Design, run_name

METRICS = ("val_loss", "val_ppl", "acr", "acr_causal", "flops_ratio_est", "tokens_per_s", "peak_mem_mb")
# Columns of a frontier run's table a metric COLUMN@CONFIGURATION reads (docs/real-model.md).
FRONTIER_METRICS = ("ppl", "retrieval", "acr", "acr_causal", "realised_work", "speed_vs_unpatched")


def is_known(metric: str) -> bool:
    column, at, configuration = metric.partition("@")
    if at:
        return column in FRONTIER_METRICS and bool(configuration)
    return metric in METRICS


def check_metrics(metrics) -> list[str]:
    metrics = [m.strip() for m in metrics if m.strip()]
    unknown = [m for m in metrics if not is_known(m)]
    if unknown or not metrics:
        raise AAHVizError(
            f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(METRICS)}, or for a "
            f"frontier sweep COLUMN@CONFIGURATION with COLUMN one of {', '.join(FRONTIER_METRICS)}"
        )
    return metrics


def run_metrics(run, metrics) -> dict[str, float]:
    """The run's final training metrics and its frontier table's values (NaN where it has none)."""
    out: dict[str, float] = {}
    plain = [m for m in metrics if "@" not in m]
    if plain:
        rec = records.training_record(run, run.windows)
        out.update({m: rec.get(m, math.nan) for m in plain})
    rows = [m for m in metrics if "@" in m]
    if rows:
        table = run_frontier_table(run).set_index("configuration")
        for m in rows:
            column, _, configuration = m.partition("@")
            value = table.at[configuration, column] if configuration in table.index else None
            out[m] = math.nan if value is None or pd.isna(value) else float(value)
    return out


def metric_choices(logs, design: Design) -> list[str]:
    """The metrics a sweep's runs can answer: the training metrics, or for a frontier sweep each
    configuration's perplexity (and passkey accuracy where asked) from its first finished run."""
    if design.command != "frontier":
        return list(METRICS)
    for cell, seed in design.trials():
        run_dir = Path(logs) / run_name(cell, seed)
        if not run_dir.is_dir():
            continue
        run = load_run(run_dir)
        if run.status != "finished":
            continue
        table = run_frontier_table(run)
        asked = table["retrieval"].notna()
        return [f"ppl@{c}" for c in table["configuration"]] + [f"retrieval@{c}" for c in table["configuration"][asked]]
    return []


def design_runs_frame(logs, design: Design, metrics) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run of the design under ``logs``: its factor levels, seed, run name and metrics."""
    trials = {run_name(cell, seed): (cell, seed) for cell, seed in design.trials()}
    rows, unfinished = [], []
    logs = Path(logs)
    for run_dir in discover_runs(logs):
        name = Path(run_dir).name
        if name not in trials or Path(run_dir).parent.resolve() != logs.resolve():
            continue
        run = load_run(run_dir)
        if run.status != "finished":
            unfinished.append(name)
            continue
        cell, seed = trials[name]
        rows.append({**cell.as_dict(), "seed": seed, "run": name, **run_metrics(run, metrics)})
    order = {name: i for i, name in enumerate(trials)}
    rows.sort(key=lambda row: order[row["run"]])  # the design's order, not the folder listing's
    columns = [*design.factor_names, "seed", "run", *metrics]
    notes = []
    missing = len(trials) - len(rows) - len(unfinished)
    if unfinished:
        notes.append(f"Left out, not finished: {', '.join(sorted(unfinished))}.")
    if missing:
        notes.append(f"{missing} of the design's {len(trials)} trials have no run under {logs}.")
    for m in metrics:
        if rows and all(math.isnan(row[m]) for row in rows):
            where = "no frontier configuration of that name" if "@" in m else "no final value of it"
            notes.append(f"{m}: the finished runs have {where}.")
    return pd.DataFrame(rows, columns=columns), notes


def effects_table(frame: pd.DataFrame, design: Design, metrics, *, notes=()) -> Table:
    levels = {f.name: list(f.levels) for f in design.factors}
    parts = [effects.factorial_effects(frame, levels, m) for m in metrics]
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=effects.EFFECT_COLUMNS)
    ids = ["metric", "term", "factors", "levels"]
    values = [c for c in effects.EFFECT_COLUMNS if c not in ids]
    seeds = len(design.seeds)
    t = Table(
        "effects",
        df[ids + values],
        f"Main effects and two-way interactions of the design {design.name} on the final "
        f"{', '.join(metrics)}: contrasts of a linear model's cell means (level minus the factor's first level; "
        f"interactions as differences of differences), 95% intervals over {seeds} seed(s), p-values Holm-corrected "
        "across the effects of each metric.",
        f"tab:aah-effects-{label_slug(design.name)}",
        id_columns=ids,
        value_columns=values,
        by="run",
    )
    t.decimals = {"effect": 4, "ci_low": 4, "ci_high": 4, "se": 4, "df": 0, "p": 4, "p_holm": 4, "n": 0}
    t.best, t.uncertainty = blank_like(t.df, False), blank_like(t.df, math.nan)
    t.notes += list(notes)
    if design.generators:
        t.notes.append("Fraction: " + "; ".join(design.generators) + ".")
    t.empty_message = "no effects: no finished run of the design here"
    return t


def cells_table(frame: pd.DataFrame, design: Design, metrics, *, notes=()) -> Table:
    df = effects.cell_means(frame, list(design.factor_names), metrics)
    if df.empty:
        df = pd.DataFrame(columns=[*design.factor_names, "n", *metrics])
    values = [c for c in df.columns if c not in design.factor_names]
    t = Table(
        "effects_cells",
        df,
        f"Cells of the design {design.name}: runs and the mean and standard deviation over seeds of the final "
        f"{', '.join(metrics)}.",
        f"tab:aah-effects-cells-{label_slug(design.name)}",
        id_columns=list(design.factor_names),
        value_columns=values,
        by="run",
    )
    t.decimals = {c: (0 if c == "n" else 4) for c in values}
    t.best, t.uncertainty = blank_like(df, False), blank_like(df, math.nan)
    t.notes += list(notes)
    t.empty_message = "no cells: no finished run of the design here"
    return t
