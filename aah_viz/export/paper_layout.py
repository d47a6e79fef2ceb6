"""A table in the reference CSVs' layout (their column names and order), and the published strings of
imported runs, kept where they are the numbers we hold."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from aah_viz.export.paper_columns import PAPER_INFERENCE, PAPER_TRAINING

RESOLUTION = ("resolution_per_head_mean_raw", "resolution_per_head_mean")  # (paper column, ours)
# the identity columns of the paper's layouts; every other column holds values
IDENTITY = {"method", "grouping", "hierarchy", "joint_scorer", "context", "seed", "checkpoint_step", "n"}
PAPER_TO_OURS = {p: o for p, o in PAPER_TRAINING + PAPER_INFERENCE}


@dataclass(frozen=True)
class PaperLayout:
    """How the reference's CSV of one table names and orders its columns."""

    key: str  # where an imported run keeps the published strings: manifest["reference"]["values"][key]
    columns: tuple[tuple[str, str], ...]  # (paper column, our column), in the CSV's order
    n_at: int  # where the count of runs goes when rows are regimes
    after_windows: tuple[tuple[str, str], ...] = ()  # columns after the window fractions


TRAINING = PaperLayout("training", tuple(PAPER_TRAINING), n_at=5)
INFERENCE = PaperLayout("inference", tuple(PAPER_INFERENCE), n_at=6, after_windows=(RESOLUTION,))


def our_name(col: str) -> str:
    """Our name of a column that may be the paper's."""
    return PAPER_TO_OURS.get(col, col)


def apply(layout: PaperLayout, by, df, unc, lo, hi, exact_src, wcols):
    """The table's frames in the paper's columns: (df, unc, lo, hi, exact, identity columns, value columns)."""
    mapping = list(layout.columns) + [(c, c) for c in wcols] + list(layout.after_windows)
    if by == "regime":
        mapping = [(p, o) for p, o in mapping if o != "seed"]
        mapping.insert(layout.n_at, ("n", "n"))
    present = [(p, o) for p, o in mapping if o in df.columns]
    rename = {o: p for p, o in present}
    new = df[[o for _, o in present]].rename(columns=rename)

    def remap(frame):
        if frame is None:
            return None
        keep = [o for _, o in present if o in frame.columns]
        return frame[keep].rename(columns=rename)

    id_cols = [p for p, _ in present if p in IDENTITY]
    values = [p for p, _ in present if p not in IDENTITY]
    return new, remap(unc), remap(lo), remap(hi), remap(exact_src), id_cols, values


def published_strings(layout: PaperLayout, runs, df) -> pd.DataFrame | None:
    """Original published strings of imported runs, in our column names (None when there are none)."""
    rows, any_found = [], False
    by_id = {r.run_id: r for r in runs}
    mapping = dict(layout.columns)
    mapping[RESOLUTION[0]] = RESOLUTION[1]
    for run_id in df["run"]:
        run = by_id.get(run_id)
        src = ((run.manifest.get("reference") or {}).get("values") or {}).get(layout.key) if run is not None else None
        row = {}
        if isinstance(src, dict):
            for paper_col, text in src.items():
                ours = mapping.get(paper_col, paper_col)
                row[ours] = text
                any_found = True
        rows.append(row)
    if not any_found:
        return None
    exact = pd.DataFrame(rows)
    # keep a published string only where it is the number we hold (the string is presentation, not data)
    for col in exact.columns:
        if col not in df.columns:
            continue
        for i, text in enumerate(exact[col]):
            if not isinstance(text, str):
                continue
            held = df[col].iloc[i]
            if text == "":
                ok = held is None or (isinstance(held, float) and math.isnan(held)) or held == ""
            else:
                try:
                    ok = float(text) == float(held)
                except (TypeError, ValueError):
                    ok = str(held) == text
            if not ok:
                exact.at[i, col] = None
    return exact
