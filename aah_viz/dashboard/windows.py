"""Windows: layer x head heatmap at a step, head x step timeline, branch bars, coverage, regimes."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import chart, guarded, layer_picker, step_slider
from aah_viz.figures import windows as wfig

MAX_SIDE_BY_SIDE = 4


@guarded
def render() -> None:
    opened = state.open_run("Windows")
    if opened is None:
        return
    key, root, token, m = opened
    windows = m["windows"]

    st.subheader("Layer × head windows at a step")
    steps = cache.recorded_steps(root, key, token)
    if len(steps) == 0:
        st.info("No head rows recorded yet: the run has not logged a training step. Refresh once it has.")
    else:
        step = step_slider(steps, key="win_step", label="Training step")
        hm = cache.heatmap(root, key, token, step)
        left, right = st.columns(2)
        with left:
            chart(
                wfig.window_heatmap_figure(hm["matrix"], windows, f"executed windows at step {hm['step']}"),
                key="win_heatmap",
            )
        with right:
            br = cache.branch(root, key, token, step)
            chart(
                wfig.branch_bars_figure(br["per_layer"], windows, f"branch frequencies at step {br['step']}"),
                key="win_branch",
            )

        st.subheader("Head × step timeline")
        layer = layer_picker(m["n_layer"], key="win_layer")
        tl = cache.timeline(root, key, token, layer)
        chart(
            wfig.head_timeline_figure(
                tl["steps"], tl["matrix"], windows, f"layer {layer}: window per head over training"
            ),
            key="win_timeline",
        )
        st.caption(
            f"{len(tl['steps'])} of {tl['recorded']} recorded steps shown (routing updates, where windows can change)."
        )

    st.subheader("Coverage over training and regimes side by side")
    keys = tuple(state.selected_keys())
    chart(
        wfig.coverage_figure(
            cache.coverage(root, keys, token), "ACR, causal-pair coverage and realised work (selected runs)"
        ),
        key="win_coverage",
    )
    cost = cache.cost(root, keys, token)
    if not cost.empty:
        st.caption(
            "The FLOPs ratio is an analytic estimate from ACR (method §11.1), not a measurement; "
            "step time and throughput are measured on the machine that trained the run."
        )
        st.dataframe(cost, hide_index=True)
    table = cache.bucket_table(root, keys, token)
    if not table.empty:
        chart(
            wfig.bucket_heatmap_figure(table, "final selected-window distribution (selected runs)"), key="win_buckets"
        )
    side = keys[:MAX_SIDE_BY_SIDE]
    if len(side) > 1:
        st.caption(f"Final windows of the first {len(side)} selected runs.")
        cols = st.columns(len(side))
        for i, (col, k) in enumerate(zip(cols, side)):
            mk = cache.manifest(root, k, token)
            d = cache.heatmap(root, k, token, None)
            with col:
                chart(wfig.window_heatmap_figure(d["matrix"], mk["windows"], state.label(k)), key=f"win_side_{i}")


if __name__ == "__main__":
    render()
