"""Probe figures: per-head score heatmaps and window vs score scatter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.figures import style
from aah_viz.figures.windows import cell_overlay, outline_cell


def probe_matrix(probe_heads: pd.DataFrame, probe: str, metric: str, n_layer: int, n_head: int) -> np.ndarray:
    """(n_layer, n_head) values of one probe metric at the latest probed step."""
    z = np.full((n_layer, n_head), np.nan)
    rows = probe_heads[(probe_heads["probe"] == probe) & (probe_heads["metric"] == metric)]
    if rows.empty:
        return z
    rows = rows[rows["step"] == rows["step"].max()] if "step" in rows and rows["step"].notna().any() else rows
    rows = rows.dropna(subset=["layer", "head"])
    li = rows["layer"].to_numpy().astype(int)
    hi = rows["head"].to_numpy().astype(int)
    ok = (li >= 0) & (li < n_layer) & (hi >= 0) & (hi < n_head)
    z[li[ok], hi[ok]] = rows["value"].to_numpy(dtype=np.float64)[ok]
    return z


DIVERGING = ("minus_baseline", "delta")  # metrics read against zero


def heatmap_range(matrix: np.ndarray, metric: str) -> tuple[float, float, bool]:
    """(zmin, zmax, diverging) for a probe heatmap.

    A metric that can be negative (score minus baseline) gets a diverging scale centred at 0;
    every other metric spans the values it has, so small scores are not drawn black on a fixed
    0-1 scale.
    """
    finite = matrix[np.isfinite(matrix)]
    if not finite.size:
        return 0.0, 1.0, False
    lo, hi = float(finite.min()), float(finite.max())
    if lo < 0 or any(tag in metric for tag in DIVERGING):
        reach = max(abs(lo), abs(hi)) or 0.5
        return -reach, reach, True
    if lo == hi:
        return lo - 0.5, hi + 0.5, False
    return lo, hi, False


def probe_heatmap_figure(
    matrix: np.ndarray,
    probe: str,
    metric: str,
    title: str = "",
    selected: tuple[int, int | None] | None = None,
    label: str | None = None,
) -> go.Figure:
    """Layers x heads coloured by a probe metric; a click on a cell selects that head (customdata
    [layer, head, value] on invisible markers), and ``selected`` (layer, head) is outlined. ``label``: the
    metric in words for the colour bar and the hover (default its name)."""
    n_layer, n_head = matrix.shape
    zmin, zmax, diverging = heatmap_range(matrix, metric)
    fig = go.Figure(
        go.Heatmap(
            z=matrix.astype(np.float32),
            x=np.arange(n_head),
            y=np.arange(n_layer),
            colorscale=style.named_scale(style.DIVERGING_SCALE if diverging else "Viridis"),
            zmin=zmin,
            zmax=zmax,
            colorbar=dict(title=dict(text=style.wrap_title(label or metric, 14))),
            hoverinfo="skip",  # the markers above carry the hover
            xgap=1,
            ygap=1,
        )
    )
    hover = f"layer %{{y}}, head %{{x}}<br>{probe} {label or metric}: %{{customdata[2]:.3f}}<extra></extra>"
    fig.add_trace(cell_overlay(n_layer, n_head, matrix, hover))
    if selected is not None and selected[1] is not None:
        outline_cell(fig, selected[1], selected[0])
    # the cells' own range: the invisible markers would pad the axes to -1..n_head
    fig.update_xaxes(title=style.HEAD, dtick=1 if n_head <= 32 else None, range=[-0.5, n_head - 0.5])
    fig.update_yaxes(title=style.LAYER, range=[n_layer - 0.5, -0.5], dtick=1 if n_layer <= 32 else None)
    return style.base_layout(fig, title or f"{probe}: {label or metric} per head", height=max(320, 22 * n_layer + 140))


def window_vs_probe_figure(
    points: pd.DataFrame, probe: str, metric: str, windows: list[int], title: str = "", label: str | None = None
) -> go.Figure:
    """One point per head: its window (x, log scale) against its probe score (y), jittered in x. ``label``:
    the metric in words for the axis and the title (default its name)."""
    colors = style.window_colors(windows)
    fig = go.Figure()
    if not points.empty:
        rng = np.random.default_rng(0)  # fixed jitter: the same picture every time
        jitter = np.exp(rng.uniform(-0.08, 0.08, len(points)))
        w = points["window"].to_numpy(dtype=np.float64)
        fig.add_trace(
            go.Scatter(
                x=w * jitter,
                y=points["value"].to_numpy(dtype=np.float64),
                mode="markers",
                marker=dict(color=[colors.get(int(v), "#888") for v in w], size=8, line=dict(color="#333", width=0.5)),
                customdata=np.stack(
                    [points["layer"].to_numpy(dtype=np.float64), points["head"].to_numpy(dtype=np.float64), w], axis=1
                ),
                hovertemplate="layer %{customdata[0]:.0f}, head %{customdata[1]:.0f}"
                "<br>window %{customdata[2]:.0f} tokens<br>score %{y:.3f}<extra></extra>",
                name="heads",
            )
        )
    fig.update_xaxes(title=style.WINDOW, type="log", tickvals=list(windows), ticktext=[str(w) for w in windows])
    fig.update_yaxes(title=f"{probe} {label or metric}")
    return style.base_layout(fig, title or f"window vs {probe} {label or metric}", height=420)
