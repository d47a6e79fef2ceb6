"""Projected, filtered reads of one run: the only analysis module that touches a ``Run``.

Each function reads just the columns and rows it needs (pyarrow projection + filters), so a
paper-shaped run (3.8M head rows) stays fast: one step's heatmap reads ~400 rows, one layer's
timeline reads that layer at sampled steps only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from aah_viz.analysis.stability import group_columns
from aah_viz.analysis.windows import last_value
from aah_viz.schema import group_column

HEAD_BASE = ["step", "layer", "head", "window_idx", "window"]


def head_columns(run, with_groups: bool = True) -> list[str]:
    cols = list(HEAD_BASE)
    if with_groups:
        cols += [group_column(i) for i in range(run.max_depth)]
    return cols


def _unique_sorted(arrow_col) -> np.ndarray:
    if len(arrow_col) == 0:
        return np.zeros(0, dtype=np.int64)
    values = pc.unique(arrow_col.combine_chunks()).to_numpy(zero_copy_only=False)
    values = values[~pd.isna(values)]
    return np.sort(values.astype(np.int64))


def recorded_steps(run) -> np.ndarray:
    """Distinct steps with head rows (sorted)."""
    return _unique_sorted(run.arrow_table("heads", columns=["step"]).column("step"))


def update_steps(run) -> pd.DataFrame:
    """(layer, step) of every routing update, from the ``events`` table.

    Falls back to the steps where ``tree`` rows exist, then to head rows with a ``raw_idx``
    (written on update forwards only), for runs that did not log ``routing_update`` events.
    """
    ev = run.table("events", columns=["step", "layer"], filters=[("kind", "==", "routing_update")])
    ev = ev.dropna()
    if ev.empty:
        ev = run.table("tree", columns=["step", "layer"]).dropna()
    if ev.empty:
        ev = run.table("heads", columns=["step", "layer"], filters=pc.field("raw_idx").is_valid()).dropna()
    if ev.empty:
        return pd.DataFrame({"layer": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64")})
    ev = ev.astype({"step": "int64", "layer": "int64"}).drop_duplicates().sort_values(["layer", "step"])
    return ev[["layer", "step"]].reset_index(drop=True)


def heads_at_step(run, step: int, with_groups: bool = False) -> pd.DataFrame:
    return run.table("heads", columns=head_columns(run, with_groups), filters=[("step", "==", int(step))])


def heads_of_layer(run, layer: int, steps=None, with_groups: bool = False) -> pd.DataFrame:
    filters = pc.field("layer") == int(layer)
    if steps is not None:
        filters = filters & pc.field("step").isin([int(s) for s in steps])
    return run.table("heads", columns=head_columns(run, with_groups), filters=filters)


def heads_at_updates(run, layers=None) -> pd.DataFrame:
    """Head rows at each layer's routing updates (with group columns), for the stability analysis."""
    ups = update_steps(run)
    if layers is not None:
        ups = ups[ups["layer"].isin(list(layers))]
    columns = ["step", "layer", "head", "window_idx"] + [group_column(i) for i in range(run.max_depth)]
    if ups.empty:
        return pd.DataFrame(columns=columns)
    filt = pc.field("step").isin(np.unique(ups["step"].to_numpy()).tolist())
    if layers is not None:
        filt = filt & pc.field("layer").isin([int(x) for x in layers])
    heads = run.table("heads", columns=columns, filters=filt)
    if heads.empty:
        return heads
    heads = heads.astype({"step": "int64", "layer": "int64"})
    # keep each layer's own update steps only (layers may update at different steps)
    key_h = heads["layer"].to_numpy() * (1 << 40) + heads["step"].to_numpy()
    key_u = ups["layer"].to_numpy() * (1 << 40) + ups["step"].to_numpy()
    return heads[np.isin(key_h, key_u)].reset_index(drop=True)


def tree_steps(run, layer: int) -> np.ndarray:
    t = run.arrow_table("tree", columns=["step"], filters=[("layer", "==", int(layer))])
    return _unique_sorted(t.column("step"))


def tree_at(run, layer: int, step: int) -> pd.DataFrame:
    return run.table("tree", filters=[("layer", "==", int(layer)), ("step", "==", int(step))])


