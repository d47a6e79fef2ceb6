"""Probes: per-head syntactic and coreference scores beside the window map, comparisons, sufficiency."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, state
from aah_viz.dashboard.common import chart, guarded
from aah_viz.figures import probes as pfig
from aah_viz.figures import windows as wfig

HOW_TO = (
    "No probe results in this run yet. Produce them with\n\n"
    "`aah-viz probe RUN --syntax FILE.conllu --coref FILE.jsonl` (per-head scores, relations, coreference)\n\n"
    "and `aah-viz compare RUN` (head groups against probe clusters, window vs score)."
)


def _metrics(probe_heads, probe: str) -> list[str]:
    return sorted(probe_heads.loc[probe_heads["probe"] == probe, "metric"].dropna().astype(str).unique())


@guarded
def render() -> None:
    opened = state.open_run("Probes")
    if opened is None:
        return
    key, root, token, m = opened
    tables = cache.probe_tables(root, key, token)
    if not any(not t.empty for t in tables.values()):
        st.info(HOW_TO)
        return
    ph = tables.get("probe_heads")
    if ph is not None and not ph.empty:
        logged = set(ph["probe"].dropna().astype(str))
        order = ["syntax", "coref"] + sorted(logged - {"syntax", "coref", "sufficiency"})
        probes = [p for p in order if p in logged] or sorted(logged)
        c1, c2 = st.columns(2)
        probe = c1.selectbox("Probe", probes, key="probe_name")
        metrics = _metrics(ph, probe)
        metric = c2.selectbox("Metric", metrics, key=f"probe_metric_{probe}")
        step = ph.loc[ph["probe"] == probe, "step"].max()
        left, right = st.columns(2)
        with left:
            z = pfig.probe_matrix(ph, probe, metric, m["n_layer"], m["n_head"])
            chart(pfig.probe_heatmap_figure(z, probe, metric, f"{probe}: {metric} per head"), key="probe_heatmap")
        with right:
            hm = cache.heatmap(root, key, token, None if step != step else int(step))
            chart(
                wfig.window_heatmap_figure(hm["matrix"], m["windows"], f"windows at step {hm['step']}"),
                key="probe_windows",
            )
        points = cache.probe_points(root, key, token, probe, metric)
        chart(pfig.window_vs_probe_figure(points, probe, metric, m["windows"]), key="probe_scatter")
        if "sufficiency" in set(ph["probe"].astype(str)):
            st.subheader("Window sufficiency")
            st.caption(
                "Share of each head's gold links (dependencies, coreference) longer than "
                "its window: structure it cannot see."
            )
            s_metrics = _metrics(ph, "sufficiency")
            s_metric = st.selectbox("Sufficiency metric", s_metrics, key="probe_suff_metric")
            zs = pfig.probe_matrix(ph, "sufficiency", s_metric, m["n_layer"], m["n_head"])
            chart(
                pfig.probe_heatmap_figure(zs, "sufficiency", s_metric, f"links beyond the window: {s_metric}"),
                key="probe_sufficiency",
            )
    comp = tables.get("comparisons")
    if comp is not None and not comp.empty:
        st.subheader("Head groups against the probes")
        st.caption(
            "Within each layer: ARI of the AAH groups with clusters of the layer's heads built from their probe "
            "profiles, against a permutation null (mean, 95th percentile); pooled rows (no layer) use a "
            "layer-stratified null. partition_verdict: cluster validity of the compared level-0 partition."
        )
        cols = [
            c
            for c in [
                "level",
                "layer",
                "target",
                "ari",
                "null_mean",
                "null_p95",
                "p_value",
                "nmi",
                "v_measure",
                "n_groups",
                "n_probe_clusters",
                "partition_verdict",
                "degenerate",
                "reason",
                "step",
            ]
            if c in comp
        ]
        st.dataframe(comp[cols], hide_index=True, width="stretch", key="probe_comparisons")
    rel = tables.get("probe_relations")
    if rel is not None and not rel.empty:
        st.subheader("Syntactic relations: best head vs best fixed-offset baseline")
        st.dataframe(rel, hide_index=True, width="stretch", key="probe_relations")
    coref = tables.get("probe_coref")
    if coref is not None and not coref.empty:
        st.subheader("Coreference by antecedent distance")
        st.dataframe(coref, hide_index=True, width="stretch", key="probe_coref")


if __name__ == "__main__":
    render()
