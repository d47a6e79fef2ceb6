"""One exportable table: the numbers, and what is printed around them.

Building one is :mod:`aah_viz.export.tables`; rendering it (CSV, Markdown, LaTeX) is
:mod:`aah_viz.export.formats`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Table:
    """One exportable table.

    ``df``: identity columns then value columns (means when grouped by regime).
    ``best``: booleans of the same shape, True on the best value of a column that has a direction.
    ``uncertainty``: same shape, the standard deviation over seeds (NaN where there is none).
    ``ci_low`` / ``ci_high``: the 95% bootstrap interval of the mean (NaN for n < 2).
    ``exact``: same shape, the original published string of a cell where one exists (imported runs).
    ``latex_form``: the table LaTeX prints in its place (the training table's summary form), or None.
    """

    name: str
    df: pd.DataFrame
    caption: str
    label: str
    notes: list[str] = field(default_factory=list)
    best: pd.DataFrame | None = None
    uncertainty: pd.DataFrame | None = None
    ci_low: pd.DataFrame | None = None
    ci_high: pd.DataFrame | None = None
    exact: pd.DataFrame | None = None
    id_columns: list[str] = field(default_factory=list)
    value_columns: list[str] = field(default_factory=list)
    decimals: dict[str, int] = field(default_factory=dict)
    by: str = "run"
    config: dict = field(default_factory=dict)
    empty_message: str = ""
    latex_form: Table | None = None  # what LaTeX prints instead: a shorter form that fits a page

    @property
    def is_empty(self) -> bool:
        return self.df.empty


def blank_like(df: pd.DataFrame, fill) -> pd.DataFrame:
    """A frame of ``df``'s shape holding ``fill`` everywhere."""
    return pd.DataFrame(fill, index=df.index, columns=df.columns)


def align(frame: pd.DataFrame | None, like: pd.DataFrame, cols, fill) -> pd.DataFrame:
    """``frame``'s columns ``cols`` on ``like``'s rows, ``fill`` where ``frame`` has none."""
    out = pd.DataFrame(fill, index=like.index, columns=cols, dtype=object if fill is None else float)
    if frame is None:
        return out
    frame = frame.reset_index(drop=True)
    for c in cols:
        if c in frame.columns:
            out[c] = frame[c].to_numpy()
    return out


def label_slug(text) -> str:
    """Text usable in a LaTeX label: lower-case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"
