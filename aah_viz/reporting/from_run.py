"""A finished run's tables as ``RoutingRows``, block by block of steps, and its other scalars as series.

What the recorder held live is in the run: executed windows and groups per head (``heads``), the
coverage scalars and the controller's gradient norm (``scalars``), each layer's routing updates with
their group change rate (``routing_update`` events) and the origin of each level-0 grouping (``tree``).
A layer's latest update is carried forward to the steps after it, as the live recorder holds it.
Imported results without head rows give their model-wide ``window_frac_W`` as the window shares.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow.compute as pc

from aah_viz.errors import RunLogError
from aah_viz.reporting.scalars import FORCED_ORIGIN, PREFIX, RoutingRows
from aah_viz.runlog.reader import Run
from aah_viz.schema import group_column

# the run's model-wide scalars that are aah/ scalars; the others keep their names under a section
AAH_NAMES = {
    "acr": "acr",
    "acr_causal": "causal_coverage",
    "realised_work": "realised_work",
    "controller_grad_norm": "controller_grad_norm",
}
SECTIONS = {"loss": "train/loss", "lr": "train/lr", "val_loss": "eval/val_loss", "val_ppl": "eval/val_ppl"}
WINDOW_FRAC = "window_frac_"


def model_scalars(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (steps, values)} of the run's model-wide scalars, sorted by step, the last row of a step kept."""
    table = run.arrow_table("scalars", columns=["step", "layer", "name", "value"])
    table = table.filter(pc.is_null(table.column("layer")))
    df = table.to_pandas().dropna(subset=["value"])
    df = df.sort_values("step", kind="stable").drop_duplicates(["name", "step"], keep="last")
    return {
        str(name): (g["step"].to_numpy(np.int64), g["value"].to_numpy(np.float64)) for name, g in df.groupby("name")
    }


