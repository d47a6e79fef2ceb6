"""Frontier: perplexity against compute for a pretrained model (``aah-viz frontier``), one point per
configuration with its interval over blocks, the Pareto front marked, and the table behind it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis.frontier import run_frontier_table
from aah_viz.dashboard import address, cache, state
from aah_viz.dashboard.common import chart, guarded, plain
from aah_viz.errors import AAHVizError
from aah_viz.figures.frontier import frontier_figure
from aah_viz.runlog import discover_runs, read_manifest

REGIME = "frontier"  # the regime a frontier run's manifest names
SHOWN = {
    "configuration": "configuration",
    "ppl": "perplexity",
    "ppl_lo": "low (95%)",
    "ppl_hi": "high (95%)",
    "acr": "ACR",
    "acr_causal": "causal coverage",
    "speed_vs_unpatched": "speed vs unpatched",
    "adapt_steps": "adaptation steps",
    "sink_tokens": "sink tokens",
    "pareto": "Pareto",
}


def any_frontier(root: str) -> bool:
    """Whether a run under ``root`` is a frontier, from the manifests (no Streamlit cache: the entry
    point asks before the page it opens on draws anything)."""
    for path in discover_runs(root):
        try:
            if read_manifest(path).get("regime") == REGIME:
                return True
        except AAHVizError:
            continue
    return False


def frontier_keys() -> list[str]:
    views = state.overviews()
    return [k for k in state.good_keys() if views[k].get("regime") == REGIME]


@st.cache_data(show_spinner=False)
def table(root: str, key: str, token: int) -> pd.DataFrame:
    return run_frontier_table(cache.open_run(root, key))


@guarded
def render() -> None:
    st.title("Frontier")
    keys = frontier_keys()
    if not keys:
        st.info(
            "No frontier run under the logs root. `aah-viz frontier MODEL_DIR --data TEXT --out RUN` evaluates a "
            "pretrained model's configurations (unpatched, static windows, profiled per-head windows, AAH before "
            "and after adaptation; with --sink-tokens 1,4 each also keeping the first tokens visible) on the same "
            "held-out blocks (docs/real-model.md)."
        )
        return
    labels = {k: state.label(k) for k in keys}  # computed now: format_func may be called outside the run
    key = address.choose(
        st.selectbox,
        "frontier",
        "frontier_run",
        keys,
        label="Frontier run",
        format_func=labels.__getitem__,
    )
    root, tok = state.logs_root(), state.token(key)
    t = table(root, key, tok)
    manifest = cache.manifest(root, key, tok)
    model = (manifest.get("config") or {}).get("model_dir", "")
    if t.empty:
        st.warning("This frontier run holds no evaluated configuration yet (resume it with the same command).")
        return
    blocks = int(t["n_blocks"].max())
    st.caption(
        plain(
            f"Model {model}; T = {manifest.get('seq_len')}; {blocks} held-out blocks, the same for every "
            f"configuration; {len(t)} configurations."
        )  # fmt: skip
    )
    chart(frontier_figure(t), key="frontier_fig", name="frontier", data=t)
    st.caption(
        "Each point: perplexity over the held-out tokens with its 95% interval from a bootstrap over blocks "
        "(the same resamples for every configuration, so differences are paired), at its ACR (mean key length "
        "over T). The dotted line joins the Pareto front: configurations no other beats on both ACR and "
        "perplexity. Speed is the unpatched model's forward time over the configuration's, measured side by "
        "side in the same run. Dotted marks keep the first k positions visible to every query (sink tokens, "
        "+kS); their ACR counts those pairs."
    )
    shown = t[[c for c in SHOWN if c in t]].rename(columns=SHOWN).sort_values("ACR")
    st.dataframe(shown, hide_index=True, width="stretch", key="frontier_table")


if __name__ == "__main__":
    render()
