"""The hierarchy tree of one layer at one routing update, drawn from its networkx graph.

Naming: heads are ``L3H5`` (layer 3, head 5) as everywhere on the dashboard; groups are named in
words by level and index ("level 1, group 2"). The legend has one section per encoding: colour =
window, shape = group or head, outline = jointly scored / chosen window not executed / moved /
selected.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from aah_viz.analysis.hierarchy import collapse_repeated_levels, head_id, tree_graph, tree_layout
from aah_viz.figures import style
from aah_viz.regimes import WINDOW_OVERRIDES

JOINT = "#d62728"
NOT_EXECUTED = "#ff7f0e"
MOVED = "#e377c2"
SELECTED = "#000000"


def head_name(layer: int | None, head: int) -> str:
    return f"L{layer}H{head}" if layer is not None else f"H{head}"


def group_name(level: int, node: int) -> str:
    return f"level {level}, group {node}"


def _logits_by_window(values, windows: list[int]) -> str:
    """Logits labelled by the window each one scores: ``16: 0.12 · 32: −0.40``."""
    if len(values) == len(windows):
        return " · ".join(f"{w}: {v:.2f}" for w, v in zip(windows, values))
    return ", ".join(f"{v:.2f}" for v in values)


def not_executed_reason(d: dict, executed: set[int], windows: list[int], override: str | None) -> str | None:
    """Why a level-0 group's chosen window is not what its heads run (None when it is)."""
    w = d.get("window")
    if d.get("shadow"):
        return "shadow build: routing computed but not executed (warm-up or control off)"
    if w is None or not executed or executed == {w}:
        return None
    ran = "/".join(str(x) for x in sorted(executed))
    raw = d.get("raw_idx")
    raw_w = windows[int(raw)] if raw is not None and 0 <= int(raw) < len(windows) else None
    if override:
        return f"heads run {ran}: the {override} regime overrides the controller's choice"
    if raw_w is not None and raw_w != w:
        return f"heads run {ran}: parent clamp (raw choice {raw_w})"
    return f"heads run {ran} (executed windows come from the heads table at this step)"


def _hover(d: dict, windows: list[int], layer: int | None, reason: str | None) -> str:
    if d["kind"] == "head":
        w = d.get("window")
        lines = [f"{head_name(layer, d['head'])}", f"executed window: {w if w is not None else '?'} tokens"]
        if d.get("moved"):
            lines.append("moved since the previous update (group-mates or window)")
        return "<br>".join(lines)
    lines = [group_name(d["level"], d["node"]) + (" (shadow: not executed)" if d.get("shadow") else "")]
    for level, node, w in d.get("also_levels", []):
        lines.append(f"= {group_name(level, node)} (same heads; chose {w if w is not None else '?'} tokens)")
    lines.append("members: " + ", ".join(head_name(layer, h) for h in d["members"]))
    w = d.get("window")
    raw = d.get("raw_idx")
    raw_w = windows[int(raw)] if raw is not None and 0 <= int(raw) < len(windows) else None
    lines.append(
        f"chosen window: {w if w is not None else '?'} tokens"
        + (f" (raw argmax {raw_w}; parent-clamped)" if raw_w is not None and raw_w != w else "")
    )
    if reason:
        lines.append(f"not executed: {reason}")
    if d["level"] > 0:
        lines.append("an upper-level window caps its children's windows")
    if d.get("logits"):
        lines.append(f"final logits (window: logit): {_logits_by_window(d['logits'], windows)}")
    if d.get("base_logits"):
        lines.append(f"controller logits: {_logits_by_window(d['base_logits'], windows)}")
    if d.get("margin") is not None:
        lines.append(f"margin (top-1 − top-2): {float(d['margin']):.3f}")
    if d.get("joint_paired"):
        where = d.get("joint_levels")
        at = f" at level {', '.join(str(x) for x in where)}" if where else ""
        lines.append(f"joint scorer: paired with a sibling{at}, |Δlogits| = {float(d.get('joint_delta') or 0):.3f}")
    else:
        lines.append("joint scorer: unpaired")
    if d.get("origin"):
        lines.append(f"clustering: {d['origin']}")
    return "<br>".join(lines)


def _legend_entry(fig: go.Figure, group: str, title: str, name: str, marker: dict) -> None:
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            marker=marker,
            name=name,
            legendgroup=group,
            legendgrouptitle_text=title,
            showlegend=True,
            hoverinfo="skip",
            meta="helper",
        )
    )


