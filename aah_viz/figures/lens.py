"""Figures of the token lens: one head's attention from one query over a document's tokens, and the
heads x distance map that picks a head.

Token texts come from a user's document: Plotly would read HTML in them, so every token is escaped
before it is drawn (``html.escape``), and figures still pass ``text.without_links`` where shown.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.figures import style

TOKENS_PER_ROW = 16
WEIGHT_SCALE = [[0.0, "#f7fbff"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1.0, "#08306b"]]


def visible_token(text: str) -> str:
    """A token with its spaces and line breaks made visible (not escaped)."""
    visible = str(text).replace("\n", "⏎").replace("\t", "⇥")
    return (visible if visible.strip() else visible.replace(" ", "␣")) or "∅"


def shown_token(text: str) -> str:
    """A token as drawn: visible and escaped."""
    return html.escape(visible_token(text), quote=False)


def tokens_figure(
    tokens: pd.DataFrame,
    row: dict,
    links: pd.DataFrame,
    title: str,
    per_row: int = TOKENS_PER_ROW,
    kept: int = 0,
    arcs: pd.DataFrame | None = None,
    arcs_name: str = "",
) -> go.Figure:
    """The document's tokens in reading order, coloured by the weight ``row`` (one query's
    ``attention_samples`` row) puts on each; keys the executed window cuts crossed out, the sink
    outlined, the query framed, and the gold links of this query drawn as arcs to their keys; with
    ``arcs`` (``lens.relation_arcs``), every arc of that relation in the document too, named ``arcs_name``."""
    n = len(tokens)
    q = int(row["query"])
    weights = np.zeros(n)
    for j, w in zip(row["keys"], row["weights"]):
        if 0 <= int(j) < n:
            weights[int(j)] = float(w)
    window = int(row["window"])
    pos = np.arange(n)
    x, y = pos % per_row, -(pos // per_row)
    texts = [shown_token(t) for t in tokens["token"]]
    cut = (pos <= q - window) & (pos >= kept)  # the first ``kept`` (sink_tokens) stay visible
    future = pos > q
    hover = [
        f"{texts[j]} (position {j})<br>weight {weights[j]:.3f}"
        + ("<br>cut by the window" if cut[j] else "")
        + ("<br>after the query: not visible" if future[j] else "")
        for j in range(n)
    ]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="markers+text",
            text=texts,
            textfont=dict(
                size=11,
                color=[
                    "#999999" if f else ("#ffffff" if w > 0.55 * weights.max() > 0 else "#111111")
                    for f, w in zip(future, weights)
                ],
            ),
            marker=dict(
                symbol="square",
                size=34,
                color=weights,
                cmin=0,
                cmax=max(float(weights.max()), 1e-9),
                colorscale=WEIGHT_SCALE,
                colorbar=dict(title="weight"),
                line=dict(
                    color=["#d62728" if j == q else ("#ff7f0e" if j == 0 else "#cccccc") for j in range(n)],
                    width=[3 if j in (q, 0) else 1 for j in range(n)],
                ),
            ),
            hovertext=hover,
            hoverinfo="text",
            name="tokens",
            showlegend=False,
        )
    )
    if cut.any():
        fig.add_trace(
            go.Scatter(
                x=x[cut],
                y=y[cut],
                mode="markers",
                marker=dict(symbol="x-thin", size=30, line=dict(width=1.5, color="#d62728")),
                name=f"cut by the {window}-token window ({float(row['mass_outside']):.1%} of the mass)",
                hoverinfo="skip",
            )
        )
    mine = links[links["query"] == q] if len(links) else links
    for link in mine.itertuples():
        k = int(link.key)
        if not 0 <= k < n:
            continue
        fig.add_trace(
            go.Scatter(
                x=[x[q], (x[q] + x[k]) / 2, x[k]],
                y=[y[q] + 0.3, max(y[q], y[k]) + 0.6, y[k] + 0.3],
                mode="lines",
                line=dict(shape="spline", color="#2ca02c" if link.gold else "#7f7f7f", width=2),
                name=f"{html.escape(str(link.kind))} {html.escape(str(link.label))}"
                + ("" if link.gold else " (not gold)"),
                hoverinfo="name",
            )
        )
    if arcs is not None and len(arcs):
        ax, ay = [], []
        for a, b in zip(arcs["query"], arcs["key"]):
            a, b = int(a), int(b)
            if 0 <= a < n and 0 <= b < n:
                ax += [x[a], (x[a] + x[b]) / 2, x[b], None]
                ay += [y[a] + 0.3, max(y[a], y[b]) + 0.8, y[b] + 0.3, None]
        fig.add_trace(
            go.Scatter(
                x=ax,
                y=ay,
                mode="lines",
                line=dict(shape="spline", color="#9467bd", width=1.5, dash="dot"),
                name=html.escape(arcs_name or "arcs"),
                hoverinfo="name",
            )
        )
    rows = int(np.ceil(n / per_row))
    fig.update_xaxes(visible=False, range=[-0.7, per_row - 0.3])
    fig.update_yaxes(visible=False, range=[-rows + 0.4, 1.0])
    style.base_layout(fig, title, height=160 + 48 * rows)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.02, x=0))
    return fig


def distance_map_figure(
    matrix: np.ndarray, labels: list[str], n_head: int, title: str, selected=None, first_layer: int = 0
) -> go.Figure:
    """Heads (rows, layer by layer) x distance bins: the mean weight of the stored keys at each distance.
    Each cell carries [layer, head] so that a click selects the head. ``matrix`` may hold some layers
    only, the first of them ``first_layer``."""
    n_rows = matrix.shape[0]
    layer = first_layer + np.arange(n_rows) // max(n_head, 1)
    head = np.arange(n_rows) % max(n_head, 1)
    names = [f"L{lay}H{h}" for lay, h in zip(layer, head)]
    custom = np.stack([np.repeat(layer[:, None], matrix.shape[1], 1), np.repeat(head[:, None], matrix.shape[1], 1)], -1)
    fig = go.Figure(
        go.Heatmap(
            z=matrix,
            x=labels,
            y=names,
            customdata=custom,
            colorscale=WEIGHT_SCALE,
            colorbar=dict(title="weight"),
            hovertemplate="%{y}, distance %{x}: %{z:.3f}<extra></extra>",
        )
    )
    # invisible markers on every cell: Plotly selects points, not heatmap cells, so a click on a row lands on
    # a marker carrying [layer, head] (a marker no taller than a row, or a click would take the next head)
    fig.data[0].hoverinfo = "skip"
    fig.add_trace(
        go.Scatter(
            x=np.tile(np.asarray(labels, dtype=object), n_rows),
            y=np.repeat(np.asarray(names, dtype=object), len(labels)),
            mode="markers",
            marker=dict(size=10, opacity=0.0, symbol="square"),
            customdata=np.stack([np.repeat(layer, len(labels)), np.repeat(head, len(labels)), matrix.ravel()], axis=1),
            hovertemplate="L%{customdata[0]}H%{customdata[1]}, distance %{x}: %{customdata[2]:.3f}<extra></extra>",
            showlegend=False,
            name="click to select a head",
            meta="helper",
        )
    )
    fig.update_layout(clickmode="event+select", dragmode=False)
    r = None if selected is None else (int(selected[0]) - first_layer) * n_head + int(selected[1])
    if r is not None and 0 <= r < n_rows:
        fig.add_shape(type="rect", x0=-0.5, x1=len(labels) - 0.5, y0=r - 0.5, y1=r + 0.5, line=dict(color="#d62728"))
    fig.update_yaxes(autorange="reversed", title="head")
    fig.update_xaxes(title="distance from the query (tokens)")
    return style.base_layout(fig, title, height=max(260, 14 * n_rows + 120))
