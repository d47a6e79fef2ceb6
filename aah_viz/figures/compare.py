"""Cross-run figures: regime means with spread over seeds, beside the reference's numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aah_viz.analysis.configurations import setup_ticks
from aah_viz.figures import style
from aah_viz.figures.curves import value_domain

SHORT_TITLES = {
    "final_loss": "final training loss",
    "final_val_loss": "final validation loss",
    "final_acr": "final ACR",
    "final_causal_coverage": "final causal-pair coverage",
}
METRIC_TITLES = {
    "final_loss": style.LOSS,
    "final_val_loss": style.VAL_LOSS,
    "final_acr": style.ACR,
    "final_causal_coverage": style.COVERAGE,
}
# the logged scalar each final figure is the last value of: its domain clips the error bars
METRIC_SCALARS = {
    "final_loss": "loss",
    "final_val_loss": "val_loss",
    "final_acr": "acr",
    "final_causal_coverage": "acr_causal",
}


def bar_extent(mean: np.ndarray, std: np.ndarray, scalar: str) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of mean ± sd, clipped to the values the scalar can take: two seeds of a share
    far apart must not draw a bar above 1, nor a loss one below 0."""
    lower, upper = mean - std, mean + std
    domain = value_domain(scalar)
    if domain is not None:
        lower, upper = np.clip(lower, *domain), np.clip(upper, *domain)
    return lower, upper


