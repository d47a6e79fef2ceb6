"""Perplexity against ACR for a frontier run: one point per configuration, intervals, the Pareto front."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from aah_viz.analysis.frontier import SEED_SUFFIX
from aah_viz.figures import style

PPL = "perplexity (95% interval over blocks)"
# one mark per family of configurations, so a reader tells baselines from AAH at a glance
# drawn last, on top: the patch sits on the unpatched model's point when the patch is exact
ON_TOP = "unpatched"
FAMILY_STYLE = {
    "unpatched": ("unpatched model", "star", "rgb(0,0,0)"),
    "patch": ("full-attention patch", "circle-open", "rgb(90,90,90)"),  # a ring: the unpatched star shows inside
    "sliding_window": ("static sliding window", "square", "rgb(31,119,180)"),
    "head_windows": ("profiled per-head windows", "diamond", "rgb(44,160,44)"),
    "zero_shot": ("AAH, untrained controller", "circle-open", "rgb(255,127,14)"),
    "adapted": ("AAH, adapted", "circle", "rgb(214,39,40)"),
}


def point_label(configuration: str, family: str, sinks: int = 0) -> str:
    """The short name written beside a point: the regime of an AAH row (``0-shot`` for its untrained
    controller), the window of a static one, the share of a profiled one; ``+kS`` when it keeps k sink tokens."""
    seeded = SEED_SUFFIX.search(configuration)  # a further adaptation seed: "_seed1"
    name = configuration[: seeded.start()] if seeded else configuration
    name = name.removesuffix(f"_sink{sinks}") if sinks else name
    plus = (f" +{sinks}S" if sinks else "") + (f" {seeded.group(0)[1:]}" if seeded else "")
    if family in ("zero_shot", "adapted"):  # the untrained row says so: the two rows of a regime never read alike
        untrained = " 0-shot" if family == "zero_shot" else ""
        return name.removesuffix("_zero_shot").removesuffix("_adapted").replace("_grouping", "") + untrained + plus
    if family == "sliding_window":
        return "w " + name.rsplit("_", 1)[-1] + plus
    if family == "head_windows" and sinks:
        return name.rsplit("_", 1)[-1] + plus
    return ""


def _sinks(table: pd.DataFrame) -> pd.Series:
    if "sink_tokens" not in table:
        return pd.Series(0, index=table.index)
    return table["sink_tokens"].fillna(0).astype(int)


def point_labels(table: pd.DataFrame) -> list[str]:
    """The chart's label of each row of ``table`` (its sinks included), for the table's "on the chart"."""
    return [point_label(c, f, k) for c, f, k in zip(table["configuration"], table["family"], _sinks(table))]


def sink_symbol(symbol: str) -> str:
    """The mark of a configuration that keeps sink tokens: its family's mark, hollow, with a dot (an open
    mark stays open and gains the dot), so a sink row never looks like its family's plain row."""
    return f"{symbol}-dot" if symbol.endswith("-open") else f"{symbol}-open-dot"


def _groups(table: pd.DataFrame):
    """(family, sink tokens, rows, legend name, marker symbol, colour) in FAMILY_STYLE order, sinks after."""
    sinks = _sinks(table)
    for family, (label, symbol, color) in FAMILY_STYLE.items():
        for k in sorted(set(sinks[table["family"] == family])):
            rows = table[(table["family"] == family) & (sinks == k)]
            if k:  # the same colour, a hollow dotted mark: the configuration keeps the first k positions
                yield family, k, rows, f"{label} + {k} sink{'s' if k > 1 else ''}", sink_symbol(symbol), color
            else:
                yield family, 0, rows, label, symbol, color


LABEL_SPOTS = ("top right", "bottom right", "top left", "bottom left", "middle right", "middle left")
NEAR_ACR = 0.02  # points closer than this in ACR (in a chain) share a column of the chart: labels take turns


def label_positions(table: pd.DataFrame) -> pd.Series:
    """Where each point's label sits: points of nearly the same ACR (of any family) take the spots around
    a point in turn, by perplexity, so their labels do not print on top of each other."""
    order = table.sort_values(["acr", "ppl"], kind="stable")
    spots, last, turn = {}, None, 0
    for idx, acr in zip(order.index, order["acr"]):
        turn = 0 if last is None or acr - last > NEAR_ACR else turn + 1  # a gap in ACR starts a new column
        spots[idx], last = LABEL_SPOTS[turn % len(LABEL_SPOTS)], acr
    return pd.Series(spots).reindex(table.index)


def frontier_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """``table``: ``aah_viz.analysis.frontier.frontier_table`` rows. The front joins the points no
    other configuration beats on both ACR and perplexity."""
    fig = go.Figure()
    spots = label_positions(table)
    groups = list(_groups(table))
    groups.sort(key=lambda g: g[0] == ON_TOP)  # stable: every other family keeps its order
    for family, sinks, rows, label, symbol, color in groups:
        if rows.empty:
            continue
        labels = [point_label(c, family, sinks) for c in rows["configuration"]]
        ring = symbol.endswith("-open") and family == "patch"
        fig.add_trace(
            go.Scatter(
                x=rows["acr"],
                y=rows["ppl"],
                mode="markers+text" if any(labels) else "markers",
                name=label,
                legendrank=list(FAMILY_STYLE).index(family) * 10 + sinks % 10,
                marker=dict(
                    symbol=symbol,
                    size=18 if ring else 11,
                    color=color,
                    line=dict(width=2 if ring or sinks else 1, color=color),
                ),
                # small caps, labels above or below the point: a label never sits across a neighbour's bar
                error_y=style.interval_bars(rows["ppl"], rows["ppl_lo"], rows["ppl_hi"], thickness=1.2, width=3),
                text=rows["configuration"],
                customdata=[
                    [lo, hi, cov, lab]
                    for lo, hi, cov, lab in zip(rows["ppl_lo"], rows["ppl_hi"], rows["acr_causal"], labels)
                ],
                texttemplate="%{customdata[3]}",
                textposition=spots.loc[rows.index].tolist(),
                textfont=dict(size=10, color=color),
                hovertemplate="%{text}<br>perplexity %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                "<br>ACR %{x:.3f}, causal coverage %{customdata[2]:.3f}<extra></extra>",
            )
        )
    front = table[table["pareto"]].sort_values("acr")
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=front["acr"],
                y=front["ppl"],
                mode="lines",
                name="Pareto front",
                line=dict(color="rgba(0,0,0,0.45)", dash="dot", width=1.5),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        template=style.TEMPLATE,
        title=title or None,
        xaxis_title=style.ACR,
        yaxis_title=PPL,
        legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0),
        margin=dict(l=70, r=20, t=50 if title else 20, b=120),
        height=520,
    )
    return fig


def adaptation_figure(curves: dict[str, list[list[float]]], title: str = "") -> go.Figure:
    """Validation perplexity of each adapted configuration's adaptation run at its evaluations (the
    frontier's ``adapt_curve``): whether the adaptation had stopped improving when its row was evaluated."""
    fig = go.Figure()
    for name, curve in curves.items():
        steps = [int(step) for step, _ in curve]
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[math.exp(loss) for _, loss in curve],
                mode="lines+markers",
                name=name,
                hovertemplate=f"{name}<br>step %{{x}}: perplexity %{{y:.2f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title="adaptation step")
    fig.update_yaxes(title="validation perplexity (adaptation text)")
    fig = style.base_layout(fig, title, height=380)
    fig.update_layout(showlegend=True)  # each curve named by its configuration, a single one too
    return fig
