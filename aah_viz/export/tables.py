"""Paper tables from run directories: ``build_table(name, runs, **opts) -> Table``.

The runs are opened and checked for one configuration (:mod:`~aah_viz.export.runs`); the table's
kind (:mod:`~aah_viz.export.kinds`) gives their records; here they become a :class:`Table`: one
row per run, or per setup (a regime; with what tells its runs apart, as Compare's rows) with mean,
standard deviation and bootstrap interval over seeds; in our
layout or the paper's (:mod:`~aah_viz.export.paper_layout`); with its notes and bold best values
(:mod:`~aah_viz.export.comparisons`). Rendering (CSV, Markdown, LaTeX) is :mod:`aah_viz.export.formats`.

Runs whose candidate windows or sequence lengths differ are never mixed in one table:
:func:`build_table` raises :class:`~aah_viz.export.runs.MixedConfigError` naming them;
:func:`build_tables` with ``allow_mixed=True`` returns one table per configuration instead.
"""

from __future__ import annotations

import math

import pandas as pd

from aah_viz.analysis.configurations import setup_groups
from aah_viz.errors import AAHVizError
from aah_viz.export import paper_layout, stats
from aah_viz.export.columns import decimals, direction, window_columns
from aah_viz.export.comparisons import SIGNIFICANCE, baseline_notes, significant_best
from aah_viz.export.kinds import TABLE_KINDS, TABLE_NAMES, TableKind
from aah_viz.export.runs import (
    check_same_config,
    config_label,
    in_paper_order,
    open_runs,
    split_by_config,
    unfinished_notes,
)
from aah_viz.export.summary_form import FORMS, training_summary
from aah_viz.export.table import Table, align, blank_like

LAYOUTS = ("toolkit", "paper")
SOURCES = ("final", "inference")
# identity columns of a row's runs carried into a row of their regime
REGIME_IDENTITY = ("method", "grouping", "hierarchy", "joint_scorer", "seq_len", "checkpoint_step")


def build_table(
    name: str,
    runs,
    *,
    by: str = "run",
    layout: str = "toolkit",
    part: str = "comparisons",
    baseline: str | None = None,
    source: str = "final",
    n_boot: int = stats.DEFAULT_BOOT,
    seed: int = stats.DEFAULT_SEED,
    form: str = "summary",
) -> Table:
    """One table over runs that share a configuration (else :class:`MixedConfigError`).

    ``name``: a kind of ``TABLE_KINDS`` (training, inference, windows, stability, probes,
    head_similarity, frontier). ``by``: ``run`` (one row per run)
    or ``regime`` (mean, std, n and 95% bootstrap interval over the runs of each regime).
    ``layout="paper"`` uses the reference CSVs' column names and order (training, inference).
    ``part`` picks the probe table (comparisons, relations, coref, heads). ``baseline`` adds, to a
    training or inference table, notes with the Welch and permutation tests against it. ``source``
    (windows table): ``final`` (per layer at the last recorded step) or ``inference`` (model-wide,
    from each run's inference record: the paper's Figure 4 numbers). ``form`` (the training table by
    regime in LaTeX): ``summary`` (fits one page: :mod:`~aah_viz.export.summary_form`) or ``long``.
    """
    runs = open_runs(runs)
    if not runs:
        raise AAHVizError("no runs to tabulate; give at least one run directory")
    cfg = check_same_config(runs)
    return _build(
        name,
        runs,
        cfg,
        by=by,
        layout=layout,
        part=part,
        baseline=baseline,
        source=source,
        n_boot=n_boot,
        seed=seed,
        form=form,
    )


def build_tables(name: str, runs, *, allow_mixed: bool = False, **opts) -> list[Table]:
    """Like :func:`build_table`; with ``allow_mixed`` one table per (T, windows) configuration."""
    runs = open_runs(runs)
    if not allow_mixed:
        return [build_table(name, runs, **opts)]
    groups = split_by_config(runs)
    out = []
    for cfg, members in groups.items():
        table = _build(name, members, cfg, **opts)
        if len(groups) > 1:
            table.label = f"{table.label}:{config_label(cfg).lower()}"
            said = table.caption.rstrip()
            said += "" if said.endswith((".", "?", "!")) else "."  # a sentence of its own follows
            table.caption = f"{said} Configuration: T = {cfg[0]}, windows {'/'.join(map(str, cfg[1])) or 'none'}."
            if table.latex_form is not None:
                table.latex_form.caption, table.latex_form.label = table.caption, table.label
        out.append(table)
    return out


