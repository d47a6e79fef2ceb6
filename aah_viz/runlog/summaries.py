"""Per-update summaries the run writer adds while rows stream in (the ``updates`` table).

At every routing update (head rows with a ``raw_idx``, written on update forwards only) the
layer's head partition and windows are compared with its previous update. Stability figures then
read one small row per (layer, update) instead of every head row of a long run; readers compute
the same rows on the fly for runs recorded without them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from aah_viz.analysis.stability import Matrices, summarize_updates
from aah_viz.runlog.reader import load_run
from aah_viz.schema import SUMMARY_TABLES, group_column


def summary_table(frame: pd.DataFrame) -> pa.Table:
    """Summary rows (``analysis.stability.SUMMARY_COLUMNS``) in the ``updates`` table's types."""
    schema = SUMMARY_TABLES["updates"]
    cols = {}
    for name, typ in schema.items():
        values = frame[name]
        if pa.types.is_list(typ):
            cols[name] = pa.array([np.asarray(v).tolist() for v in values], type=typ)
        elif name == "topology_changed":
            cols[name] = pa.array(values.astype("boolean").to_numpy(dtype=object, na_value=None), type=typ)
        else:
            arr = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
            if pa.types.is_integer(typ):
                cols[name] = pa.array(np.nan_to_num(arr).astype(np.int64), mask=np.isnan(arr)).cast(typ)
            else:
                cols[name] = pa.array(arr, type=typ)
    return pa.table(cols)


class UpdateSummarizer:
    """Keeps the last two updates of every layer and turns new update rows into summary rows."""

    def __init__(self, n_head: int, max_depth: int):
        self.n_head = int(n_head)
        self.max_depth = int(max_depth)
        self.carry = None

    def _columns(self) -> list[str]:
        return ["step", "layer", "head", "window_idx"] + [group_column(i) for i in range(self.max_depth)]

    def prime(self, run_dir: Path) -> None:
        """Load the carry (last two updates per layer) of a resumed run from its files."""
        run = load_run(run_dir)
        if "updates" not in run.tables():
            return
        ups = run.table("updates", columns=["step", "layer"])
        if ups.empty:
            return
        last = ups.sort_values("step").groupby("layer").tail(2)
        heads = run.table(
            "heads", columns=self._columns(), filters=pc.field("step").isin(sorted(set(last["step"].tolist())))
        )
        key_h = heads["layer"].to_numpy().astype(np.int64) * (1 << 40) + heads["step"].to_numpy()
        key_u = last["layer"].to_numpy().astype(np.int64) * (1 << 40) + last["step"].to_numpy()
        heads = heads[np.isin(key_h, key_u)]
        if not heads.empty:
            self.carry = Matrices(heads, self.n_head)

    def observe(self, heads: pa.Table) -> pa.Table | None:
        """Summary rows for the routing updates among ``heads`` rows (None when there are none)."""
        if "raw_idx" not in heads.column_names or self.n_head <= 0:
            return None
        update_rows = heads.filter(pc.is_valid(heads.column("raw_idx")))
        if update_rows.num_rows == 0:
            return None
        cols = [c for c in self._columns() if c in update_rows.column_names]
        frame = update_rows.select(cols).to_pandas()
        mats = Matrices(frame, self.n_head)
        out, self.carry = summarize_updates(mats, self.carry)
        return summary_table(out)


def margin_summary(tree: pa.Table) -> pa.Table | None:
    """Per (step, layer): how many executed (non-shadow) tree nodes and their mean decision margin."""
    if not {"step", "layer", "margin"} <= set(tree.column_names) or tree.num_rows == 0:
        return None
    t = tree.select(["step", "layer", "margin", *(["shadow"] if "shadow" in tree.column_names else [])])
    if "shadow" in t.column_names:
        t = t.filter(pc.invert(pc.fill_null(t.column("shadow"), False)))
    t = t.filter(pc.is_valid(t.column("margin")))
    if t.num_rows == 0:
        return None
    g = t.group_by(["step", "layer"]).aggregate([("margin", "count"), ("margin", "mean")])
    schema = SUMMARY_TABLES["margins"]
    return pa.table(
        {
            "step": g.column("step").cast(schema["step"]),
            "layer": g.column("layer").cast(schema["layer"]),
            "groups": g.column("margin_count").cast(schema["groups"]),
            "margin_mean": g.column("margin_mean").cast(schema["margin_mean"]),
        }
    )
