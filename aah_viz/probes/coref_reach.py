"""Why the window-coreference correlation can change sign between all and reachable antecedents.

``spearman:coref`` grades every head on every antecedent: one beyond the head's window is a miss
by construction, so longer windows score higher by reach alone. ``spearman:coref_reachable``
grades each head only on antecedents its window holds, and a longer window holds farther, harder
ones. Side by side (rho +0.86 and -0.86 on the sample runs) they read as a contradiction unless the
reader is told this.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ALL, REACHABLE = "spearman:coref", "spearman:coref_reachable"


def _pooled_rho(assoc: pd.DataFrame, target: str) -> float:
    rows = assoc[(assoc["target"] == target) & assoc["layer"].isna()]
    if "degenerate" in rows:
        rows = rows[~rows["degenerate"].fillna(False).astype(bool)]
    if "step" in rows and len(rows):
        rows = rows[rows["step"] == rows["step"].max()]
    return float(rows["rho"].iloc[0]) if len(rows) else np.nan


def reach_note(assoc: pd.DataFrame) -> str | None:
    """One sentence or two on the pooled coreference rows of a ``window_association`` table, or None
    when the table has not both of them."""
    if assoc is None or assoc.empty or not {"target", "layer", "rho"} <= set(assoc.columns):
        return None
    every, reach = _pooled_rho(assoc, ALL), _pooled_rho(assoc, REACHABLE)
    if not (np.isfinite(every) and np.isfinite(reach)):
        return None
    note = (
        f"Coreference: rho {every:+.2f} over all antecedents, {reach:+.2f} over reachable ones. Over all "
        "antecedents, one beyond a head's window counts as a miss, so longer windows score higher by reach "
        "alone; over reachable ones each head is graded only on antecedents its window holds, and a longer "
        "window holds farther, harder ones."
    )
    if np.sign(every) != np.sign(reach):
        note += (
            " The opposite signs say the first is reach, not better coreference: within reach, heads with "
            f"longer windows resolve a {'smaller' if reach < 0 else 'larger'} share of their antecedents."
        )
    return note