def _check_opts(name: str, by: str, layout: str, part: str) -> TableKind:
    kind = TABLE_KINDS.get(name)
    if kind is None:
        raise AAHVizError(f"unknown table {name!r}; choose one of {', '.join(TABLE_NAMES)}")
    if by not in ("run", "regime"):
        raise AAHVizError(f"by must be 'run' or 'regime', got {by!r}")
    if layout not in LAYOUTS:
        raise AAHVizError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "paper" and kind.paper is None:
        published = " and ".join(n for n, k in TABLE_KINDS.items() if k.paper is not None)
        raise AAHVizError(f"the paper layout exists for the {published} tables only, not {name!r}")
    if kind.parts and part not in kind.parts:
        raise AAHVizError(f"unknown {kind.part_noun} {part!r}; choose one of {', '.join(kind.parts)}")
    return kind


def _build(
    name,
    runs,
    cfg,
    *,
    by="run",
    layout="toolkit",
    part="comparisons",
    baseline=None,
    source="final",
    n_boot=stats.DEFAULT_BOOT,
    seed=stats.DEFAULT_SEED,
    form="summary",
) -> Table:
    kind = _check_opts(name, by, layout, part)
    if form not in FORMS:
        raise AAHVizError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    if kind.own_table is not None:
        return kind.own_table(runs, form=form)[0]
    if source not in SOURCES:
        raise AAHVizError(f"windows source must be 'final' or 'inference', got {source!r}")
    runs = in_paper_order(runs)
    seq_len, windows = cfg
    if not windows:  # only baselines: take the windows they were configured with
        windows = tuple(sorted({int(w) for r in runs for w in r.windows}))
    config = {"seq_len": seq_len, "windows": list(windows)}
    if kind.windows is not None:
        windows = tuple(kind.windows(runs, windows, source=source))
    rows = kind.rows(runs, windows, part=part, source=source)
    values = rows.values
    df = pd.DataFrame(rows.records)
    notes: list[str] = unfinished_notes(runs)
    id_cols = (["run", "regime", "seed"] if by == "run" else ["regime", "n"]) + list(rows.keys)
    label = f"tab:aah-{name}" + (f"-{part}" if kind.parts else "")
    if df.empty:
        df = pd.DataFrame(columns=id_cols + values)
        table = Table(
            name,
            df,
            rows.caption,
            label,
            [rows.empty_message],
            id_columns=id_cols,
            value_columns=values,
            by=by,
            config=config,
            empty_message=rows.empty_message,
        )
        table.best = blank_like(df, False)
        table.uncertainty = blank_like(df, math.nan)
        return table

    notes += rows.lead_notes
    exact_src = paper_layout.published_strings(kind.paper, runs, df) if by == "run" and kind.paper else None

    if by == "regime":
        df = _as_setups(df, runs)
        group_keys = ["regime", *rows.keys]
        summarised = values + [k for k in rows.extra if k in df]
        out, unc, lo, hi = _per_regime(df, group_keys, summarised, n_boot=n_boot, seed=seed)
        significant = significant_best(out, df, group_keys, values, direction)
        ident = df.groupby(group_keys, sort=False, dropna=False).first().reset_index()
        keep = [c for c in REGIME_IDENTITY if c in ident and c not in group_keys]  # coref's own "method" key
        out = out.merge(ident[group_keys + keep], on=group_keys, how="left")
        if any(out["n"] < 2):
            notes.append(
                f"{stats.NO_VARIANCE} for setups with one run: "
                + "; ".join(str(r) for r in out.loc[out["n"] < 2, "regime"].unique())
            )
        notes.append(
            "Values are means over runs (seeds) of each setup (a regime; with the settings or training length "
            "telling its runs apart, where they differ), ± the sample standard deviation; CSV adds 95% "
            f"percentile-bootstrap intervals ({n_boot} resamples, seed {seed})."
        )
        df = out
    else:
        unc = lo = hi = None
        significant = None

    if layout == "paper":
        wcols = window_columns(windows)
        df, unc, lo, hi, exact_src, id_cols, values = paper_layout.apply(
            kind.paper, by, df, unc, lo, hi, exact_src, wcols
        )
    table = Table(
        name,
        df.reset_index(drop=True),
        rows.caption,
        label,
        notes,
        id_columns=id_cols,
        value_columns=[v for v in values if v in df.columns],
        by=by,
        config=config,
    )
    cols = list(table.df.columns)
    table.uncertainty = align(unc, table.df, cols, math.nan)
    table.ci_low = align(lo, table.df, cols, math.nan)
    table.ci_high = align(hi, table.df, cols, math.nan)
    table.exact = align(exact_src, table.df, cols, None)
    table.decimals = {c: decimals(paper_layout.our_name(c)) for c in table.value_columns}
    table.best = blank_like(table.df, False)
    if significant is not None:  # bold: a best mean that differs significantly from the runner-up
        for col in table.df.columns:
            our = paper_layout.our_name(col)
            if our in significant.columns and col in table.value_columns:
                table.best[col] = significant[our].to_numpy()
        if any(direction(paper_layout.our_name(c)) for c in table.value_columns):
            table.notes.append(
                f"Bold: the best mean of a column, only where it differs from the next best by Welch's t-test "
                f"(p < {SIGNIFICANCE}) with at least two seeds on each side; rows with one seed are never bold."
            )
    table.notes.extend(rows.tail_notes)
    if baseline is not None and kind.baseline_notes:
        table.notes.extend(baseline_notes(pd.DataFrame(rows.records), baseline, seed=seed))
    table.df = table.df[[c for c in table.df.columns if c in table.id_columns or c in table.value_columns or c == "n"]]
    if name == "training" and by == "regime" and layout == "toolkit" and form == "summary":
        cmp = None
        if baseline is not None:
            cmp = stats.compare_to_baseline(pd.DataFrame(rows.records), baseline, metric="val_loss", seed=seed)
        table.latex_form = training_summary(table, cmp, baseline)
    return table


