"""Stability: ARI between consecutive routing updates, heads switching, topology, controller health."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import chart, guarded
from aah_viz.figures import stability as sfig

LAYER_COLUMNS = {
    "layer": "layer",
    "updates": "routing updates",
    "mean_ari": "mean ARI vs previous update",
    "group_switch_share": "heads switching group (share)",
    "window_switch_share": "heads switching window (share)",
    "topology_changes": "topology changes",
}


@guarded
def render() -> None:
    opened = state.open_run("Stability")
    if opened is None:
        return
    key, root, token, m = opened
    st.caption(
        "Every routing update compared with the layer's previous one: the level-0 partition (ARI, "
        "label-permutation invariant), heads whose group-mates or window changed, and changes of the tree's shape."
    )
    s = cache.stability(root, key, token)
    if s["updates"].empty:
        st.info("No routing updates recorded (full attention, or routing has not updated yet).")
    else:
        chart(sfig.stability_figure(s["updates"], "routing stability over training"), key="stab_fig")
        c1, c2 = st.columns([2, 3])
        with c1:
            st.dataframe(s["layers"].rename(columns=LAYER_COLUMNS), hide_index=True, width="stretch", key="stab_layers")
        with c2:
            chart(sfig.switch_rate_figure(s["heads"], m["n_layer"], m["n_head"]), key="stab_switch")
    st.subheader("Controller health: does routing learn at all?")
    c = cache.controller(root, key, token)
    chart(
        sfig.controller_health_figure(
            c["series"], c["margins"], "controller gradient norm, weight drift and decision margin"
        ),
        key="stab_ctrl",
    )
    if not c["series"].empty:
        grad = c["series"][c["series"]["name"] == "controller_grad_norm"]["value"]
        if len(grad) and float(grad.abs().max()) == 0.0:
            st.warning(
                "The controller's gradient norm is zero at every logged step: no gradient "
                "reaches it, so routing does not learn."
            )


if __name__ == "__main__":
    render()
