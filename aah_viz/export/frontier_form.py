"""The frontier table's LaTeX form: what a paper prints of a frontier so that it fits a page.

The long form (every column: family, adaptation steps, sink tokens, each interval bound and the
passkey's counts) ran over 8 pages in 8 parts on the SmolLM2 sample, and its split parts repeated
run, family and adaptation steps, which do not name a row. This form keeps the configuration (which
says the family, the window and the sinks), perplexity with its interval in one cell, ACR, the
measured speed, the front and the passkey; CSV and Markdown keep every column.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from aah_viz.export.table import Table

PPL = "ppl [95%]"
SPEED = "speed"
WIDE = "*"  # marks a speed whose 95% interval is wider than WIDE_SPEED
WIDE_SPEED = 0.1
FRONT = "front"
PASSKEY = "passkey"


def _number(value, places: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{float(value):.{places}f}"


def frontier_form(table: Table) -> Table:
    """``table`` (the frontier export table) in its LaTeX form: one short cell a column."""
    df = table.df
    runs = df["run"].nunique() > 1
    # one column names a row, so every part of a split table repeats the whole name
    letters = {r: chr(ord("a") + i) for i, r in enumerate(dict.fromkeys(df["run"]))}  # runs in table order
    named = (
        [f"({letters[r]}) {c}" for r, c in zip(df["run"], df["configuration"])] if runs else list(df["configuration"])
    )
    out = pd.DataFrame({"configuration": named}, index=df.index)
    out[PPL] = [
        f"{_number(p, 2)} [{_number(lo, 1)}, {_number(hi, 1)}]"
        for p, lo, hi in zip(df["ppl"], df["ppl_lo"], df["ppl_hi"])
    ]
    out["ACR"] = [_number(v, 3) for v in df["acr"]]
    # a median whose interval is wide (few timing pairs on a busy machine) is marked, never printed bare
    out[SPEED] = [
        _number(v, 2) + (WIDE if pd.notna(lo) and pd.notna(hi) and float(hi) - float(lo) > WIDE_SPEED else "")
        for v, lo, hi in zip(df["speed_vs_unpatched"], df["speed_lo"], df["speed_hi"])
    ]
    out[FRONT] = ["yes" if bool(v) else "" for v in df["pareto"]]
    asked = "retrieval" in df and df["retrieval"].notna().any()
    if asked:
        out[PASSKEY] = [_number(v, 2) for v in df["retrieval"]]
    steps = sorted({int(s) for s, f in zip(df["adapt_steps"], df["family"]) if f == "adapted" and s})
    notes = [
        f"{PPL}: perplexity over the evaluated tokens and its 95% interval from a bootstrap over evaluation blocks "
        "(the same resamples for every configuration of a run, so differences are paired). ACR: mean key length "
        f"over the sequence length. {SPEED}: the unpatched model's forward time over the configuration's, median "
        f"of pairs measured side by side; {WIDE}: its 95% interval is wider than {WIDE_SPEED} (few pairs: a rough "
        "indication). "
        f"{FRONT}: on the Pareto front (no other configuration of the run has "
        "both a lower ACR and a lower perplexity).",
        "A configuration named _sinkK keeps the first K positions visible to every query; _adapted ones were "
        + (f"adapted for {' or '.join(map(str, steps))} steps" if steps else "adapted")
        + ", _zero_shot ones not at all"
        + ("; the runs: " + ", ".join(f"({x}) {r}" for r, x in letters.items()) if runs else "")
        + ". Every column and interval bound: the CSV or the Markdown.",
    ]
    if asked:
        notes.append(f"{PASSKEY}: share of the passkey questions answered (a key hidden at five depths of filler).")
    ids = ["configuration"]
    values = [c for c in out.columns if c not in ids]
    blank = pd.DataFrame(math.nan, index=out.index, columns=out.columns)
    return replace(
        table,
        df=out.reset_index(drop=True),
        notes=notes,
        best=None,
        uncertainty=blank,
        ci_low=blank,
        ci_high=blank,
        exact=None,
        id_columns=ids,
        value_columns=values,
        decimals={},
        latex_form=None,
    )
