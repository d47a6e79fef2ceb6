"""Training: loss and validation loss, perplexity, learning rate, throughput and step time, overlaid
across runs (colour by regime, dash by seed), with smoothing and a log-step axis."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import chart, guarded
from aah_viz.dashboard.glossary import help_text
from aah_viz.figures.training import training_curves_figure


@guarded
def render() -> None:
    opened = state.open_run("Training")
    if opened is None:
        return
    key, root, _, _ = opened
    keys = state.selected_keys()
    c1, c2, c3 = st.columns([4, 2, 1])
    others = [k for k in keys if k != key]
    overlay = c1.multiselect(
        "Overlay runs",
        others,
        default=[k for k in st.session_state.get("train_overlay", []) if k in others],
        format_func=state.label,
        help="Runs drawn beside the selected one: colour by regime, dash by seed (the same on every page).",
    )
    st.session_state["train_overlay"] = overlay
    smoothing = c2.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="train_smoothing", help=help_text("smoothing"))
    log_step = c3.toggle("log step", key="train_log_step", help="Logarithmic step axis (early training spread out).")
    log_loss = c3.toggle("log loss", key="train_log_loss", help="Logarithmic loss axis.")
    shown = (key, *overlay)
    series = cache.training(root, shown, state.tokens(shown))
    chart(
        training_curves_figure(series, smoothing=smoothing, log_step=log_step, log_loss=log_loss),
        key="train_fig",
        name="training-curves",
        data=series,
    )
    st.caption(
        "Training loss is the loss of one logged training batch with dropout on, so it sits above the "
        "validation loss (held-out batches, no dropout); compare runs on validation loss. "
        f"Lines are binned to at most 1,000 points; smoothing {smoothing:.2f} is TensorBoard's debiased "
        "moving average (the raw series stays faint behind it and in the CSV)."
    )


if __name__ == "__main__":
    render()