def hierarchy_figure(
    g: nx.DiGraph,
    windows: list[int],
    title: str = "",
    layer: int | None = None,
    selected_head: int | None = None,
    override: str | None = None,
    collapsed: list[int] | None = None,
) -> go.Figure:
    """Groups above heads, edges parent -> child; colour = window, shape = group/head, outlines for
    joint scoring, a chosen window that is not executed, heads moved since the previous update, and
    the selected head. ``override`` names a regime that overrides chosen windows (fixed_window)."""
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
    reasons = {}
    for n in nodes:
        d = g.nodes[n]
        if d["kind"] == "group" and d["level"] == 0:
            executed = {g.nodes[c].get("window") for c in g.successors(n) if g.nodes[c].get("window") is not None}
            reasons[n] = not_executed_reason(d, executed, windows, override)
    xs = np.array([pos[n][0] for n in nodes], dtype=np.float64)
    ys = np.array([pos[n][1] for n in nodes], dtype=np.float64)

    def outline(n) -> tuple[str, float]:
        d = g.nodes[n]
        if d["kind"] == "head" and d.get("head") == selected_head:
            return SELECTED, 4
        if d.get("joint_paired"):
            return JOINT, 3
        if reasons.get(n):
            return NOT_EXECUTED, 3
        if d.get("moved"):
            return MOVED, 3
        return "#333", 1

    lines = [outline(n) for n in nodes]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+text",
            marker=dict(
                opacity=1.0,  # array sizes would otherwise make plotly draw see-through "bubbles"
                size=[
                    (16 if g.nodes[n].get("head") == selected_head else 12) if g.nodes[n]["kind"] == "head" else 20
                    for n in nodes
                ],
                color=[colors.get(g.nodes[n].get("window"), "#cccccc") for n in nodes],
                symbol=["circle" if g.nodes[n]["kind"] == "head" else "square" for n in nodes],
                line=dict(color=[c for c, _ in lines], width=[w for _, w in lines]),
            ),
            text=[
                head_name(layer, g.nodes[n]["head"]) if g.nodes[n]["kind"] == "head" else f"g{g.nodes[n]['node']}"
                for n in nodes
            ],
            textposition="bottom center",
            textfont=dict(size=9),
            customdata=[
                [layer if layer is not None else -1, g.nodes[n]["head"]] if g.nodes[n]["kind"] == "head" else [-1, -1]
                for n in nodes
            ],
            hovertext=[_hover(g.nodes[n], windows, layer, reasons.get(n)) for n in nodes],
            hoverinfo="text",
            name="nodes",
            showlegend=False,
        )
    )
    # the legend: one section per encoding, each entry drawn once
    present = sorted({g.nodes[n].get("window") for n in nodes if g.nodes[n].get("window") is not None})
    for w in present:
        _legend_entry(fig, "colour", "colour: window", f"{w} tokens", dict(symbol="square", color=colors.get(w)))
    _legend_entry(
        fig, "shape", "shape", "group", dict(symbol="square", color="#ffffff", line=dict(color="#333", width=1))
    )
    _legend_entry(
        fig, "shape", "shape", "head", dict(symbol="circle", color="#ffffff", line=dict(color="#333", width=1))
    )
    outlines = [
        (JOINT, "scored jointly with a sibling", any(g.nodes[n].get("joint_paired") for n in nodes)),
        (NOT_EXECUTED, "chosen window not executed", any(reasons.values())),
        (MOVED, "moved since previous update", any(g.nodes[n].get("moved") for n in nodes)),
        (SELECTED, "selected head", selected_head is not None),
    ]
    for color, name, shown in outlines:
        if shown:
            _legend_entry(
                fig,
                "outline",
                "outline",
                name,
                dict(symbol="square-open", color=color, size=14, line=dict(color=color, width=3)),
            )
    levels = sorted({g.nodes[n]["level"] for n in g.nodes})
    dropped = set(collapsed or [])
    ticks = []
    for lv in levels:
        if lv < 0:
            ticks.append("heads")
            continue
        same = [x for x in sorted(dropped) if x > lv and all(y in dropped for y in range(lv + 1, x + 1))]
        ticks.append(f"level {lv}" + (f"<br>(= levels {lv}–{same[-1]})" if same else ""))
    fig.update_yaxes(
        title=style.LEVEL,
        tickvals=[lv + 1 for lv in levels],
        ticktext=ticks,
        zeroline=False,
        range=[-0.6, (max(levels) + 1.5) if levels else 1],
    )
    fig.update_xaxes(title="heads in tree order (depth-first)", showticklabels=False, zeroline=False, showgrid=False)
    fig.update_layout(legend=dict(groupclick="toggleitem", tracegroupgap=12), clickmode="event+select")
    return style.base_layout(fig, title, height=540)


def window_override(manifest_or_config: dict) -> str | None:
    """The ablation that overrides the controller's chosen windows, if the run has one."""
    cfg = manifest_or_config.get("config", manifest_or_config) or {}
    mode = cfg.get("window_ablation_mode")
    return mode if mode in WINDOW_OVERRIDES else None


def tree_for(d: dict, n_head: int, windows: list[int], collapse: bool = True) -> tuple[nx.DiGraph, list[int]]:
    """The drawn tree of ``data.hierarchy_data``'s result: moved heads marked, repeated levels collapsed."""
    g = tree_graph(d["tree"], n_head, windows, d["head_windows"])
    for h in d.get("moved", ()):
        if head_id(h) in g:
            g.nodes[head_id(h)]["moved"] = True
    if not collapse:
        return g, []
    return collapse_repeated_levels(g)
