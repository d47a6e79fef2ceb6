"""The ``head_similarity`` export: per run, layer and similarity, whether the heads form real, stable
groups and whether those agree with the span and probe groupings (``aah-viz head-similarity``).

Self-contained: ``records`` turns a run's ``head_similarity`` table into rows, ``build_tables`` makes the
exportable :class:`~aah_viz.export.tables.Table` (CSV, Markdown, LaTeX through ``export.formats``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import head_similarity as hs

NAME = "head_similarity"
ID_COLUMNS = ["run", "layer", "similarity", "verdict", "stability"]
VALUE_COLUMNS = [
    "groups", "silhouette", "chance", "stability_ari", "ari_span", "ari_probe", "mantel_probe", "mantel_probe_p_holm",
]  # fmt: skip
NOTES = [
    "groups: found by the method's level-0 procedure at its threshold; silhouette on 1 - similarity; "
    "chance: the larger 95th percentile of the two validity nulls (real: silhouette above it).",
    "stability_ari: ARI between the groupings of two disjoint halves of the data (stable: p <= 0.05 "
    "against a permutation null); ari_span, ari_probe: ARI with the span and probe groupings of the layer.",
    "mantel_probe: Spearman's rho between this similarity's and the probe scores' distances over the layer's "
    "pairs of heads (no grouping involved); mantel_probe_p_holm: its relabelling p-value, Holm-adjusted "
    "across the layers.",
]


def _pair_ari(agree: pd.DataFrame, layer, a: str, b: str) -> float:
    if a == b:
        return np.nan
    rows = agree[(agree["layer"] == layer) & (((agree["similarity"] == a) & (agree["other"] == b))
                                              | ((agree["similarity"] == b) & (agree["other"] == a)))]  # fmt: skip
    return float(rows["ari"].iloc[0]) if len(rows) else np.nan


def _pair_value(agree: pd.DataFrame, layer: int, a: str, b: str, column: str) -> float:
    rows = agree[(agree["layer"] == layer) & (((agree["similarity"] == a) & (agree["other"] == b))
                                              | ((agree["similarity"] == b) & (agree["other"] == a)))]  # fmt: skip
    return float(rows[column].iloc[0]) if len(rows) and column in rows and pd.notna(rows[column].iloc[0]) else np.nan


def records(run_id: str, table: pd.DataFrame, procedure: str = "method") -> pd.DataFrame:
    """One row per (layer, similarity) of one run's ``head_similarity`` table at its newest step."""
    if table is None or table.empty:
        return pd.DataFrame(columns=ID_COLUMNS + VALUE_COLUMNS)
    table = table[(table["step"] == table["step"].max()) & (table["procedure"] == procedure)]
    agree = hs.agreements(table)
    rows = []
    for _, r in hs.groupings(table).iterrows():
        rows.append(
            {
                "run": run_id,
                "layer": int(r["layer"]),
                "similarity": r["similarity"],
                "verdict": r["verdict"],
                "stability": r["stability"],
                "groups": r["n_groups"],
                "silhouette": r["silhouette"],
                "chance": cv.chance_bar(r.to_dict()),
                "stability_ari": r["stability_ari"],
                "ari_span": _pair_ari(agree, r["layer"], r["similarity"], "span"),
                "ari_probe": _pair_ari(agree, r["layer"], r["similarity"], "probe"),
                "mantel_probe": _pair_value(agree, r["layer"], r["similarity"], "probe", "mantel_rho"),
                "mantel_probe_p_holm": _pair_value(agree, r["layer"], r["similarity"], "probe", "mantel_p_holm"),
            }
        )
    frame = pd.DataFrame(rows, columns=ID_COLUMNS + VALUE_COLUMNS)
    order = {s: i for i, s in enumerate(hs.SIMILARITIES)}
    return frame.sort_values(["layer", "similarity"], key=lambda c: c.map(order) if c.name == "similarity" else c)


def _rows_of_runs(runs, rows_of, procedure: str) -> pd.DataFrame:
    """``rows_of(run id, its head_similarity table or None, procedure)`` for every run, in one frame (the
    first run's empty frame when no run has rows)."""
    frames = [rows_of(str(run.run_id), run.table(NAME) if NAME in run.tables() else None, procedure) for run in runs]
    kept = [f for f in frames if len(f)]
    return pd.concat(kept, ignore_index=True) if kept else frames[0]


