"""Do the AAH head groups line up with what the heads do? And do windows follow the probes?

Both comparisons are made *within a layer*: AAH groups heads layer by layer, and heads of
different layers differ in everything, so a comparison across layers mostly rediscovers the
layer. Read from a run directory after ``aah-viz probe``: :func:`compare_run` returns the
``comparisons`` table (``partition_agreement``: the groups against clusters of the heads' probe
profiles, ``head_profiles``) and the ``window_association`` table (``window_association``: windows
against probe scores).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.analysis import queries
from aah_viz.errors import RunLogError
from aah_viz.probes.head_profiles import js_matrix, wide_probe_heads
from aah_viz.probes.partition_agreement import COMPARISON_COLUMNS, partition_rows, partition_verdicts
from aah_viz.probes.window_association import ASSOCIATION_COLUMNS, association_rows


def group_labels(heads_at_step: pd.DataFrame, level: int, n_layer: int, n_head: int) -> np.ndarray | None:
    col = f"group_l{level}"
    if col not in heads_at_step or heads_at_step[col].isna().all():
        return None
    labels = np.full((n_layer, n_head), -1, dtype=np.int64)
    for layer, head, g in zip(heads_at_step["layer"], heads_at_step["head"], heads_at_step[col]):
        labels[int(layer), int(head)] = -1 if pd.isna(g) else int(g)
    return labels


def same_partitions(a: np.ndarray, b: np.ndarray) -> bool:
    """(n_layer, n_head) labels ``a`` and ``b`` split every layer's heads the same way (ids aside)."""
    for x, y in zip(a, b):
        pairs = set(zip(x.tolist(), y.tolist()))
        if len(pairs) != len(set(x.tolist())) or len(pairs) != len(set(y.tolist())):
            return False
    return True


def head_windows(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray:
    """(n_layer, n_head) windows the heads were probed with (from any probe_heads row)."""
    w = np.zeros((n_layer, n_head), dtype=np.int64)
    first = probe_heads.dropna(subset=["window"]).drop_duplicates(["layer", "head"])
    w[first["layer"].astype(int), first["head"].astype(int)] = first["window"].astype(int)
    return w


def compare_run(
    run,
    step: int | None = None,
    level: int | None = None,
    permutations: int = 200,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """The ``comparisons`` and ``window_association`` tables of one run (an opened
    ``aah_viz.runlog.Run``) at a probed step."""
    probe_heads = run.table("probe_heads")
    if probe_heads.empty:
        raise RunLogError(f"run {run.path} has no probe_heads table; run `aah-viz probe {run.path}` first")
    steps = sorted(int(s) for s in probe_heads["step"].unique())
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise RunLogError(f"run {run.path} was probed at steps {steps}, not at step {step}")
    probe_heads = probe_heads[probe_heads["step"] == step]
    n_layer = int(run.n_layer or probe_heads["layer"].max() + 1)
    n_head = int(run.n_head or probe_heads["head"].max() + 1)
    windows = head_windows(probe_heads, n_layer, n_head)
    rows = []
    heads = run.table("heads")
    if not heads.empty and (heads["step"] <= step).any():
        at = heads[heads["step"] == heads.loc[heads["step"] <= step, "step"].max()]
        max_depth = int(run.max_depth or 0) or sum(c.startswith("group_l") for c in at.columns)
        levels = [level] if level is not None else list(range(max_depth))
        wide = wide_probe_heads(probe_heads, n_layer, n_head)
        js = js_matrix(probe_heads, n_layer, n_head)
        below = None
        for lv in levels:
            labels = group_labels(at, lv, n_layer, n_head)
            if labels is None or not (labels >= 0).all(axis=1).any():
                continue
            if level is None and below is not None and same_partitions(labels, below):
                continue  # a level that repeats the one below it compares the same partition again
            rows += partition_rows(step, lv, labels, windows, wide, js, permutations, seed)
            below = labels
    comparisons = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    comparisons["partition_verdict"] = partition_verdicts(queries.cluster_validity(run), comparisons)
    for col in ("level", "layer", "n_heads", "n_groups", "n_probe_clusters", "n_layers"):
        comparisons[col] = comparisons[col].astype("Int64")
    association = pd.DataFrame(
        association_rows(step, probe_heads, n_boot, permutations * 5, seed), columns=ASSOCIATION_COLUMNS
    )
    for col in ("layer", "n_heads", "n_layers"):
        association[col] = association[col].astype("Int64")
    return {"comparisons": comparisons, "window_association": association}
