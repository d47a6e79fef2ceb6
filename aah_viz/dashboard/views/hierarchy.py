"""Hierarchy: the tree of one layer at one routing update, a slider (and a play control) over updates."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis.hierarchy import tree_summary
from aah_viz.dashboard import cache, page_head, pickers, selection, validity
from aah_viz.dashboard.common import chart, guarded, plain, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.labels import tree_rows
from aah_viz.figures.hierarchy import hierarchy_figure, tree_for, window_override

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
PLAY = "hier_play"
PLAY_DONE = "hier_play_done"
PLAY_INTERVAL_S = 1.2


def _advance(steps) -> None:
    """One tick of the play control: the next routing update, stopping at the last."""
    sel = selection.current()
    cur = sel.get("step")
    later = [int(s) for s in steps if cur is None or int(s) > int(cur)]
    if later:
        selection.select(step=later[0])
    else:  # the last update: stop the timer (a full rerun switches the toggle off)
        st.session_state[PLAY_DONE] = True
        st.rerun()


def _tree_view(key: str, root: str, token: int, m: dict, layer: int) -> None:
    steps = cache.tree_steps(root, key, token, layer)
    if len(steps) == 0:
        st.info(
            f"Layer {layer} has no hierarchy rows: the regime has no grouping, or routing has not updated yet.",
        )
        return
    playing = bool(st.session_state.get(PLAY))
    if playing:
        _advance(steps)
    step = pickers.pick_step(steps, "Routing update (training step)", help=help_text("routing_update"))
    d = cache.hierarchy(root, key, token, layer, step)
    head = selection.current().get("head")
    g, dropped = tree_for(d, m["n_head"], m["windows"])
    full_summary = tree_summary(tree_for(d, m["n_head"], m["windows"], collapse=False)[0])
    c = st.columns(4)
    c[0].metric("levels", full_summary["levels"], help="Levels of the logged tree, repeated ones included.")
    c[1].metric("groups per level", " / ".join(str(n) for n in full_summary["groups_per_level"]) or "0")
    c[2].metric("jointly scored groups", full_summary["joint_paired"], help=help_text("joint_scoring"))
    c[3].metric(
        "moved heads",
        len(d.get("moved", ())),
        help="Heads whose level-0 group-mates or executed window changed since the layer's previous routing update.",
    )
    for note in validity.level_notes(root, key, token, layer, d["tree"]):
        st.caption(plain(note), help=help_text("cluster_validity"))
    if dropped:
        which = (
            f"Level {dropped[0]} repeats the level below it"
            if len(dropped) == 1
            else f"Levels {', '.join(str(x) for x in dropped)} repeat the level below them"
        )
        st.info(
            f"{which} exactly (same groups, one child each), so they are drawn once; the level axis says "
            "which levels a row stands for, and the hover says what each repeated level chose."
        )
    if full_summary["shadow"]:
        st.caption("Shadow build: routing was computed but not executed (warm-up or control off).")
    title = f"layer {layer} at step {d['step']}"
    if d.get("previous") is not None:
        title += f" (previous update {d['previous']})"
    fig = hierarchy_figure(
        g,
        m["windows"],
        title,
        layer=layer,
        selected_head=head,
        override=window_override(m),
        collapsed=dropped,
    )
    chart(fig, key="hier_fig", name=f"hierarchy-L{layer}-step{d['step']}", on_select=selection.head_clicked)
    st.caption(
        "Squares are groups (named level and index: g2 on the level 1 row is 'level 1, group 2'), circles heads "
        "(L3H5 = layer 3, head 5); colour = the window a group chose or a head executes. Outlines: red = scored "
        "jointly with a sibling, orange = the group's chosen window is not what its heads run (the hover says "
        "why: parent clamp, a fixed-window regime, a shadow build), pink = moved since the previous update, "
        "black = the selected head. Click a head to select it on every page."
    )
    with st.expander("Tree rows"):
        tree = d["tree"]
        shown = pd.DataFrame(tree[[c for c in TREE_COLUMNS if c in tree]])
        show_table(tree_rows(shown, m.get("windows")), hide_index=True, width="stretch", key="hier_tree_rows")


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Hierarchy")
    if opened is None:
        return
    key, root, token, m = opened
    c1, c2, c3 = st.columns([3, 3, 2])
    layer = pickers.pick_layer(m["n_layer"], where=c1)
    pickers.pick_head(m["n_head"], where=c2)
    if st.session_state.pop(PLAY_DONE, False):
        st.session_state[PLAY] = False
    c3.write("")  # align the toggle with the pickers' boxes
    playing = c3.toggle("▶ play", key=PLAY, help="Step through the routing updates, about one a second.")
    st.fragment(run_every=PLAY_INTERVAL_S if playing else None)(_tree_view)(key, root, token, m, layer)


if __name__ == "__main__":
    render()
