"""Runs: every run under the logs root with regime, seed, steps, status, final loss and ACR."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.dashboard import state
from aah_viz.dashboard.common import guarded

COLUMNS = {
    "key": "run",
    "regime": "regime",
    "seed": "seed",
    "status": "status",
    "steps": "last step",
    "final_loss": "final loss (nats)",
    "final_val_loss": "final val loss (nats)",
    "final_acr": "final ACR (Σ T·w / H·T²)",
    "final_causal_coverage": "final causal-pair coverage",
    "n_layer": "layers",
    "n_head": "heads",
    "seq_len": "T (tokens)",
    "windows": "candidate windows (tokens)",
}


@guarded
def render() -> None:
    st.title("Runs")
    root = state.logs_root()
    st.caption(f"Every run directory under `{root}`. Pick the runs the other pages show.")
    overviews = state.overviews()
    if not overviews:
        st.info(
            f"No run directories under `{root}`. Record one with `aah-viz train ... --out {root}/NAME`, "
            "or open another folder with `aah-viz dashboard --logs DIR`."
        )
        return
    good = {k: o for k, o in overviews.items() if "error" not in o}
    for key, o in overviews.items():
        if "error" in o:
            st.error(f"Run `{key}` cannot be shown: {o['error']}")
    for key, o in good.items():
        for w in o.get("warnings", []):
            st.warning(f"Run `{key}`: {w}")
    if not good:
        return
    rows = pd.DataFrame([{"key": k, **o} for k, o in good.items()])
    table = rows[[c for c in COLUMNS if c in rows]].rename(columns=COLUMNS)
    st.dataframe(table, hide_index=True, width="stretch", key="runs_table")
    keys = list(good)
    current = [k for k in st.session_state.get(state.SELECTED, keys) if k in keys] or keys
    labels = {k: state.label(k) for k in keys}
    chosen = st.multiselect(
        "Selected runs (shown on the other pages)",
        keys,
        default=current,
        format_func=labels.__getitem__,
        key="runs_select",
    )
    state.set_selected(chosen)
    st.caption(f"{len(chosen)} of {len(keys)} runs selected.")


if __name__ == "__main__":
    render()