def regime_metric_figure(
    per_run: pd.DataFrame, metrics: list[str], reference: pd.DataFrame | None = None, title: str = ""
) -> go.Figure:
    """One panel per metric: mean ± std over seeds per regime (a wide dash with its spread), seeds as points.

    ``per_run``: one row per run with ``regime`` (or a setup's name, ``full_adaptive, sink_tokens=4``),
    ``seed`` and the metric columns.
    ``reference``: optional rows with ``regime`` and metric columns (published values), drawn as
    diamonds beside our bars; only for data on the same scale (the dashboard draws published
    results in their own figure, :func:`reference_metric_figure`).
    """
    metrics = [m for m in metrics if m in per_run.columns]
    n_cols = 2 if len(metrics) > 1 else 1
    n_rows = max(1, -(-len(metrics) // n_cols))
    fig = make_subplots(
        rows=n_rows,
        cols=n_cols,
        subplot_titles=[SHORT_TITLES.get(m, m) for m in metrics] or [""],
        vertical_spacing=0.2,
        horizontal_spacing=0.12,
    )
    regimes = sorted(per_run["regime"].dropna().astype(str).unique()) if not per_run.empty else []
    if reference is not None and not reference.empty:
        regimes = sorted(set(regimes) | set(reference["regime"].astype(str)))
    # a setup (``full_adaptive, sink_tokens=4``) in its regime's colour: the name before its settings
    colours = [style.regime_color(r.split(", ")[0]) for r in regimes]
    ticks = setup_ticks(regimes)
    shown: set[str] = set()
    # each run's regime and seed mark once for every panel, as object arrays: Plotly checks a list's every
    # element against its allowed symbols in Python, an array's against the set of them (1,000 runs, 4 panels)
    run_regimes = per_run["regime"].astype(str).to_numpy(dtype=object)
    seeds = per_run.get("seed", pd.Series([0] * len(per_run)))
    seed_marks = np.array([style.seed_symbol(sd) for sd in seeds], dtype=object)
    # the run's own name: two runs of one regime and seed are two points, each named (once, as an array)
    names = (
        np.array([str(k).replace("&", "&amp;").replace("<", "&lt;") for k in per_run["key"]], dtype=object)
        if "key" in per_run
        else None
    )

    def legend(group: str) -> bool:  # one legend entry per kind of mark, wherever it first appears
        if group in shown:
            return False
        shown.add(group)
        return True

    for i, metric in enumerate(metrics):
        row, col = i // n_cols + 1, i % n_cols + 1
        g = per_run.groupby(per_run["regime"].astype(str))[metric]
        mean = g.mean().reindex(regimes)
        std = g.std(ddof=1).reindex(regimes).fillna(0.0).to_numpy(dtype=np.float64)
        n = g.count().reindex(regimes).fillna(0).to_numpy(dtype=np.float64)
        centre = mean.to_numpy(dtype=np.float64)
        lower, upper = bar_extent(centre, std, METRIC_SCALARS.get(metric, metric))
        # a mean as a point with its spread, not a bar: a bar's length says "from 0", and losses of 2.9-3.8
        # drawn from 0 look alike; the axis fits the values instead
        fig.add_trace(
            go.Scatter(
                x=regimes,
                y=centre,
                mode="markers",
                error_y=dict(type="data", symmetric=False, array=upper - centre, arrayminus=centre - lower, width=8),
                customdata=np.column_stack([n, std]),
                name="our runs (mean ± sd)",
                marker=dict(
                    color=colours,
                    size=14,
                    symbol="line-ew-open",
                    line=dict(width=3, color=colours),
                ),  # fmt: skip
                showlegend=legend("ours"),
                legendgroup="ours",
                hovertemplate="%{x}<br>mean %{y:.4f} ± %{customdata[1]:.4f} (sd)"
                "<br>n = %{customdata[0]:.0f} seeds<extra></extra>",
            ),
            row=row,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=run_regimes,
                y=per_run[metric].to_numpy(dtype=np.float64),
                mode="markers",
                marker=dict(color="#333", size=7, symbol=seed_marks),
                name="one seed (shape: seed)",
                showlegend=legend("seeds"),
                legendgroup="seeds",
                text=names,
                hovertemplate="%{x}" + ("<br>%{text}" if "key" in per_run else "") + "<br>%{y:.4f}<extra></extra>",
            ),
            row=row,
            col=col,
        )
        if reference is not None and metric in reference.columns and reference[metric].notna().any():
            ref = reference.dropna(subset=[metric])
            fig.add_trace(
                go.Scatter(
                    x=ref["regime"].astype(str),
                    y=ref[metric].to_numpy(dtype=np.float64),
                    mode="markers",
                    marker=dict(symbol="diamond", color="#d62728", size=11),
                    name="reference (published)",
                    showlegend=legend("ref"),
                    legendgroup="ref",
                    hovertemplate="%{x}<br>published %{y:.4f}<extra></extra>",
                ),
                row=row,
                col=col,
            )
        fig.update_yaxes(title=METRIC_TITLES.get(metric, metric), row=row, col=col, title_font=dict(size=10))
        if ticks != regimes:  # long setup names: short marks on the axis, the whole name on hover
            fig.update_xaxes(tickvals=regimes, ticktext=ticks, row=row, col=col)
    return style.base_layout(fig, title, height=380 * n_rows + 60)


def reference_metric_figure(reference: pd.DataFrame, metrics: list[str], title: str = "") -> go.Figure:
    """The published values per regime, one panel per metric, on their own axes (the paper's runs use
    another context length and model size, so they never share an axis with ours)."""
    metrics = [m for m in metrics if m in reference.columns and reference[m].notna().any()]
    if not metrics:
        return style.empty_figure("the reference publishes none of these metrics", title)
    n_cols = 2 if len(metrics) > 1 else 1
    n_rows = -(-len(metrics) // n_cols)
    fig = make_subplots(
        rows=n_rows,
        cols=n_cols,
        subplot_titles=[SHORT_TITLES.get(m, m) + " (published)" for m in metrics],
        vertical_spacing=0.2,
        horizontal_spacing=0.12,
    )
    for i, metric in enumerate(metrics):
        row, col = i // n_cols + 1, i % n_cols + 1
        ref = reference.dropna(subset=[metric])
        g = ref.groupby(ref["regime"].astype(str))[metric].mean()
        fig.add_trace(
            go.Bar(
                x=list(g.index),
                y=g.to_numpy(dtype=np.float64),
                marker=dict(color=[style.regime_color(r) for r in g.index], pattern_shape="/"),
                name="reference (published)",
                showlegend=i == 0,
                hovertemplate="%{x}<br>published %{y:.4f}<extra></extra>",
            ),
            row=row,
            col=col,
        )
        fig.update_yaxes(title=METRIC_TITLES.get(metric, metric), row=row, col=col, title_font=dict(size=10))
    return style.base_layout(fig, title, height=380 * n_rows + 60)
