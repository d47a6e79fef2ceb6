"""Stability: ARI between consecutive routing updates, heads switching, topology, controller health."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, head_similarity, page_head, selection, session, validity
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.summary import has_controller
from aah_viz.figures import stability as sfig

LAYER_COLUMNS = {
    "layer": "layer",
    "updates": "updates",
    "mean_ari": "mean ARI",
    "group_switch_share": "group switch",
    "window_switch_share": "window switch",
    "topology_changes": "topology changes",
}


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Stability")
    if opened is None:
        return
    key, root, token, m = opened
    if session.overviews().get(key, {}).get("probe_only"):  # a model probed, not trained here
        st.info(
            "A probed model, not trained here: it has no routing updates, training steps or window controller "
            "to show. What its heads' similarities say is below (aah-viz head-similarity)."
        )
        head_similarity.section(root, key, token)
        return
    st.caption(
        "Every routing update compared with the layer's previous one: the level-0 partition (ARI, "
        "label-permutation invariant), heads whose group-mates or window changed, and changes of the tree's shape.",
        help=help_text("ari"),
    )
    s = cache.stability(root, key, token)
    if s["updates"].empty:
        st.info("No routing updates recorded (full attention, or routing has not updated yet).")
    else:
        chart(cache.stability_figure(root, key, token), key="stab_fig", name="stability")
        data_downloads(s["updates"], "stability-per-update", key="stab_data")
        c1, c2 = st.columns([1, 1])
        with c1:
            show_table(
                s["layers"].rename(columns=LAYER_COLUMNS),
                hide_index=True,
                width="stretch",
                key="stab_layers",
                column_config={
                    "updates": st.column_config.NumberColumn(help="routing updates of the layer"),
                    "mean ARI": st.column_config.NumberColumn(help=help_text("ari"), format="%.3f"),
                    "group switch": st.column_config.NumberColumn(
                        help="mean share of heads whose level-0 group-mates changed at an update", format="%.3f"
                    ),
                    "window switch": st.column_config.NumberColumn(
                        help="mean share of heads whose window changed at an update", format="%.3f"
                    ),
                    "topology changes": st.column_config.NumberColumn(help=help_text("topology_change")),
                },
            )
        with c2:
            sel = selection.current()
            chart(
                sfig.switch_rate_figure(
                    s["heads"], m["n_layer"], m["n_head"], selected=(sel.get("layer") or 0, sel.get("head"))
                ),
                key="stab_switch",
                name="switch-rate",
                on_select=selection.head_clicked,
            )
            st.caption("Click a head to select it on every page.", help=help_text("switch_rate"))
    validity.section(root, key, token)
    head_similarity.section(root, key, token)
    st.subheader("Controller health: does routing learn at all?")
    if not has_controller(m):
        st.info(f"The {plain(m.get('regime'))} regime has no window controller: nothing here to learn.")
        return
    chart(cache.controller_figure(root, key, token), key="stab_ctrl", name="controller-health")
    st.caption("Gradient norm, weight drift and decision margin.", help=help_text("controller_grad_norm"))
    sampled = cache.controller(root, key, token)["series"].attrs.get("sampled")
    if sampled:  # a long run: its scalars read from stretches spread over it (figures.data.controller_data)
        st.caption(
            f"A long run: its gradient norm and weight drift are drawn from {sampled[0]} of its {sampled[1]} "
            "scalars segments, spread over it (the first and last included)."
        )


if __name__ == "__main__":
    render()
