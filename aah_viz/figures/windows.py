"""Window allocation figures: layer x head heatmap, head x step timeline, branch bars, coverage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aah_viz.figures import style


def _window_colorbar(windows: list[int]) -> dict:
    return dict(
        title=dict(text=style.WINDOW), tickvals=[float(np.log2(w)) for w in windows], ticktext=[str(w) for w in windows]
    )


def window_heatmap_figure(matrix: np.ndarray, windows: list[int], title: str = "") -> go.Figure:
    """Layer (rows) x head (columns) executed windows at one step.

    z is log2(window) (equal colour bands per doubling); customdata holds the window in tokens.
    """
    scale, zmin, zmax = style.discrete_window_scale(windows)
    n_layer, n_head = matrix.shape
    fig = go.Figure(
        go.Heatmap(
            z=style.window_z(matrix),
            customdata=np.nan_to_num(matrix, nan=-1).astype(np.int32),
            x=np.arange(n_head),
            y=np.arange(n_layer),
            colorscale=scale,
            zmin=zmin,
            zmax=zmax,
            colorbar=_window_colorbar(windows),
            hovertemplate="layer %{y}, head %{x}<br>window %{customdata} tokens<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title=style.HEAD, dtick=1 if n_head <= 32 else None)
    fig.update_yaxes(title=style.LAYER, autorange="reversed", dtick=1 if n_layer <= 32 else None)
    return style.base_layout(fig, title, height=max(320, 22 * n_layer + 140))


def head_timeline_figure(steps: np.ndarray, matrix: np.ndarray, windows: list[int], title: str = "") -> go.Figure:
    """Head (rows) x sampled training step (columns) windows of one layer."""
    scale, zmin, zmax = style.discrete_window_scale(windows)
    n_head = matrix.shape[0]
    fig = go.Figure(
        go.Heatmap(
            z=style.window_z(matrix),
            customdata=np.nan_to_num(matrix, nan=-1).astype(np.int32),
            x=np.asarray(steps, dtype=np.int64),
            y=np.arange(n_head),
            colorscale=scale,
            zmin=zmin,
            zmax=zmax,
            colorbar=_window_colorbar(windows),
            hovertemplate="step %{x}, head %{y}<br>window %{customdata} tokens<extra></extra>",
        )
    )
    fig.update_xaxes(title=style.STEP)
    fig.update_yaxes(title=style.HEAD, autorange="reversed", dtick=1 if n_head <= 32 else None)
    return style.base_layout(fig, title, height=max(300, 18 * n_head + 140))


def branch_bars_figure(per_layer: pd.DataFrame, windows: list[int], title: str = "") -> go.Figure:
    """Stacked bars per layer: share of its heads at each window (the paper's branch frequencies)."""
    colors = style.window_colors(windows)
    fig = go.Figure()
    layers = per_layer.index.to_numpy()
    for w in windows:
        vals = per_layer[w].to_numpy(dtype=np.float64) if w in per_layer else np.zeros(len(layers))
        fig.add_trace(
            go.Bar(
                x=layers,
                y=vals,
                name=f"{w}",
                marker_color=colors.get(w),
                hovertemplate=f"layer %{{x}}<br>window {w}: %{{y:.1%}}<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack", legend_title_text=style.WINDOW)
    fig.update_xaxes(title=style.LAYER, dtick=1 if len(layers) <= 32 else None)
    fig.update_yaxes(title=style.BUCKET_SHARE, range=[0, 1], tickformat=".0%")
    return style.base_layout(fig, title, height=420)


COVERAGE_PANELS = (
    ("acr", "ACR", style.ACR),
    ("acr_causal", "causal-pair coverage", style.COVERAGE),
    ("realised_work", "realised work", style.REALISED),
)


def coverage_figure(series: pd.DataFrame, title: str = "") -> go.Figure:
    """The three coverage figures over training, stacked on one step axis, one line per run (``label``).

    ACR (the paper's key-length proxy), causal-pair coverage, and realised work (what the
    attention backend actually computed; dense masked computes every T² score, about 2).
    ``series`` has columns label, name (``acr`` / ``acr_causal`` / ``realised_work``), step,
    value (already binned).
    """
    # stacked, sharing the step axis: three full-width panels keep their long axis titles readable
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, subplot_titles=[t for _, t, _ in COVERAGE_PANELS], vertical_spacing=0.08
    )
    labels = list(dict.fromkeys(series["label"])) if not series.empty else []
    palette = [
        "#1f77b4",
        "#d62728",
        "#2ca02c",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
        "#ff7f0e",
    ]
    for i, label in enumerate(labels):
        color = palette[i % len(palette)]
        for row, (name, _, _) in enumerate(COVERAGE_PANELS, start=1):
            part = series[(series["label"] == label) & (series["name"] == name)]
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["step"].to_numpy(dtype=np.float64),
                    y=part["value"].to_numpy(dtype=np.float64),
                    mode="lines",
                    name=label,
                    legendgroup=label,
                    showlegend=row == 1,
                    line=dict(color=color),
                    hovertemplate=f"{label}<br>step %{{x:.0f}}<br>%{{y:.3f}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    fig.update_xaxes(title=style.STEP, row=len(COVERAGE_PANELS), col=1)
    for row, (name, _, axis) in enumerate(COVERAGE_PANELS, start=1):
        top = 1.05
        if name == "realised_work" and not series.empty:  # dense masked computes about twice the causal pairs
            values = series.loc[series["name"] == name, "value"].dropna()
            top = max(top, float(values.max()) * 1.05) if len(values) else top
        fig.update_yaxes(title=style.two_lines(axis), range=[0, top], row=row, col=1)
    style.base_layout(fig, title, height=860)
    return fig.update_layout(margin=dict(l=90))


def bucket_heatmap_figure(table: pd.DataFrame, title: str = "", row_title: str = "run") -> go.Figure:
    """Runs or regimes (rows) x window (columns): share of slots at each window, annotated in %.

    The layout of the paper's Figure 4 ("final selected-window distribution").
    """
    z = table.to_numpy(dtype=np.float64) * 100.0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(c) for c in table.columns],
            y=[str(i) for i in table.index],
            colorscale=style.FIGURE4_SCALE,
            zmin=0,
            zmax=max(65.0, float(np.nanmax(z)) if z.size else 65.0),
            colorbar=dict(title=dict(text="% of slots")),
            text=np.round(z, 1),
            texttemplate="%{text:.1f}%",
            hovertemplate="%{y}<br>window %{x}: %{z:.1f}%<extra></extra>",
        )
    )
    fig.update_xaxes(title=style.WINDOW, type="category")
    fig.update_yaxes(title=row_title, autorange="reversed")
    return style.base_layout(fig, title, height=max(300, 40 * len(table) + 160))
