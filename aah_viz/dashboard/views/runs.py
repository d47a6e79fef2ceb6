"""Runs: every run under the logs root with status, progress, losses and ACR; pick the runs to compare."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import guarded, plain
from aah_viz.dashboard.glossary import TERMS

COLUMNS = {
    "key": "run",
    "regime": "regime",
    "seed": "seed",
    "status": "status",
    "progress": "progress",
    "steps": "last step",
    "final_loss": "last-batch train loss",
    "final_val_loss": "val loss",
    "final_acr": "ACR",
    "final_causal_coverage": "causal-pair coverage",
    "n_layer": "layers",
    "n_head": "heads",
    "seq_len": "T (tokens)",
    "windows": "candidate windows (tokens)",
}


def _progress(o: dict, total) -> float | None:
    last = o.get("steps")
    if last is None or not isinstance(total, int) or total <= 0:
        return None
    return min(1.0, (int(last) + 1) / total)


@guarded
def render() -> None:
    st.title("Runs")
    root = state.logs_root()
    st.caption(f"Every run directory under {plain(root)}. Pick the runs the other pages show and compare.")
    overviews = state.overviews()
    if not overviews:
        st.info(
            f"No run directories under {plain(root)}. Record one with `aah-viz train ... --out DIR/NAME`, "
            "or open another folder with `aah-viz dashboard --logs DIR`."
        )
        return
    good = {k: o for k, o in overviews.items() if "error" not in o}
    for key, o in overviews.items():
        if "error" in o:
            st.error(f"Run {plain(key)} cannot be shown: {plain(o['error'])}")
    for key, o in good.items():
        for w in o.get("warnings", []):
            st.warning(f"Run {plain(key)}: {plain(w)}")
    if not good:
        return
    rows = []
    for k, o in good.items():
        total = cache.manifest(root, k, state.token(k)).get("steps")
        rows.append({"key": k, **o, "progress": _progress(o, total)})
    frame = pd.DataFrame(rows)
    table = frame[[c for c in COLUMNS if c in frame]].rename(columns=COLUMNS)
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="runs_table",
        column_config={
            "progress": st.column_config.ProgressColumn(
                "progress", help="steps recorded / steps planned", min_value=0.0, max_value=1.0, format="percent"
            ),
            "status": st.column_config.TextColumn("status", help=TERMS["status"][1]),
            "last-batch train loss": st.column_config.NumberColumn(
                "last-batch train loss", help=TERMS["training_loss"][1], format="%.3f"
            ),
            "val loss": st.column_config.NumberColumn("val loss", help=TERMS["val_loss"][1], format="%.3f"),
            "ACR": st.column_config.NumberColumn("ACR", help=TERMS["acr"][1], format="%.3f"),
            "causal-pair coverage": st.column_config.NumberColumn(
                "causal-pair coverage", help=TERMS["causal_coverage"][1], format="%.3f"
            ),
        },
    )
    running = [k for k, o in good.items() if o.get("status") == "running"]
    if running:
        st.caption(f"{len(running)} run(s) still being written; with live refresh on (sidebar) the table follows them.")
    keys = list(good)
    current = [k for k in st.session_state.get(state.SELECTED, keys) if k in keys] or keys
    labels = {k: state.label(k) for k in keys}
    chosen = st.multiselect(
        "Selected runs (the other pages show and compare these)",
        keys,
        default=current,
        format_func=labels.__getitem__,
        key="runs_select",
    )
    state.set_selected(chosen)
    st.caption(f"{len(chosen)} of {len(keys)} runs selected.")


if __name__ == "__main__":
    render()
