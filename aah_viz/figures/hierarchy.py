"""The hierarchy tree of one layer at one routing update, drawn from its networkx graph."""

from __future__ import annotations

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from aah_viz.analysis.hierarchy import tree_layout
from aah_viz.figures import style


def _fmt_list(values, digits: int = 2) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


def _hover(d: dict, windows: list[int]) -> str:
    if d["kind"] == "head":
        w = d.get("window")
        return f"head {d['head']}<br>window: {w if w is not None else '?'} tokens"
    lines = [
        f"level {d['level']} group {d['node']}" + (" (shadow: not executed)" if d.get("shadow") else ""),
        f"members: {d['members']}",
    ]
    w = d.get("window")
    raw = d.get("raw_idx")
    raw_w = windows[int(raw)] if raw is not None and 0 <= int(raw) < len(windows) else None
    lines.append(
        f"window: {w if w is not None else '?'} tokens"
        + (f" (raw argmax {raw_w}; parent-clamped)" if raw_w is not None and raw_w != w else "")
    )
    if d.get("logits"):
        lines.append(f"logits: {_fmt_list(d['logits'])}")
    if d.get("base_logits"):
        lines.append(f"controller logits: {_fmt_list(d['base_logits'])}")
    if d.get("margin") is not None:
        lines.append(f"margin: {float(d['margin']):.3f}")
    if d.get("joint_paired"):
        delta = d.get("joint_delta")
        lines.append(f"joint scorer: paired, |Δlogits| = {float(delta or 0):.3f}")
    else:
        lines.append("joint scorer: unpaired")
    if d.get("origin"):
        lines.append(f"clustering: {d['origin']}")
    return "<br>".join(lines)


def hierarchy_figure(g: nx.DiGraph, windows: list[int], title: str = "") -> go.Figure:
    """Groups above heads, edges parent -> child, nodes coloured by their window."""
    pos = tree_layout(g)
    colors = style.window_colors(windows)
    fig = go.Figure()
    ex, ey = [], []
    for u, v in sorted(g.edges, key=lambda e: (pos[e[0]], pos[e[1]])):
        ex += [pos[u][0], pos[v][0], None]
        ey += [pos[u][1], pos[v][1], None]
    fig.add_trace(
        go.Scatter(
            x=ex, y=ey, mode="lines", line=dict(color="#999", width=1), hoverinfo="skip", showlegend=False, name="edges"
        )
    )
    nodes = sorted(g.nodes, key=lambda n: (pos[n][1], pos[n][0]))
    buckets: dict = {}
    for n in nodes:
        buckets.setdefault(g.nodes[n].get("window"), []).append(n)
    for w in sorted(buckets, key=lambda x: (x is None, x or 0)):
        ns = buckets[w]
        fig.add_trace(
            go.Scatter(
                x=np.array([pos[n][0] for n in ns]),
                y=np.array([pos[n][1] for n in ns]),
                mode="markers+text",
                marker=dict(
                    opacity=1.0,  # array sizes would otherwise make plotly draw see-through "bubbles"
                    size=[12 if g.nodes[n]["kind"] == "head" else 20 for n in ns],
                    color=colors.get(w, "#cccccc"),
                    symbol=["circle" if g.nodes[n]["kind"] == "head" else "square" for n in ns],
                    line=dict(
                        color=["#d62728" if g.nodes[n].get("joint_paired") else "#333" for n in ns],
                        width=[3 if g.nodes[n].get("joint_paired") else 1 for n in ns],
                    ),
                ),
                text=[
                    f"h{g.nodes[n]['head']}"
                    if g.nodes[n]["kind"] == "head"
                    else f"L{g.nodes[n]['level']}.{g.nodes[n]['node']}"
                    for n in ns
                ],
                textposition="bottom center",
                hovertext=[_hover(g.nodes[n], windows) for n in ns],
                hoverinfo="text",
                name=f"{w} tokens" if w is not None else "no window",
            )
        )
    levels = sorted({g.nodes[n]["level"] for n in g.nodes})
    fig.update_yaxes(
        title=style.LEVEL,
        tickvals=[lv + 1 for lv in levels],
        ticktext=["heads" if lv < 0 else f"level {lv}" for lv in levels],
        zeroline=False,
        range=[-0.6, (max(levels) + 1.5) if levels else 1],
    )
    fig.update_xaxes(title="heads in tree order (depth-first)", showticklabels=False, zeroline=False, showgrid=False)
    fig.update_layout(legend_title_text=style.WINDOW)
    return style.base_layout(fig, title, height=520)