def tree_stats(
    run, columns=("step", "layer", "level", "margin", "joint_delta", "joint_paired", "shadow")
) -> pd.DataFrame:
    return run.table("tree", columns=list(columns))


def cluster_validity(run) -> pd.DataFrame:
    """One row per (step, layer) level-0 partition: the recorded ``cluster_validity`` table.

    Runs recorded before that table existed fall back to what ``tree`` holds (origin and the
    similarity range of each level-0 build), with the verdict ``undefined``.
    """
    from aah_viz.analysis import cluster_validity as cv

    if "cluster_validity" in run.tables():
        return run.table("cluster_validity")
    tree = run.table("tree", columns=["step", "layer", "origin", "shadow", "sim_min", "sim_max", "members"],
                     filters=[("level", "==", 0)])  # fmt: skip
    if tree.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ("step", "layer", "origin", "verdict")})
    per_update = tree.groupby(["step", "layer"], sort=True)
    out = per_update.agg(origin=("origin", "first"), shadow=("shadow", "first"), sim_min=("sim_min", "first"),
                         sim_max=("sim_max", "first"), n_groups=("members", "size"))  # fmt: skip
    out["n_heads"] = int(run.n_head or 0)
    out["threshold"] = float(run.config.get("sim_threshold", np.nan))
    out["verdict"] = cv.UNDEFINED
    return out.reset_index()


def branch_at(run, step: int) -> pd.DataFrame:
    return run.table("branch", columns=["step", "layer", "window", "fraction"], filters=[("step", "==", int(step))])


def branch_steps(run) -> np.ndarray:
    return _unique_sorted(run.arrow_table("branch", columns=["step"]).column("step"))


def scalar_frame(run, names) -> pd.DataFrame:
    """Rows of the named scalars (all layers and model-wide), columns step, layer, name, value."""
    return run.table("scalars", columns=["step", "layer", "name", "value"], filters=pc.field("name").isin(list(names)))


def nearest(steps: np.ndarray, step: int) -> int | None:
    """The recorded step closest to ``step`` (the earlier one on ties)."""
    if len(steps) == 0:
        return None
    i = int(np.searchsorted(steps, step))
    if i <= 0:
        return int(steps[0])
    if i >= len(steps):
        return int(steps[-1])
    return int(steps[i - 1] if step - steps[i - 1] <= steps[i] - step else steps[i])


def final_step(run) -> int | None:
    """The last step the run recorded: the larger of the manifest's ``last_step`` and the last
    scalar step (a live run's manifest can lag its newest segments)."""
    last = run.manifest.get("last_step")
    steps = _unique_sorted(run.arrow_table("scalars", columns=["step"]).column("step"))
    candidates = [int(last)] if isinstance(last, int) else []
    if len(steps):
        candidates.append(int(steps[-1]))
    return max(candidates) if candidates else None


def run_overview(run) -> dict:
    """One row of the Runs page: identity, status, steps, final loss and ACR."""
    scalars = scalar_frame(run, ["loss", "val_loss", "acr", "acr_causal"])
    return {
        "run_id": run.run_id,
        "regime": run.regime,
        "seed": run.seed,
        "status": run.status,
        "steps": final_step(run),
        "n_layer": run.n_layer,
        "n_head": run.n_head,
        "seq_len": run.seq_len,
        "windows": ", ".join(str(w) for w in run.windows),
        "final_loss": last_value(scalars, "loss"),
        "final_val_loss": last_value(scalars, "val_loss"),
        "final_acr": last_value(scalars, "acr"),
        "final_causal_coverage": last_value(scalars, "acr_causal"),
    }


def probe_tables(run) -> dict[str, pd.DataFrame]:
    """The probe tables this run has on disk (``probe_heads``, ``probe_relations``, ...)."""
    from aah_viz.schema import PROBE_TABLES

    present = set(run.tables())
    return {name: run.table(name) for name in PROBE_TABLES if name in present}


__all__ = [
    "branch_at",
    "branch_steps",
    "final_step",
    "group_columns",
    "heads_at_step",
    "heads_at_updates",
    "heads_of_layer",
    "nearest",
    "probe_tables",
    "recorded_steps",
    "run_overview",
    "scalar_frame",
    "tree_at",
    "tree_stats",
    "tree_steps",
    "update_steps",
]
