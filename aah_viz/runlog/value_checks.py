"""The value checks of ``validate_run`` on the columns it kept of each table: ranges (layer, head,
window index, window = windows[window_idx], branch fractions), the manifest's layer and head counts
against ``heads``, duplicated keys, model-wide scalars with no finite value, ``events.detail`` as JSON
objects, and ACR scalars against what the ``heads`` table implies (method section 11.1). Each
problem names its first example and the segment files that hold it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz import coverage
from aah_viz.runlog import bounded_json

ACR_TOLERANCE = 1e-5  # recorders may compute in float32
MAX_EXAMPLES = 3


def check_values(manifest: dict, tables: dict[str, pd.DataFrame]) -> list[str]:
    """Every value check on the kept columns of ``tables`` (keyed by table name), one message per problem."""
    problems = []
    n_layer, n_head = manifest.get("n_layer"), manifest.get("n_head")
    windows = manifest.get("windows") if isinstance(manifest.get("windows"), list) else []
    heads = tables.get("heads")
    if heads is not None and len(heads):
        problems += _check_heads(heads, n_layer, n_head, windows)
    branch = tables.get("branch")
    if branch is not None and len(branch):
        problems += _check_branch(branch, n_layer)
    scalars = tables.get("scalars")
    if scalars is not None and len(scalars):
        problems += _duplicates(scalars, ["step", "layer", "name"], "scalars")
        problems += _no_finite_value(scalars)
        if heads is not None and len(heads):
            problems += _check_acr(manifest, heads, scalars)
    events = tables.get("events")
    if events is not None and len(events):
        problems += _check_events(events)
    tree = tables.get("tree")
    if tree is not None and len(tree) and isinstance(n_layer, int):
        problems += _range(tree, "layer", 0, n_layer - 1, "tree")
    return problems


def _check_heads(heads: pd.DataFrame, n_layer, n_head, windows) -> list[str]:
    problems = []
    if isinstance(n_layer, int):
        problems += _range(heads, "layer", 0, n_layer - 1, "heads")
    if isinstance(n_head, int):
        problems += _range(heads, "head", 0, n_head - 1, "heads")
    for field, column, declared in (("n_layer", "layer", n_layer), ("n_head", "head", n_head)):
        present = heads[column].dropna().nunique()
        if isinstance(declared, int) and present != declared:
            problems.append(
                f"manifest.json: field {field!r} is {declared} but the heads table has {present} distinct {column}s"
            )
    problems += _duplicates(heads, ["step", "layer", "head"], "heads")
    if windows:
        problems += _range(heads, "window_idx", 0, len(windows) - 1, "heads")
        idx = heads["window_idx"].to_numpy(dtype=np.float64)
        ok = ~np.isnan(idx) & (idx >= 0) & (idx < len(windows))
        expected = np.full(len(heads), np.nan)
        expected[ok] = np.asarray(windows, dtype=np.float64)[idx[ok].astype(np.int64)]
        win = heads["window"].to_numpy(dtype=np.float64)
        bad = ok & ~np.isnan(win) & (win != expected)
        if bad.any():
            problems.append(
                f"heads: {int(bad.sum())} rows where window != windows[window_idx] "
                f"(first: {_example(heads[bad])}; files: {_files(heads[bad])})"
            )
    return problems


def _no_finite_value(scalars: pd.DataFrame) -> list[str]:
    """Model-wide scalars whose every value is NaN or infinite: recorded, but no number to show."""
    model = scalars[scalars["layer"].isna()]
    if not len(model):
        return []
    finite = pd.Series(np.isfinite(model["value"].to_numpy(dtype=np.float64)), index=model.index)
    any_finite = finite.groupby(model["name"].astype(str)).any()
    empty = sorted(any_finite[~any_finite].index)
    if not empty:
        return []
    shown = ", ".join(repr(n) for n in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
    return [
        f"scalars: {len(empty)} model-wide scalar{'s' * (len(empty) > 1)} hold no finite value, only NaN or "
        f"infinity ({shown}; files: {_files(model[model['name'].astype(str).isin(empty)])}); the run is damaged"
    ]


def _check_branch(branch: pd.DataFrame, n_layer) -> list[str]:
    problems = []
    if isinstance(n_layer, int):
        problems += _range(branch, "layer", 0, n_layer - 1, "branch")
    problems += _range(branch, "fraction", 0.0, 1.0, "branch")
    problems += _duplicates(branch, ["step", "layer", "window"], "branch")
    sums = branch.groupby(["step", "layer"], dropna=False)["fraction"].sum()
    bad = sums[(sums - 1.0).abs() > 1e-3]
    if len(bad):
        step, layer = bad.index[0]
        problems.append(
            f"branch: fractions of {len(bad)} (step, layer) pairs do not sum to 1 "
            f"(first: step {step} layer {layer} sums to {bad.iloc[0]:.4f})"
        )
    return problems


def _check_events(events: pd.DataFrame) -> list[str]:
    bad_rows = []
    for i, text in enumerate(events["detail"].tolist()):
        if text is None or (isinstance(text, float) and np.isnan(text)):
            continue
        try:
            ok = isinstance(bounded_json.loads(text), dict)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            bad_rows.append(i)
    if not bad_rows:
        return []
    bad = events.iloc[bad_rows]
    return [
        f"events: {len(bad_rows)} rows whose detail is not a JSON object "
        f"(first: step {bad['step'].iloc[0]} kind {bad['kind'].iloc[0]!r}; files: {_files(bad)})"
    ]


def _check_acr(manifest: dict, heads: pd.DataFrame, scalars: pd.DataFrame) -> list[str]:
    """Logged ``acr`` / ``acr_causal`` against the values the heads table implies."""
    seq_len, n_head, n_layer = manifest.get("seq_len"), manifest.get("n_head"), manifest.get("n_layer")
    if not all(isinstance(v, int) and v > 0 for v in (seq_len, n_head, n_layer)):
        return []
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    w_min = config.get("w_min") or 0
    sinks = config.get("sink_tokens") or 0
    step_T = scalars[(scalars["name"] == "seq_len") & scalars["layer"].isna()]
    problems = []
    for name in ("acr", "acr_causal"):
        logged = scalars[scalars["name"] == name]
        if not len(logged):
            continue
        expected_layer, expected_model = implied_coverage(heads, seq_len, n_head, n_layer, w_min, name, step_T, sinks)
        per_layer = logged[logged["layer"].notna()]
        if len(per_layer):
            joined = per_layer.merge(expected_layer, on=["step", "layer"], how="inner")
            problems += _compare(joined, f"per-layer {name}")
        model = logged[logged["layer"].isna()]
        if len(model):
            joined = model.drop(columns=["layer"]).merge(expected_model, on="step", how="inner")
            problems += _compare(joined, f"model-wide {name}")
    return problems


def implied_coverage(
    heads: pd.DataFrame,
    seq_len: int,
    n_head: int,
    n_layer: int,
    w_min: float = 0,
    name: str = "acr",
    step_seq_len: pd.DataFrame | None = None,
    sinks: int = 0,
):
    """``acr`` (or ``acr_causal``) per (step, layer) and model-wide per step implied by ``heads``.

    Per layer: ACR = sum_h min(T, max(W_min, w_h)) / (H T); causal coverage = sum_h
    sum_t min(t + 1, w_h) / (H T (T + 1) / 2); with the config's ``sink_tokens`` the sink pairs count too
    (``aah_viz.coverage``). Model-wide values are the mean over layers, for
    steps that have every layer. T is the manifest's ``seq_len`` unless a model-wide ``seq_len``
    scalar gives the step's own.
    """
    steps = heads["step"].to_numpy()
    T = np.full(len(heads), float(seq_len))
    if step_seq_len is not None and len(step_seq_len):
        lookup = step_seq_len.drop_duplicates("step").set_index("step")["value"]
        found = pd.Series(steps).map(lookup).to_numpy(dtype=np.float64)
        T = np.where(np.isnan(found), T, found)
    windows = heads["window"].to_numpy(dtype=np.float64)
    value = np.empty(len(heads))
    for t in np.unique(T):
        rows = T == t
        if name == "acr":
            value[rows] = coverage.effective_windows(windows[rows], int(t), int(w_min), sinks).astype(np.float64) / (
                n_head * t
            )
        else:
            value[rows] = coverage.band_pairs(int(t), windows[rows], sinks).astype(np.float64) / (
                n_head * t * (t + 1) / 2
            )
    frame = pd.DataFrame({"step": steps, "layer": heads["layer"].to_numpy(), "v": value})
    per_layer = frame.groupby(["step", "layer"], sort=True)["v"].sum().rename("expected").reset_index()
    by_step = per_layer.groupby("step")["expected"].agg(["mean", "size"]).reset_index()
    model = by_step[by_step["size"] == n_layer][["step", "mean"]].rename(columns={"mean": "expected"})
    per_layer["layer"] = per_layer["layer"].astype(np.float64)
    return per_layer, model


def _compare(joined: pd.DataFrame, what: str) -> list[str]:
    if not len(joined):
        return []
    diff = (joined["value"] - joined["expected"]).abs()  # a NaN where the heads imply a value disagrees too
    bad = joined[~(diff <= ACR_TOLERANCE)]
    if not len(bad):
        return []
    first = bad.iloc[0]
    where = f"step {int(first['step'])}" + (
        f" layer {int(first['layer'])}" if "layer" in bad and pd.notna(first.get("layer")) else ""
    )
    return [
        f"scalars: {what} disagrees with the heads table at {len(bad)} of {len(joined)} points "
        f"(first: {where} logged {first['value']:.6g}, heads imply {first['expected']:.6g}; "
        f"files: {_files(bad)})"
    ]


def _range(frame: pd.DataFrame, column: str, lo, hi, table: str) -> list[str]:
    values = frame[column].to_numpy(dtype=np.float64)
    bad = ~np.isnan(values) & ((values < lo) | (values > hi))
    if not bad.any():
        return []
    return [
        f"{table}: {int(bad.sum())} rows with {column} outside [{lo}, {hi}] "
        f"(first: {_example(frame[bad])}; files: {_files(frame[bad])})"
    ]


def _duplicates(frame: pd.DataFrame, keys: list[str], table: str) -> list[str]:
    dup = frame.duplicated(subset=keys, keep=False)
    if not dup.any():
        return []
    rows = frame[dup]
    return [
        f"{table}: {int(dup.sum())} rows share a ({', '.join(keys)}) key "
        f"(first: {_example(rows, keys)}; files: {_files(rows)})"
    ]


def _example(frame: pd.DataFrame, keys: list[str] | None = None) -> str:
    row = frame.iloc[0]
    cols = keys or [c for c in frame.columns if c != "_file"]
    return ", ".join(f"{c}={_fmt(row[c])}" for c in cols)


def _fmt(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "null"
    return str(value)


def _files(frame: pd.DataFrame) -> str:
    if "_file" not in frame:
        return "?"
    names = [str(n) for n in pd.unique(frame["_file"])]
    shown = ", ".join(names[:MAX_EXAMPLES])
    return shown + (f" and {len(names) - MAX_EXAMPLES} more" if len(names) > MAX_EXAMPLES else "")
