"""Stability and controller-health figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.analysis.curves import step_bins
from aah_viz.figures import style
from aah_viz.figures.windows import cell_overlay, outline_cell

STABILITY_PANELS = (
    "ARI of the level-0 partition vs the previous update (1 = same; mean / min over layers)",
    "heads switching group or window at an update (heads / H, mean over layers)",
    "layers whose tree changed shape (any level's partition or the number of levels), per step bin",
)


def _binned_over_layers(updates: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Per step bin: mean/min ARI, mean switch shares, and layers with a topology change."""
    u = updates.dropna(subset=["window_switch_share"]).copy()  # ARI is NaN without grouping; windows still switch
    if u.empty:
        return pd.DataFrame(
            columns=["step", "ari_mean", "ari_min", "group_switch_share", "window_switch_share", "topology_changes"]
        )
    u["bin"] = step_bins(u["step"].to_numpy(), max_points)
    u["topology_changed"] = u["topology_changed"].astype("boolean").fillna(False).astype("float64")
    g = u.groupby("bin")
    return pd.DataFrame(
        {
            "step": g["step"].mean(),
            "ari_mean": g["ari"].mean(),
            "ari_min": g["ari"].min(),
            "group_switch_share": g["group_switch_share"].mean(),
            "window_switch_share": g["window_switch_share"].mean(),
            # a layer counts once per bin however many of its updates changed topology
            "topology_changes": u[u["topology_changed"] > 0]
            .groupby("bin")["layer"]
            .nunique()
            .reindex(g.size().index, fill_value=0),
        }
    ).reset_index(drop=True)


def stability_figure(updates: pd.DataFrame, title: str = "", max_points: int = 600) -> go.Figure:
    """Three panels over training: ARI, shares of heads switching, topology changes."""
    b = _binned_over_layers(updates, max_points)
    fig = style.stacked_panels(STABILITY_PANELS, spacing=0.07)
    x = b["step"].to_numpy(dtype=np.float64)
    for column, name, row, line in (
        ("ari_mean", "ARI mean", 1, dict(color="#1f77b4")),
        ("ari_min", "ARI min", 1, dict(color="#1f77b4", dash="dot")),
        ("group_switch_share", "switching group", 2, dict(color="#2ca02c")),
        ("window_switch_share", "switching window", 2, dict(color="#d62728")),
    ):
        style.add_line(fig, x, b[column].to_numpy(dtype=np.float64), name, row, **line)
    fig.add_trace(
        go.Bar(
            x=x,
            y=b["topology_changes"].to_numpy(dtype=np.float64),
            name="layers changing topology",
            marker_color="#9467bd",
        ),
        row=3,
        col=1,
    )
    # short axis titles; the definitions are the panel titles (long titles overlap on stacked panels)
    fig.update_yaxes(title="ARI", range=[-0.55, 1.05], row=1, col=1, title_font=dict(size=12))
    fig.update_yaxes(title="heads / H", range=[0, 1.02], row=2, col=1, title_font=dict(size=12))
    fig.update_yaxes(title="layers", row=3, col=1, title_font=dict(size=12))
    fig.update_annotations(font_size=12)
    fig.update_xaxes(title=style.STEP, row=3, col=1)
    return style.base_layout(fig, title, height=760)


def switch_rate_figure(
    stats: pd.DataFrame, n_layer: int, n_head: int, title: str = "", selected: tuple[int, int | None] | None = None
) -> go.Figure:
    """Layer x head heatmap of window switches per update, mean dwell time in the hover."""
    z = np.full((n_layer, n_head), np.nan)
    dwell = np.full((n_layer, n_head), np.nan)
    if not stats.empty:
        li = stats["layer"].to_numpy().astype(int)
        hi = stats["head"].to_numpy().astype(int)
        z[li, hi] = stats["switch_rate"].to_numpy(dtype=np.float64)
        dwell[li, hi] = stats["mean_dwell_steps"].to_numpy(dtype=np.float64)
    fig = go.Figure(
        go.Heatmap(
            z=z.astype(np.float32),
            x=np.arange(n_head),
            y=np.arange(n_layer),
            customdata=dwell.astype(np.float32),
            colorscale=style.named_scale("Blues"),
            zmin=0,
            zmax=max(float(np.nanmax(z)) if np.isfinite(z).any() else 1.0, 1e-6),
            colorbar=dict(title=dict(text="switches /<br>(updates − 1)")),
            hovertemplate="L%{y}H%{x}<br>switch rate %{z:.3f}<br>mean dwell %{customdata:.0f} steps<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.data[0].hoverinfo = "skip"
    fig.add_trace(
        cell_overlay(
            n_layer,
            n_head,
            z,
            "L%{customdata[0]}H%{customdata[1]}<br>switch rate %{customdata[2]:.3f}<extra></extra>",
        )
    )
    if selected is not None and selected[1] is not None:
        outline_cell(fig, selected[1], selected[0])
    fig.update_xaxes(title=style.HEAD, dtick=1 if n_head <= 32 else None, range=[-0.5, n_head - 0.5])
    fig.update_yaxes(title=style.LAYER, range=[n_layer - 0.5, -0.5], dtick=1 if n_layer <= 32 else None)
    fig.update_layout(clickmode="event+select", dragmode=False)
    # a short title: the chart sits in half the page, where the definition (switches / updates − 1) was cut
    # off; the colour bar and the hover carry the unit
    return style.base_layout(fig, title or "window switches per update, per head", height=max(320, 22 * n_layer + 140))


def controller_health_figure(series: pd.DataFrame, margins: pd.DataFrame | None = None, title: str = "") -> go.Figure:
    """Controller gradient norm and weight drift over training (does routing learn at all?).

    ``series``: columns name (controller_grad_norm / controller_weight_drift), step, value (binned,
    model-wide). ``margins``: optional step, margin (mean decision margin over groups, binned).
    """
    rows = 3 if margins is not None and not margins.empty else 2
    titles = ["controller gradient norm", "controller weight drift", "decision margin"][:rows]
    fig = style.stacked_panels(titles, spacing=0.08)
    for r, (name, words, ytitle, color) in enumerate(
        (
            ("controller_grad_norm", "gradient norm", style.GRAD_NORM, "#ff7f0e"),
            ("controller_weight_drift", "weight drift", style.WEIGHT_DRIFT, "#8c564b"),
        ),
        start=1,
    ):
        part = series[series["name"] == name] if not series.empty else series
        if not part.empty:
            x, y = (part[c].to_numpy(dtype=np.float64) for c in ("step", "value"))
            style.add_line(fig, x, y, words, r, color=color)  # words in the legend, not the scalar's name
        else:
            fig.add_annotation(
                text=f"no controller {words} logged ({name})",
                showarrow=False,
                xref=f"x{r if r > 1 else ''} domain",
                yref=f"y{r if r > 1 else ''} domain",
                x=0.5,
                y=0.5,
            )
        fig.update_yaxes(title=ytitle, row=r, col=1, title_font=dict(size=11))
    if rows == 3:
        x, y = (margins[c].to_numpy(dtype=np.float64) for c in ("step", "margin"))
        style.add_line(fig, x, y, "mean margin", 3, color="#17becf")
        fig.update_yaxes(title=style.MARGIN, row=3, col=1, title_font=dict(size=11))
    fig.update_xaxes(title=style.STEP, row=rows, col=1)
    return style.base_layout(fig, title, height=260 * rows + 80)
