"""The training table's summary form: what LaTeX prints of a table by regime so that it fits one page.

The long form (every column with its spread, window shares one column each, one note per test
against the baseline) ran over two pages in four parts on nine regimes. The summary keeps the
spread of the two numbers a reader compares (validation loss and ACR), prints the other columns
as means, the window shares as one column of percentages, and the tests against the baseline as
one note. CSV and Markdown keep the long form; ``--form long`` keeps it in LaTeX too.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from aah_viz.export.columns import WINDOW_PREFIX
from aah_viz.export.formats import decimals_for, format_number
from aah_viz.export.table import Table

FORMS = ("summary", "long")
SPREAD_KEPT = ("val_loss", "acr")  # the columns whose spread the summary prints
DROPPED = ("acr_causal",)  # follows ACR; the long form and the CSV keep it


def window_shares_column(windows: list[str]) -> str:
    """The one column of the window shares: ``w 16/32/64 (%)``."""
    return "w " + "/".join(w[len(WINDOW_PREFIX) :] for w in windows) + " (%)"


def window_shares_text(values) -> str:
    """Mean shares as whole percentages joined by slashes (``25/38/37/0``); a dash where none."""
    if all(_missing(v) for v in values):
        return "–"
    return "/".join("–" if _missing(v) else f"{round(100 * float(v))}" for v in values)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def column_text(means: pd.Series, spread: pd.Series | None, most: int) -> list[str]:
    """A column's cells as text with one number of decimals for the whole column: those that keep
    two significant digits of its smallest spread (at most ``most``), ``mean ± sd`` where a row has one."""
    places = [decimals_for(float(u)) for u in (spread if spread is not None else [])]
    places = [p for p in places if p is not None]
    d = min(most, max(places)) if places else most
    out = []
    for i, value in enumerate(means):
        u = None if spread is None else spread.iloc[i]
        text = format_number(value, d)
        if u is not None and decimals_for(float(u)) is not None and text != "–":
            text += " ± " + format_number(float(u), d)
        out.append(text)
    return out


def baseline_note(cmp: pd.DataFrame, baseline: str) -> str:
    """The tests of every regime's final validation loss against ``baseline`` as one sentence."""
    tested, untested = [], []
    for _, r in cmp.iterrows():
        if r["n"] == 0 or r["n_baseline"] == 0:
            untested.append(f"{r['regime']} (no val_loss)")
        elif r["note"]:
            untested.append(f"{r['regime']} {r['diff']:+.4f}")
        else:
            tested.append(f"{r['regime']} {r['diff']:+.4f} (p = {r['welch_p']:.2g})")
    parts = []
    if tested:
        parts.append(
            f"Final val. loss minus {baseline}'s, with Welch's t-test p (the comparison table adds the "
            "permutation tests): " + "; ".join(tested) + "."
        )
    if untested:
        parts.append(f"One seed, not tested against {baseline}: " + "; ".join(untested) + ".")
    return " ".join(parts)


def training_summary(table: Table, cmp: pd.DataFrame | None = None, baseline: str | None = None) -> Table:
    """``table`` (the training table by regime) in its summary form; ``cmp`` the tests against
    ``baseline`` (:func:`aah_viz.export.stats.compare_to_baseline`) that replace their per-regime notes."""
    windows = [c for c in table.df.columns if c.startswith(WINDOW_PREFIX)]
    values = [c for c in table.value_columns if c not in windows and c not in DROPPED]
    keep = [c for c in table.df.columns if c in table.id_columns or c in values or c == "n"]
    df = table.df[keep].copy()
    shares = window_shares_column(windows) if windows else None
    if shares:
        df[shares] = [window_shares_text(row) for row in table.df[windows].itertuples(index=False)]
    cols = list(df.columns)

    def narrowed(frame, fill):
        out = pd.DataFrame(fill, index=df.index, columns=cols, dtype=object if fill is None else float)
        if frame is not None:
            for c in cols:
                if c in frame.columns:
                    out[c] = frame[c].to_numpy()
        return out

    spread = narrowed(table.uncertainty, math.nan)
    for c in values:
        df[c] = column_text(df[c], spread[c] if c in SPREAD_KEPT else None, table.decimals.get(c, 4))
    best = narrowed(table.best, False).fillna(False).astype(bool)
    notes = [n for n in table.notes if not (baseline and f" vs {baseline}: " in n)]
    if not best.to_numpy().any():  # nothing bold: no rule for bold to explain
        notes = [n for n in notes if not n.startswith("Bold: ")]
    if shares:
        notes.insert(0, f"{shares}: share of heads at each window (tokens), mean over seeds, in percent.")
    sd = "± the sample standard deviation"
    notes = [n.replace(sd, f"{sd} (val. loss, ACR)") for n in notes]
    if baseline is not None and cmp is not None and len(cmp):
        notes.append(baseline_note(cmp, baseline))
    caption = (
        "Training, by regime: final validation loss and perplexity, ACR (key-length proxy), FLOPs ratio (analytic "
        "estimate, not a measurement), median training tokens/s, peak memory and the share of heads at each window "
        "at the final step. Causal-pair coverage and the spread of every column: the long form, or the CSV."
    )
    return replace(
        table,
        df=df,
        caption=caption,
        notes=notes,
        best=best,
        uncertainty=narrowed(None, math.nan),
        ci_low=narrowed(None, math.nan),
        ci_high=narrowed(None, math.nan),
        exact=None,
        value_columns=values,
        decimals={c: d for c, d in table.decimals.items() if c in values},
    )
