"""A factorial sweep's effects: a forest of effect sizes with their 95% intervals, and two-way
interaction plots (the cell means of two factors, a line per level of the second). Frames in, figures out:
the effects are ``aah_viz.export.effects.factorial_effects``'s rows, the means its ``interaction_means``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.figures import style

CLEAR = "rgb(214,39,40)"  # an interval that leaves out zero
UNCLEAR = "rgb(90,90,90)"  # an interval that holds zero
PALETTE = ("rgb(31,119,180)", "rgb(255,127,14)", "rgb(44,160,44)", "rgb(148,103,189)", "rgb(140,86,75)")


def effect_label(row) -> str:
    """``grouping: random vs feature`` for a main effect, ``grouping x scoring: random x independent`` for
    an interaction: the factor(s) and the level(s) the effect is about."""
    return f"{row['factors']}: {row['levels']}"


def forest_rows(effects: pd.DataFrame) -> pd.DataFrame:
    """The rows a forest draws: estimated effects (an aliased interaction has none), in the table's order,
    with their label and whether their interval leaves out zero."""
    rows = effects[pd.to_numeric(effects["effect"], errors="coerce").notna()].copy()
    rows["label"] = [effect_label(r) for _, r in rows.iterrows()]
    lo, hi = rows["ci_low"].astype(float), rows["ci_high"].astype(float)
    rows["clear"] = ((lo > 0) | (hi < 0)).to_numpy()
    return rows.reset_index(drop=True)


def forest_figure(effects: pd.DataFrame, metric: str, title: str = "", label: str | None = None) -> go.Figure:
    """One horizontal bar of the 95% interval and a point at the effect per row, the first row on top, a
    line at zero. An effect without an interval (too few seeds) is a hollow point with no bar. ``label``: the
    metric in words for the title and the axis (default its name)."""
    metric = label or metric
    rows = forest_rows(effects)
    fig = go.Figure()
    for clear, name, color in ((True, "interval leaves out 0", CLEAR), (False, "interval holds 0", UNCLEAR)):
        part = rows[rows["clear"] == clear] if clear else rows[~rows["clear"]]
        if part.empty:
            continue
        effect = part["effect"].astype(float).to_numpy()
        lo, hi = part["ci_low"].astype(float).to_numpy(), part["ci_high"].astype(float).to_numpy()
        has_ci = np.isfinite(lo) & np.isfinite(hi)
        fig.add_trace(
            go.Scatter(
                x=effect,
                y=part["label"],
                mode="markers",
                name=name if has_ci.any() else "no interval (too few seeds)",
                marker=dict(color=color, size=10, symbol=np.where(has_ci, "circle", "circle-open")),
                error_x=dict(
                    type="data",
                    symmetric=False,
                    array=np.where(has_ci, hi - effect, 0.0),
                    arrayminus=np.where(has_ci, effect - lo, 0.0),
                    color=color,
                    thickness=2,
                    width=6,
                ),
                customdata=np.column_stack([lo, hi, part["p_holm"].astype(float), part["n"]]),
                hovertemplate="%{y}<br>effect %{x:.4g}<br>95%% interval [%{customdata[0]:.4g}, "
                "%{customdata[1]:.4g}]<br>Holm p %{customdata[2]:.3g}<br>runs %{customdata[3]}<extra></extra>",
            )
        )
    fig.add_vline(x=0, line=dict(color="black", width=1, dash="dot"))
    labels = list(rows["label"])
    fig.update_layout(
        template=style.TEMPLATE,
        title=title or f"Effects on the final {metric} (95% intervals over seeds)",
        xaxis_title=f"effect on {metric} (level minus reference level)",
        yaxis=dict(categoryorder="array", categoryarray=labels[::-1], automargin=True),
        height=max(260, 70 + 34 * len(labels)),
        legend=dict(orientation="h", y=-0.25),
        margin=dict(l=10, r=10, t=50, b=40),
    )
    return fig


def interaction_figure(
    means: pd.DataFrame, pair: tuple[str, str], metric: str, title: str = "", label: str | None = None
) -> go.Figure:
    """x: the first factor's levels; a line per level of the second through its cell means. Parallel
    lines: no interaction; lines that cross or spread: the effect of one factor depends on the other.
    ``label``: the metric in words for the y axis (default its name)."""
    metric = label or metric
    f, g = pair
    fig = go.Figure()
    for i, (level, part) in enumerate(means.groupby(g, sort=False)):
        fig.add_trace(
            go.Scatter(
                x=part[f].astype(str),
                y=part["mean"].astype(float),
                mode="lines+markers",
                name=f"{g} = {level}",
                line=dict(color=PALETTE[i % len(PALETTE)], width=2),
                customdata=np.column_stack([part["cells"], part["n"]]),
                hovertemplate=f"{f} = %{{x}}, {g} = {level}<br>mean %{{y:.4g}}<br>"
                "cells %{customdata[0]}, runs %{customdata[1]}<extra></extra>",
            )
        )
    fig.update_layout(
        template=style.TEMPLATE,
        title=title or f"{f} x {g}",  # short: three plots share a row
        xaxis_title=f,
        yaxis_title=f"mean final {metric}",
        height=340,
        legend=dict(orientation="h", y=-0.3),
        margin=dict(l=10, r=10, t=50, b=40),
    )
    return fig