def build_tables(runs, *, procedure: str = "method", form: str = "summary", **_opts) -> list:
    """The export table of ``runs`` (``aah_viz.runlog.Run``); runs without the table add no rows. LaTeX
    prints its summary form (``form="summary"``, one row per run and similarity: thirteen columns a layer ran
    to 6 parts over 2 pages for one run); ``form="long"`` keeps every layer's row there too."""
    from aah_viz.export.table import Table

    df = _rows_of_runs(runs, records, procedure)
    table = Table(
        name=NAME,
        df=df.reset_index(drop=True),
        caption="Head groups under each similarity: validity, split-half stability, agreement with span and probe",
        label="tab:head_similarity",
        notes=list(NOTES),
        id_columns=list(ID_COLUMNS),
        value_columns=list(VALUE_COLUMNS),
        decimals={c: (0 if c == "groups" else 3) for c in VALUE_COLUMNS},
        empty_message="no head_similarity table in these runs: run aah-viz head-similarity RUN first",
    )
    if form == "summary" and not table.is_empty:
        (summary,) = build_summary_tables(runs, procedure=procedure)
        short = summary.latex_form
        short.label = table.label
        short.notes.append(
            "Each layer's silhouette, chance level, agreement and Mantel statistic: the CSV or the Markdown, "
            "or this table with --form long."
        )
        table.latex_form = short
    return [table]


SUMMARY_NAME = "head_similarity_summary"
SUMMARY_ID_COLUMNS = ["run", "similarity"]
SUMMARY_VALUE_COLUMNS = ["layers", "real", "stable", "real_and_stable", "agrees_with_span", "agrees_with_probe"]
SUMMARY_NOTES = [
    "Counts of layers. real: the grouping's silhouette beats both validity nulls; stable: two disjoint "
    "halves of the data give groupings that agree beyond chance; agrees_with_span, agrees_with_probe: "
    "the grouping agrees with the layer's span or probe grouping (ARI, permutation test p <= 0.05). "
    "The per-layer rows are the head_similarity table.",
]


def summary_records(run_id: str, table: pd.DataFrame, procedure: str = "method") -> pd.DataFrame:
    """One row per similarity of one run: in how many layers its grouping is real, stable, both, and
    agrees with span and probe (``hs.summary`` at the table's newest step)."""
    cols = SUMMARY_ID_COLUMNS + SUMMARY_VALUE_COLUMNS
    if table is None or table.empty:
        return pd.DataFrame(columns=cols)
    newest = table[table["step"] == table["step"].max()]
    return hs.summary(newest, procedure).assign(run=run_id)[cols]


# the summary's LaTeX headers: words, short enough that one table fits a page (no header broken at underscores)
SUMMARY_WORDS = {"real_and_stable": "both", "agrees_with_span": "with span", "agrees_with_probe": "with probe"}
SUMMARY_WORDS_NOTE = (
    "Counts of layers. real: the grouping's silhouette beats both validity nulls; stable: two disjoint halves of "
    "the data give groupings that agree beyond chance; both: real and stable; with span, with probe: the grouping "
    "agrees with the layer's span or probe grouping (ARI, permutation test p <= 0.05)."
)


def summary_latex_form(table):
    """The summary as LaTeX prints it: headers in words, and the run named in a note where there is one."""
    from dataclasses import replace

    df = table.df.rename(columns=SUMMARY_WORDS)
    ids = [c for c in table.id_columns if c in df]
    runs = list(dict.fromkeys(df["run"])) if "run" in df else []
    notes = [SUMMARY_WORDS_NOTE]
    if len(runs) == 1:
        df, ids = df.drop(columns="run"), [c for c in ids if c != "run"]
        notes.append(f"Run: {runs[0]}.")
    return replace(
        table,
        df=df,
        notes=notes,
        id_columns=ids,
        value_columns=[SUMMARY_WORDS.get(c, c) for c in table.value_columns],
        decimals={SUMMARY_WORDS.get(c, c): d for c, d in table.decimals.items()},
        latex_form=None,
    )


def build_summary_tables(runs, *, procedure: str = "method", **_opts) -> list:
    """The summary form of the head_similarity export: a few rows per run instead of one per layer."""
    from aah_viz.export.table import Table

    df = _rows_of_runs(runs, summary_records, procedure)
    summary = Table(
        name=SUMMARY_NAME,
        df=df.reset_index(drop=True),
        caption="Head groups under each similarity, over the layers: real, stable, agreeing with span and probe",
        label="tab:head_similarity_summary",
        notes=list(SUMMARY_NOTES),
        id_columns=list(SUMMARY_ID_COLUMNS),
        value_columns=list(SUMMARY_VALUE_COLUMNS),
        decimals={c: 0 for c in SUMMARY_VALUE_COLUMNS},
        empty_message="no head_similarity table in these runs: run aah-viz head-similarity RUN first",
    )
    if not summary.is_empty:
        summary.latex_form = summary_latex_form(summary)
    return [summary]