def _as_setups(df: pd.DataFrame, runs) -> pd.DataFrame:
    """The records with each run's regime replaced by its setup, as Compare names it
    (:func:`~aah_viz.analysis.configurations.setup_groups`: ``full_adaptive, sink_tokens=4``, with the
    training length appended where the runs hold several): rows by regime never average runs set up or
    trained differently. The paper's method name carries the same difference."""
    if "run" not in df or "regime" not in df:
        return df
    names = setup_groups({i: r.manifest for i, r in enumerate(runs)})
    setup_of = {r.run_id: names[i] for i, r in enumerate(runs)}
    df = df.copy()
    setups = df["run"].map(setup_of).fillna(df["regime"]).astype(str)
    if "method" in df:
        told = [s[len(str(r)) :] if s.startswith(str(r)) else "" for s, r in zip(setups, df["regime"])]
        df["method"] = [f"{m}{t}" for m, t in zip(df["method"], told)]
    df["regime"] = setups
    return df


def _per_regime(df, keys, values, *, n_boot, seed):
    """Means (keys first, then n), and the std and bootstrap interval frames, one row per group
    (four frames: a value column may itself be named like another's interval, ``delta_ci_low``)."""
    groups = stats.summaries_by_group(df, values, by=keys, n_boot=n_boot, seed=seed)
    means = pd.DataFrame([{**ident, **{c: s.mean for c, s in cols.items()}} for ident, cols in groups])
    std, lo, hi = (
        pd.DataFrame([{c: getattr(s, field) for c, s in cols.items()} for _, cols in groups])
        for field in ("std", "ci_low", "ci_high")
    )
    return means, std, lo, hi
