"""Projected, filtered reads of one run: the only analysis module that touches a ``Run``.

Each function reads just the columns and rows it needs (pyarrow projection + filters), so a
paper-shaped run (3.8M head rows) stays fast: one step's heatmap reads ~400 rows, one layer's
timeline reads that layer at sampled steps only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis.stability import SUMMARY_COLUMNS, Matrices, group_columns, summarize_updates
from aah_viz.analysis.windows import last_value
from aah_viz.schema import MANIFEST_FLAG, PROBE_TABLES, TABLES, group_column

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


def file_step_bounds(seg) -> tuple[int, int] | None:
    """Smallest and largest step of one segment file, from its footer's statistics (its steps read only
    when a foreign writer left none); None when it has no rows or an unreadable footer."""
    try:
        md = pq.read_metadata(seg)
        col = md.schema.to_arrow_schema().get_field_index("step")
        stats = [md.row_group(i).column(col).statistics for i in range(md.num_row_groups)]
    except Exception:  # noqa: BLE001 - an unreadable footer: the reader reports the segment
        return None
    if not stats or any(st is None or not st.has_min_max for st in stats):
        if md.num_rows:  # no statistics: read this segment's steps (rare: foreign writers)
            steps = pq.read_table(seg, columns=["step"]).column("step")
            lo, hi = pc.min(steps).as_py(), pc.max(steps).as_py()
            if lo is not None:
                return int(lo), int(hi)
        return None
    return min(int(st.min) for st in stats), max(int(st.max) for st in stats)


def segment_step_bounds(run, table: str) -> np.ndarray:
    """(segments, 2) smallest and largest step of each segment of ``table``, from the bounds the run knows
    (its summary's, ``Run.use_step_index``) or else the Parquet footers' statistics: no row is read."""
    if table not in run.tables():
        return np.zeros((0, 2), dtype=np.int64)
    out = run.segment_bounds(table)
    if out is None:
        out = [b for b in (file_step_bounds(seg) for seg in run.segments(table)) if b is not None]
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def last_step_of(run, table: str) -> int | None:
    bounds = segment_step_bounds(run, table)
    return int(bounds[:, 1].max()) if len(bounds) else None


def nearest_step(run, table: str, step: int | None = None) -> int | None:
    """The recorded step of ``table`` nearest ``step`` (default: the last), reading only the step column
    of the segments around it (their footers say which)."""
    bounds = segment_step_bounds(run, table)
    if len(bounds) == 0:
        return None
    if step is None:
        return int(bounds[:, 1].max())
    step = int(step)
    inside = (bounds[:, 0] <= step) & (bounds[:, 1] >= step)
    below = bounds[bounds[:, 1] < step, 1]
    above = bounds[bounds[:, 0] > step, 0]
    lo = min([*bounds[inside, 0].tolist(), *([int(below.max())] if len(below) else []), step])
    hi = max([*bounds[inside, 1].tolist(), *([int(above.min())] if len(above) else []), step])
    near = run.arrow_table(
        table, columns=["step"], filters=(pc.field("step") >= lo) & (pc.field("step") <= hi), steps=(lo, hi)
    )
    return nearest(_unique_sorted(near.column("step")), step)


def recorded_steps(run) -> np.ndarray:
    """Distinct steps with head rows (sorted)."""
    return _unique_sorted(run.arrow_table("heads", columns=["step"]).column("step"))


def has_summaries(run) -> bool:
    """Whether the run's writer kept per-update summaries from its first step (the ``updates`` table)."""
    return bool(run.manifest.get(MANIFEST_FLAG)) and "updates" in run.tables()


def update_summaries(run, columns=None, layers=None) -> pd.DataFrame:
    """One row per (layer, routing update): the ``updates`` table when the run has it, else the same
    rows computed from the head rows at routing updates (older runs)."""
    columns = list(columns) if columns is not None else list(SUMMARY_COLUMNS)
    if has_summaries(run):
        filters = None if layers is None else pc.field("layer").isin([int(x) for x in layers])
        out = run.table("updates", columns=columns, filters=filters)
        return out.sort_values(["layer", "step"], kind="stable").reset_index(drop=True)
    heads = heads_at_updates(run, layers)
    if heads.empty:
        return pd.DataFrame(columns=columns)
    out, _ = summarize_updates(Matrices(heads, run.n_head))  # the writer's own computation
    return out[columns]


def update_steps(run) -> pd.DataFrame:
    """(layer, step) of every routing update, from the per-update summaries or the ``events`` table.

    Falls back to the steps where ``tree`` rows exist, then to head rows with a ``raw_idx``
    (written on update forwards only), for runs that did not log ``routing_update`` events.
    """
    if has_summaries(run):
        ev = run.table("updates", columns=["step", "layer"])
        if not ev.empty:
            ev = ev.astype({"step": "int64", "layer": "int64"}).sort_values(["layer", "step"])
            return ev[["layer", "step"]].reset_index(drop=True)
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
    return run.table(
        "heads", columns=head_columns(run, with_groups), filters=[("step", "==", int(step))], steps=(step, step)
    )


def heads_of_layer(run, layer: int, steps=None, with_groups: bool = False) -> pd.DataFrame:
    filters, span = pc.field("layer") == int(layer), None
    if steps is not None:
        steps = [int(s) for s in steps]
        filters = filters & pc.field("step").isin(steps)
        span = (min(steps), max(steps)) if steps else None
    return run.table("heads", columns=head_columns(run, with_groups), filters=filters, steps=span)


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
    """Steps with a tree of ``layer``: its routing updates (from the per-update summaries) and the
    shadow builds before the first one; runs without summaries read the tree's step column."""
    if has_summaries(run):
        ups = run.arrow_table("updates", columns=["step"], filters=pc.field("layer") == int(layer))
        steps = _unique_sorted(ups.column("step"))
        first = int(steps[0]) if len(steps) else None
        expr = pc.field("layer") == int(layer)
        if first is not None:
            expr = expr & (pc.field("step") < first)
        span = None if first is None else (None, first - 1)  # the tree's segments before the first update
        early = run.arrow_table("tree", columns=["step"], filters=expr, steps=span)
        early = _unique_sorted(early.column("step"))
        return np.union1d(early, steps).astype(np.int64)
    t = run.arrow_table("tree", columns=["step"], filters=[("layer", "==", int(layer))])
    return _unique_sorted(t.column("step"))


def tree_at(run, layer: int, step: int) -> pd.DataFrame:
    return run.table("tree", filters=[("layer", "==", int(layer)), ("step", "==", int(step))], steps=(step, step))


def tree_stats(
    run, columns=("step", "layer", "level", "margin", "joint_delta", "joint_paired", "shadow")
) -> pd.DataFrame:
    return run.table("tree", columns=list(columns))


def cluster_validity(run, step: int | None = None, layer: int | None = None) -> pd.DataFrame:
    """One row per (step, layer) level-0 partition, with every column of the ``cluster_validity`` table
    (``step``, ``layer``: only that step's, that layer's rows).

    Runs recorded before that table existed fall back to what ``tree`` holds (origin and the
    similarity range of each level-0 build): the other measures are missing and the verdict is
    ``undefined``.
    """
    columns = list(TABLES["cluster_validity"])
    where = [(c, "==", int(v)) for c, v in (("step", step), ("layer", layer)) if v is not None]
    span = None if step is None else (step, step)
    if "cluster_validity" in run.tables():
        return run.table("cluster_validity", filters=where or None, steps=span).reindex(columns=columns)
    tree = run.table("tree", columns=["step", "layer", "origin", "shadow", "sim_min", "sim_max", "members"],
                     filters=[("level", "==", 0), *where], steps=span)  # fmt: skip
    if tree.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    per_update = tree.groupby(["step", "layer"], sort=True)
    out = per_update.agg(origin=("origin", "first"), shadow=("shadow", "first"), sim_min=("sim_min", "first"),
                         sim_max=("sim_max", "first"), n_groups=("members", "size"))  # fmt: skip
    out["n_heads"] = int(run.n_head or 0)
    out["threshold"] = float(run.config.get("sim_threshold", np.nan))
    out["verdict"] = cv.UNDEFINED
    return out.reset_index().reindex(columns=columns)


def branch_at(run, step: int) -> pd.DataFrame:
    return run.table(
        "branch",
        columns=["step", "layer", "window", "fraction"],
        filters=[("step", "==", int(step))],
        steps=(step, step),
    )


def branch_steps(run) -> np.ndarray:
    return _unique_sorted(run.arrow_table("branch", columns=["step"]).column("step"))


def scalar_frame(run, names, model_wide: bool = False, since: int | None = None) -> pd.DataFrame:
    """Rows of the named scalars, columns step, layer, name, value: all layers and model-wide, or
    model-wide only (layer null); ``since`` keeps steps from there on. Filters go down to Parquet."""
    expr = pc.field("name").isin(list(names))
    if model_wide:
        expr = expr & pc.field("layer").is_null()
    if since is not None:
        expr = expr & (pc.field("step") >= int(since))
    span = None if since is None else (int(since), None)
    return run.table("scalars", columns=["step", "layer", "name", "value"], filters=expr, steps=span)


def last_values(run, names, model_wide: bool = False) -> dict[str, float | None]:
    """The last logged value of each named model-wide scalar, reading the run's tail only: a window
    of steps before the last one that grows tenfold until every name is found (or the run is read)."""
    last = last_step_of(run, "scalars")
    out: dict[str, float | None] = {n: None for n in names}
    if last is None:
        return out
    window = 1000
    missing = list(names)
    while missing:
        since = last - window
        s = scalar_frame(run, missing, model_wide=model_wide, since=since if since > 0 else None)
        for name in list(missing):
            v = last_value(s, name)
            if v is not None:
                out[name] = v
                missing.remove(name)
        if since <= 0:
            break
        window *= 10
    return out


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
    scalar step (a live run's manifest can lag its newest segments; the footers say which)."""
    return _latest(run.manifest.get("last_step"), last_step_of(run, "scalars"))


def _latest(manifest_last, tail: int | None) -> int | None:
    candidates = [int(manifest_last)] if isinstance(manifest_last, int) else []
    if tail is not None:
        candidates.append(tail)
    return max(candidates) if candidates else None


def run_overview(run, final: dict | None = None, last_scalar_step: int | None = None) -> dict:
    """One row of the Runs page: identity, status, steps, final loss and ACR (the run's tail only).
    ``final`` (the four last values) and ``last_scalar_step`` come from the run's summary when the caller
    has it; otherwise they are read from the tables."""
    if final is None:
        final = last_values(run, ["loss", "val_loss", "acr", "acr_causal"])
        steps = final_step(run)
    else:
        steps = _latest(run.manifest.get("last_step"), last_scalar_step)
    return {
        "run_id": run.run_id,
        "regime": run.regime,
        "seed": run.seed,
        "status": run.status,
        "steps": steps,
        "n_layer": run.n_layer,
        "n_head": run.n_head,
        "seq_len": run.seq_len,
        "windows": ", ".join(str(w) for w in run.windows),
        "final_loss": final["loss"],
        "final_val_loss": final["val_loss"],
        "final_acr": final["acr"],
        "final_causal_coverage": final["acr_causal"],
    }


def probe_tables(run) -> dict[str, pd.DataFrame]:
    """The probe tables this run has on disk (``probe_heads``, ``probe_relations``, ...)."""
    present = set(run.tables())
    return {name: run.table(name) for name in PROBE_TABLES if name in present}


__all__ = [
    "branch_at",
    "branch_steps",
    "file_step_bounds",
    "final_step",
    "last_step_of",
    "last_values",
    "nearest_step",
    "segment_step_bounds",
    "has_summaries",
    "update_summaries",
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
