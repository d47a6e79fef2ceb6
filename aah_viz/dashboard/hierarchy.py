"""Hierarchy: the tree of one layer at one routing update, with a slider over updates."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis.hierarchy import tree_graph, tree_summary
from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import chart, guarded, layer_picker, step_slider
from aah_viz.figures.hierarchy import hierarchy_figure

TREE_COLUMNS = [
    "level",
    "node",
    "parent",
    "members",
    "final_idx",
    "raw_idx",
    "margin",
    "joint_paired",
    "joint_delta",
    "shadow",
    "origin",
]


@guarded
def render() -> None:
    opened = state.open_run("Hierarchy")
    if opened is None:
        return
    key, root, token, m = opened
    layer = layer_picker(m["n_layer"], key="hier_layer")
    steps = cache.tree_steps(root, key, token, layer)
    if len(steps) == 0:
        st.info(f"Layer {layer} has no hierarchy rows: the regime has no grouping, or routing has not updated yet.")
        return
    step = step_slider(steps, key=f"hier_step_{layer}", label="Routing update (training step)")
    d = cache.hierarchy(root, key, token, layer, step)
    g = tree_graph(d["tree"], m["n_head"], m["windows"], d["head_windows"])
    summary = tree_summary(g)
    c1, c2, c3 = st.columns(3)
    c1.metric("levels", summary["levels"])
    c2.metric("groups per level", " / ".join(str(n) for n in summary["groups_per_level"]) or "0")
    c3.metric("jointly scored groups", summary["joint_paired"])
    if summary["shadow"]:
        st.caption("Shadow build: routing was computed but not executed (warm-up or control off).")
    chart(hierarchy_figure(g, m["windows"], f"layer {layer} at step {d['step']}"), key="hier_fig")
    st.caption(
        "Squares are groups, circles heads; colour = window; a red outline marks groups scored jointly with a sibling. "
        "Hover a node for its members, controller logits, margin and joint-scorer effect."
    )
    with st.expander("Tree rows"):
        tree = d["tree"]
        st.dataframe(pd.DataFrame(tree[[c for c in TREE_COLUMNS if c in tree]]), hide_index=True, width="stretch")


if __name__ == "__main__":
    render()