def other_series(run: Run, scalars: dict | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The run's other model-wide scalars, tagged ``train/loss``, ``eval/val_loss``, ``run/NAME``."""
    scalars = model_scalars(run) if scalars is None else scalars
    out = {}
    for name, series in scalars.items():
        if name in AAH_NAMES or name.startswith(WINDOW_FRAC):
            continue
        out[SECTIONS.get(name, f"run/{name}")] = series
    return out


def _aligned(series: tuple[np.ndarray, np.ndarray] | None, steps: np.ndarray) -> np.ndarray | None:
    """``series`` at ``steps`` (NaN where it has no row), or None without the series."""
    if series is None:
        return None
    s, v = series
    out = np.full(len(steps), np.nan)
    if len(s):
        i = np.clip(np.searchsorted(s, steps), 0, len(s) - 1)
        hit = s[i] == steps
        out[hit] = v[i[hit]]
    return out


def _carried(updates: dict[int, tuple[np.ndarray, np.ndarray]], steps: np.ndarray, n_layer: int) -> np.ndarray:
    """(S, L): each layer's latest value at or before each step (NaN before its first)."""
    out = np.full((len(steps), n_layer), np.nan)
    for layer, (s, v) in updates.items():
        if 0 <= layer < n_layer and len(s):
            i = np.searchsorted(s, steps, side="right") - 1
            out[:, layer] = np.where(i >= 0, v[np.maximum(i, 0)], np.nan)
    return out


def _by_layer(steps, layers, values) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    order = np.lexsort((steps,))  # stable by step: the last of a step wins in _carried
    steps, layers, values = steps[order], layers[order], values[order]
    return {int(l): (steps[layers == l], values[layers == l]) for l in np.unique(layers)}


def update_rates(run: Run) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per layer, (steps, group change rate) of its routing updates (NaN where the update had none)."""
    ev = run.events("routing_update")
    ev = ev.dropna(subset=["layer"])
    if not len(ev):
        return {}
    rates = np.asarray(
        [np.nan if (r := json.loads(d).get("group_change_rate")) is None else float(r) for d in ev["detail"]]
    )
    return _by_layer(ev["step"].to_numpy(np.int64), ev["layer"].to_numpy(np.int64), rates)


def level0_forced(run: Run) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per layer, (steps, 1.0 if the level-0 grouping is a forced bipartition else 0.0) of its updates."""
    if "tree" not in run.tables():
        return {}
    tree = run.table("tree", columns=["step", "layer", "level", "origin"], filters=[("level", "==", 0)])
    tree = tree.drop_duplicates(["step", "layer"], keep="last")
    if not len(tree):
        return {}
    forced = (tree["origin"].astype(str) == FORCED_ORIGIN).to_numpy(np.float64)
    return _by_layer(tree["step"].to_numpy(np.int64), tree["layer"].to_numpy(np.int64), forced)


def routing_blocks(run: Run, block: int = 1024, scalars: dict | None = None) -> Iterator[RoutingRows]:
    """The run's routing rows, ``block`` steps at a time, in step order."""
    scalars = model_scalars(run) if scalars is None else scalars
    given = {key: scalars.get(name) for name, key in AAH_NAMES.items()}
    L, H = int(run.n_layer or 0), int(run.n_head or 0)
    w_min = int(run.config.get("w_min") or 0)
    sinks = int(run.config.get("sink_tokens") or 0)
    candidates = tuple(int(w) for w in run.windows)
    depth = run.max_depth
    cols = ["step", "layer", "head", "window"] + [group_column(i) for i in range(depth)]
    heads = run.arrow_table("heads", columns=cols) if "heads" in run.tables() else None
    if heads is None or not len(heads):
        yield from _scalar_blocks(scalars, given, candidates, block)
        return
    heads = heads.sort_by([("step", "ascending"), ("layer", "ascending"), ("head", "ascending")])
    step_col = heads.column("step").to_numpy()
    steps, starts = np.unique(step_col, return_index=True)
    counts = np.diff(np.append(starts, len(step_col)))
    if (counts != L * H).any():
        bad = int(steps[np.argmax(counts != L * H)])
        raise RunLogError(f"run {run.path}: step {bad} has {counts[counts != L * H][0]} head rows, not {L} x {H}")
    rates, forced = update_rates(run), level0_forced(run)
    seq_len = int(run.seq_len or run.config.get("block_size") or 0)
    for lo in range(0, len(steps), block):
        chunk = steps[lo : lo + block]
        a, b = int(starts[lo]), int(starts[lo + len(chunk) - 1] + L * H)
        part = heads.slice(a, b - a)
        win = part.column("window").to_numpy().reshape(len(chunk), L, H)
        groups = None
        if depth:
            levels = [part.column(group_column(i)).fill_null(-1).to_numpy() for i in range(depth)]
            groups = np.stack(levels, axis=0).reshape(depth, len(chunk), L, H).transpose(1, 2, 0, 3)
        yield RoutingRows(
            steps=chunk,
            candidates=candidates,
            windows=win,
            seq_len=np.full(len(chunk), seq_len),
            w_min=w_min,
            sinks=sinks,
            groups=groups,
            acr=_aligned(given["acr"], chunk),
            causal_coverage=_aligned(given["causal_coverage"], chunk),
            realised_work=_aligned(given["realised_work"], chunk),
            controller_grad_norm=_aligned(given["controller_grad_norm"], chunk),
            group_change_rate=_carried(rates, chunk, L) if rates else None,
            level0_forced=_carried(forced, chunk, L) if forced else None,
        )


def _scalar_blocks(scalars: dict, given: dict, candidates, block: int) -> Iterator[RoutingRows]:
    """A run without head rows (imported results): its recorded scalars only."""
    names = [n for n in (*AAH_NAMES, *scalars) if n in scalars and (n in AAH_NAMES or n.startswith(WINDOW_FRAC))]
    if not names:
        return
    steps = np.unique(np.concatenate([scalars[n][0] for n in names]))
    for lo in range(0, len(steps), block):
        chunk = steps[lo : lo + block]
        yield RoutingRows(
            steps=chunk,
            candidates=candidates,
            acr=_aligned(given["acr"], chunk),
            causal_coverage=_aligned(given["causal_coverage"], chunk),
            realised_work=_aligned(given["realised_work"], chunk),
            controller_grad_norm=_aligned(given["controller_grad_norm"], chunk),
        )


def window_fractions(scalars: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Imported results' model-wide ``window_frac_W`` as ``aah/window_share/wW`` series."""
    out = {}
    for name, series in scalars.items():
        if name.startswith(WINDOW_FRAC) and name[len(WINDOW_FRAC) :].isdigit():
            out[f"{PREFIX}window_share/w{int(name[len(WINDOW_FRAC) :])}"] = series
    return out
