"""Window allocation: layer x head matrices, head x step timelines, bucket fractions, series.

Inputs are frames of the ``heads``, ``branch`` and ``scalars`` tables (columns as in
:mod:`aah_viz.schema`); outputs are small numpy matrices and frames ready to plot.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def window_matrix(heads: pd.DataFrame, n_layer: int, n_head: int, value: str = "window") -> np.ndarray:
    """(n_layer, n_head) float matrix of ``value`` for one step's head rows; NaN where no row exists."""
    out = np.full((n_layer, n_head), np.nan)
    if heads.empty:
        return out
    layer = heads["layer"].to_numpy().astype(int)
    head = heads["head"].to_numpy().astype(int)
    ok = (layer >= 0) & (layer < n_layer) & (head >= 0) & (head < n_head)
    out[layer[ok], head[ok]] = heads[value].to_numpy().astype(float)[ok]
    return out


def sample_steps(steps: np.ndarray, max_columns: int, prefer: np.ndarray | None = None) -> np.ndarray:
    """At most ``max_columns`` recorded steps, evenly spaced, always keeping the first and last.

    ``prefer`` (routing-update steps) is used instead when it fits: windows change only at updates,
    so a timeline sampled there loses nothing.
    """
    steps = np.unique(np.asarray(steps))
    if prefer is not None:
        prefer = np.intersect1d(np.unique(np.asarray(prefer)), steps)
        if 0 < len(prefer) <= max_columns:
            if steps[-1] not in prefer:
                prefer = np.append(prefer, steps[-1])
            if steps[0] not in prefer and len(prefer) < max_columns:
                prefer = np.insert(prefer, 0, steps[0])
            return prefer
        if len(prefer) > max_columns:
            steps = prefer
    if len(steps) <= max_columns:
        return steps
    idx = np.unique(np.round(np.linspace(0, len(steps) - 1, max_columns)).astype(int))
    return steps[idx]


def head_timeline(heads: pd.DataFrame, n_head: int, value: str = "window") -> tuple[np.ndarray, np.ndarray]:
    """(steps, matrix n_head x len(steps)) of ``value`` for one layer's rows (already step-sampled)."""
    if heads.empty:
        return np.zeros(0, dtype=np.int64), np.zeros((n_head, 0))
    steps = np.unique(heads["step"].to_numpy())
    col = np.searchsorted(steps, heads["step"].to_numpy())
    head = heads["head"].to_numpy().astype(int)
    mat = np.full((n_head, len(steps)), np.nan)
    ok = (head >= 0) & (head < n_head)
    mat[head[ok], col[ok]] = heads[value].to_numpy().astype(float)[ok]
    return steps, mat


def bucket_fractions(branch: pd.DataFrame, windows: list[int]) -> pd.DataFrame:
    """Per layer, the share of its heads executing each candidate window (one step's ``branch`` rows).

    Returns a frame indexed by layer with one column per candidate window (missing = 0).
    """
    if branch.empty:
        return pd.DataFrame(columns=list(windows), dtype=float)
    # model-wide rows (layer null, e.g. imported published fractions) become layer -1
    branch = branch.assign(layer=branch["layer"].fillna(-1).astype("int64"))
    wide = branch.pivot_table(index="layer", columns="window", values="fraction", aggfunc="sum")
    return wide.reindex(columns=list(windows)).fillna(0.0).sort_index()


def bucket_fractions_from_heads(heads: pd.DataFrame, windows: list[int]) -> pd.DataFrame:
    """The same per-layer shares computed from head rows (for runs without a ``branch`` table)."""
    if heads.empty:
        return pd.DataFrame(columns=list(windows), dtype=float)
    counts = heads.groupby(["layer", "window"]).size().unstack("window", fill_value=0)
    shares = counts.div(counts.sum(axis=1), axis=0)
    return shares.reindex(columns=list(windows)).fillna(0.0).sort_index()


def run_bucket_fractions(per_layer: pd.DataFrame) -> pd.Series:
    """The paper's ``window_frac_<W>``: per-layer shares averaged over layers."""
    if per_layer.empty:
        return pd.Series(dtype=float)
    return per_layer.mean(axis=0)


def binned_series(frame: pd.DataFrame, x: str, y: str, max_points: int = 1000, by: str | None = None) -> pd.DataFrame:
    """Mean of ``y`` in at most ``max_points`` equal-width bins of ``x`` (per ``by`` group).

    The bin's x is the mean x of its rows, so an unbinned series (fewer rows than bins) is unchanged; the
    first and last bins sit at the series' own first and last x, so a binned line (and an axis or a range
    slider read from it) spans the steps the run logged, 0 to 2,499, not 1 to 2,498.
    """
    frame = frame.dropna(subset=[y])  # a series of NaN only (a damaged run) draws nothing
    if frame.empty:
        return frame[[c for c in (by, x, y) if c]].copy()
    groups = [(None, frame)] if by is None else list(frame.groupby(by, sort=True, dropna=False))
    parts = []
    for key, part in groups:
        part = part.sort_values(x)
        if len(part) > max_points:
            xs = part[x].to_numpy().astype(float)
            edges = np.linspace(xs[0], xs[-1], max_points + 1)
            b = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, max_points - 1)
            part = part.groupby(b).agg({x: "mean", y: "mean"})
            part.iloc[0, part.columns.get_loc(x)] = xs[0]
            part.iloc[-1, part.columns.get_loc(x)] = xs[-1]
        else:
            part = part[[x, y]]
        part = part.reset_index(drop=True)
        if by is not None:
            part.insert(0, by, key)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def last_value(scalars: pd.DataFrame, name: str) -> float | None:
    """The value of the named model-wide scalar at its last step (None when never logged)."""
    if scalars.empty:
        return None
    rows = scalars[(scalars["name"] == name)]
    if "layer" in rows:
        model_wide = rows[rows["layer"].isna()]
        rows = model_wide if not model_wide.empty else rows
    rows = rows.dropna(subset=["value"])
    if rows.empty:
        return None
    last = rows[rows["step"] == rows["step"].max()]
    return float(last["value"].mean())
