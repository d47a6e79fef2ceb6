"""The recorder's rows, built column-wise with numpy from host values (no torch).

``RoutingRecorder`` buffers what the model emits, copies it to the host and hands it here; each
function returns ``(table, columns)`` pairs for ``RunWriter.append`` (tables and columns as in
``docs/log-format.md``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa

from aah_viz import coverage
from aah_viz.runlog.manifest import to_jsonable
from aah_viz.schema import group_column

Columns = dict[str, Any]
TREE_COLUMNS = (
    "step",
    "layer",
    "level",
    "node",
    "parent",
    "members",
    "children",
    "logits",
    "base_logits",
    "margin",
    "raw_idx",
    "final_idx",
    "joint_paired",
    "joint_delta",
    "shadow",
    "origin",
    "forced_split",
    "merged",
    "sim_mean",
    "sim_std",
    "sim_min",
    "sim_max",
    "features",
)


def float_or_none(value: Any) -> float | None:
    """A finite float, or None (missing, NaN and infinite values are stored as null)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def int_column(values: np.ndarray, typ: pa.DataType, null_below: int | None = None) -> pa.Array:
    values = np.asarray(values)
    if null_below is None:
        return pa.array(values, type=typ)
    return pa.array(values, type=typ, mask=values < null_below)


def layer_coverage(
    windows: np.ndarray, seq_len: np.ndarray, w_min: int, sinks: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(acr, acr_causal) per row of ``windows`` (S, L, H) at sequence lengths ``seq_len`` (S,).

    The formulas of ``aah_viz.coverage.acr`` and ``causal_coverage``, vectorised over the rows; ``sinks``
    (the config's ``sink_tokens``) counts the pairs of the first positions every query keeps.
    """
    acr = np.empty(windows.shape[:2], dtype=np.float64)
    causal = np.empty(windows.shape[:2], dtype=np.float64)
    for T in np.unique(seq_len):
        rows = seq_len == T
        w = windows[rows]
        acr[rows] = coverage.effective_windows(w, int(T), w_min, sinks).sum(axis=-1) / (w.shape[-1] * float(T))
        causal[rows] = coverage.band_pairs(int(T), w, sinks).sum(axis=-1) / (w.shape[-1] * (T * (T + 1) / 2.0))
    return acr, causal


# ---------------------------------------------------------------------------- per step
def heads_columns(steps: np.ndarray, idx: np.ndarray, win: np.ndarray, raw: np.ndarray, groups) -> Columns:
    """One row per (step, layer, head): executed index and window, level-0 argmax, groups per level.

    ``idx``, ``win`` and ``raw`` are (S, L, H) (-1 = null); ``groups`` is (S, L, depth, H) or None.
    """
    S, L, H = win.shape
    n = S * L * H
    cols = {
        "step": np.repeat(steps, L * H),
        "layer": np.tile(np.repeat(np.arange(L, dtype=np.int16), H), S),
        "head": np.tile(np.arange(H, dtype=np.int16), S * L),
        "window_idx": int_column(idx.reshape(n), pa.int8(), null_below=0),
        "window": pa.array(win.reshape(n), type=pa.int32()),
        "raw_idx": int_column(raw.reshape(n), pa.int8(), null_below=0),
    }
    if groups is not None:
        for level in range(groups.shape[2]):
            cols[group_column(level)] = int_column(groups[:, :, level, :].reshape(n), pa.int16(), null_below=0)
    return cols


def scalar_columns(steps: list, names: list, values: list, layers: list | None = None) -> Columns:
    """Scalar rows: model-wide (layer null) unless ``layers`` is given."""
    return {
        "step": np.asarray(steps, dtype=np.int64),
        "layer": pa.nulls(len(steps), type=pa.int16()) if layers is None else np.asarray(layers, dtype=np.int16),
        "name": list(names),
        "value": pa.array([float_or_none(v) for v in values], type=pa.float64()),
    }


def coverage_rows(
    steps: np.ndarray,
    win: np.ndarray,
    seq_len: np.ndarray,
    work: list[dict[int, float | None]],
    *,
    w_min: int,
    flops_shape: tuple[int, int] | None,
    sinks: int = 0,
) -> tuple[Columns, list[tuple[np.ndarray, str, np.ndarray]]]:
    """Per-layer scalars (acr, acr_causal, realised_work) and the model-wide series derived from them.

    Returns the per-layer columns and ``(steps, name, values)`` model-wide series: the layer means
    of ACR and causal coverage, the FLOPs estimate (with ``flops_shape`` = (n_embd, n_ff)) and
    the mean realised work of the layers that reported one.
    """
    S, L, _ = win.shape
    acr, causal = layer_coverage(win, seq_len, w_min, sinks)
    model_acr = acr.mean(axis=1)
    series = [(steps, "acr", model_acr), (steps, "acr_causal", causal.mean(axis=1))]
    if flops_shape is not None:
        n_embd, n_ff = flops_shape
        est = [
            coverage.flops_ratio_est(a, seq_len=int(t), n_embd=n_embd, n_ff=n_ff) for a, t in zip(model_acr, seq_len)
        ]
        series.append((steps, "flops_ratio_est", np.asarray(est)))
    layer_steps = [np.tile(np.repeat(steps, L), 2)]
    layer_ids = [np.tile(np.tile(np.arange(L), S), 2)]
    names = [np.repeat(["acr", "acr_causal"], S * L)]
    values = [np.concatenate([acr.reshape(S * L), causal.reshape(S * L)])]
    work_rows = [(steps[s], layer, v) for s, d in enumerate(work) for layer, v in d.items()]
    if work_rows:
        by_step: dict[int, list[float]] = {}
        for st, _, v in work_rows:
            if v is not None:
                by_step.setdefault(int(st), []).append(v)
        series.append(
            (
                np.asarray(list(by_step), dtype=np.int64),
                "realised_work",
                np.asarray([np.mean(v) for v in by_step.values()], dtype=np.float64),
            )
        )
        layer_steps.append(np.asarray([r[0] for r in work_rows], dtype=np.int64))
        layer_ids.append(np.asarray([r[1] for r in work_rows]))
        names.append(np.asarray(["realised_work"] * len(work_rows)))
        values.append(np.asarray([np.nan if r[2] is None else r[2] for r in work_rows], dtype=np.float64))
    per_layer = {
        "step": np.concatenate(layer_steps),
        "layer": np.concatenate(layer_ids),
        "name": np.concatenate(names),
        "value": np.concatenate(values),
    }
    return per_layer, series


def model_scalar_columns(scalars: list[tuple[int, str, Any]], series) -> Columns | None:
    """Model-wide scalar rows: the buffered ``(step, name, value)`` and the derived ``series``."""
    steps = [s for s, _, _ in scalars]
    names = [n for _, n, _ in scalars]
    values = [v for _, _, v in scalars]
    for st, name, vals in series:
        steps.extend(np.asarray(st).tolist())
        names.extend([name] * len(vals))
        values.extend(np.asarray(vals, dtype=np.float64).tolist())
    return scalar_columns(steps, names, values) if steps else None


def branch_columns(steps: np.ndarray, win: np.ndarray) -> Columns:
    """Fraction of each layer's heads at each window, per step (zero fractions left out)."""
    values = np.unique(win)
    frac = (win[..., None] == values).mean(axis=2)  # (S, L, V)
    s_i, l_i, v_i = np.nonzero(frac)
    return {
        "step": steps[s_i],
        "layer": l_i.astype(np.int16),
        "window": values[v_i].astype(np.int32),
        "fraction": frac[s_i, l_i, v_i].astype(np.float32),
    }


def step_tables(
    steps: np.ndarray,
    idx: np.ndarray,
    win: np.ndarray,
    seq_len: np.ndarray,
    groups,
    raw: np.ndarray,
    work: list[dict[int, float | None]],
    scalars: list[tuple[int, str, Any]],
    *,
    w_min: int,
    flops_shape: tuple[int, int] | None,
    branch: bool,
    sinks: int = 0,
) -> list[tuple[str, Columns]]:
    """Every row a block of closed steps writes: heads, per-layer and model scalars, branch."""
    out = [("heads", heads_columns(steps, idx, win, raw, groups))]
    per_layer, series = coverage_rows(steps, win, seq_len, work, w_min=w_min, flops_shape=flops_shape, sinks=sinks)
    out.append(("scalars", per_layer))
    model = model_scalar_columns(scalars, series)
    if model is not None:
        out.append(("scalars", model))
    if branch:
        out.append(("branch", branch_columns(steps, win)))
    return out


# ---------------------------------------------------------------------------- per routing update
def tree_columns(updates: list[dict], keep_vectors: bool) -> Columns:
    """One row per hierarchy node of every buffered routing update (levels as numpy arrays).

    ``keep_vectors`` False stores empty logit and feature vectors (the ``light`` detail).
    """
    cols: dict[str, list] = {k: [] for k in TREE_COLUMNS}
    for upd in updates:
        for lv in upd["levels"]:
            logits = np.asarray(lv["logits"], dtype=np.float32)
            base = np.asarray(lv["base_logits"], dtype=np.float32)
            n = logits.shape[0]
            if n == 0:
                continue
            if logits.shape[1] >= 2:
                top2 = np.sort(logits, axis=1)[:, -2:]
                margin = top2[:, 1] - top2[:, 0]
            else:
                margin = np.zeros(n)
            paired = np.asarray(lv["joint_paired"], dtype=bool) if lv["joint_paired"] else np.zeros(n, bool)
            delta = np.where(paired, np.linalg.norm(logits - base, axis=1), 0.0)
            facts = lv["facts"]
            feats = lv["features"]
            cols["step"] += [upd["step"]] * n
            cols["layer"] += [upd["layer"]] * n
            cols["level"] += [lv["level"]] * n
            cols["node"] += list(range(n))
            cols["parent"] += list(lv["parent"]) if lv["parent"] is not None else [None] * n
            cols["members"] += [list(m) for m in lv["members"]]
            cols["children"] += [list(g) for g in lv["groups"]]
            cols["logits"] += logits.tolist() if keep_vectors else [[] for _ in range(n)]
            cols["base_logits"] += base.tolist() if keep_vectors else [[] for _ in range(n)]
            cols["margin"] += margin.tolist()
            cols["raw_idx"] += np.asarray(lv["raw_idx"]).tolist()
            cols["final_idx"] += np.asarray(lv["final_idx"]).tolist()
            cols["joint_paired"] += paired.tolist()
            cols["joint_delta"] += delta.tolist()
            cols["shadow"] += [upd["shadow"]] * n
            cols["origin"] += [facts.origin] * n
            cols["forced_split"] += [bool(facts.forced_split)] * n
            cols["merged"] += [int(facts.merged)] * n
            for key in ("sim_mean", "sim_std", "sim_min", "sim_max"):
                cols[key] += [float_or_none(getattr(facts, key))] * n
            cols["features"] += (
                np.asarray(feats, dtype=np.float32).tolist() if feats is not None else [[] for _ in range(n)]
            )
    return cols


def event_columns(events: list[tuple[int, int | None, str, dict]]) -> Columns:
    """Event rows: step, layer (null for model-wide events), kind and the detail as JSON."""
    return {
        "step": np.asarray([e[0] for e in events], dtype=np.int64),
        "layer": pa.array([e[1] for e in events], type=pa.int16()),
        "kind": [e[2] for e in events],
        "detail": [json.dumps(to_jsonable(e[3]), sort_keys=True) for e in events],
    }
