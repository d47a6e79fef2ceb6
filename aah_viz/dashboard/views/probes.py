"""Probes: what the heads do (syntax against its offset baseline, coreference by distance, how far
they look) beside their windows, and whether the head groups line up with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from aah_viz.dashboard import address, cache, page_head, selection
from aah_viz.dashboard.common import chart, guarded, plain, show_table
from aah_viz.dashboard.labels import readable, scalar_words
from aah_viz.dashboard.lens_view import link_to_lens
from aah_viz.figures import probe_results as pr
from aah_viz.figures import probes as pfig
from aah_viz.figures import style
from aah_viz.figures import windows as wfig
from aah_viz.probes.coref_reach import reach_note
from aah_viz.probes.distance import needed_windows
from aah_viz.probes.partition_agreement import SHOWN_COMPARISON_COLUMNS, flag_without_groups


def how_to(root: str, key: str) -> tuple[str, str]:
    """What to run to probe this run: (the words, the commands with the run's own path, ready for a shell)."""
    import shlex

    from aah_viz.runlog.paths import list_adapters, list_checkpoints

    run = Path(root) / key
    path = shlex.quote(str(run))
    words = (
        "No probe results in this run yet. `aah-viz probe` scores every head (relations, coreference), on the "
        "bundled synthetic probe set unless given your own data (`--syntax FILE.conllu --coref FILE.jsonl`); "
        "`aah-viz compare` then sets head groups against probe clusters and windows against scores."
    )
    if not (list_checkpoints(run) or list_adapters(run)):
        words += (
            " This run keeps no checkpoint for the probe to read: train with the end-of-run checkpoint kept "
            "(`--keep-checkpoints` above 0, the default) or `--checkpoint-interval N`."
        )
    return words, f"aah-viz probe {path}\naah-viz compare {path}"


COMPARISON_COLUMNS = SHOWN_COMPARISON_COLUMNS


def _metrics(probe_heads, probe: str) -> list[str]:
    return sorted(probe_heads.loc[probe_heads["probe"] == probe, "metric"].dropna().astype(str).unique())


def _grey_degenerate(frame: pd.DataFrame):
    """Degenerate rows drawn grey: they cannot say anything (their reason says why)."""
    flags = frame["degenerate"].fillna(False).astype(bool) if "degenerate" in frame else None
    if flags is None or not flags.any():
        return frame
    return frame.style.apply(lambda row: ["color: #9a9a9a" if flags[row.name] else "" for _ in row], axis=1)


def _heads_section(ph, m, root, key, token) -> None:
    step = ph["step"].max()
    sel = selection.current()
    at = (int(sel.get("layer") or 0), sel.get("head"))  # the head every page shares, outlined on each heatmap
    syntax = _metrics(ph, "syntax")
    headline = "score_minus_baseline" if "score_minus_baseline" in syntax else ("score" if "score" in syntax else None)
    left, right = st.columns(2)
    with left:
        if headline:
            z = pfig.probe_matrix(ph, "syntax", headline, m["n_layer"], m["n_head"])
            title = (
                "syntax: best relation score minus its offset baseline" if headline == "score_minus_baseline" else ""
            )
            chart(
                pfig.probe_heatmap_figure(z, "syntax", headline, title, selected=at, label=scalar_words(headline)),
                key="probe_headline",
                on_select=selection.head_clicked,
            )
    with right:
        hm = cache.heatmap(root, key, token, None if step != step else int(step))
        chart(
            wfig.window_heatmap_figure(hm["matrix"], m["windows"], f"windows at step {hm['step']}", selected=at),
            key="probe_windows",
            on_select=selection.head_clicked,
        )
    st.caption("Click a head to select it on every page.")
    link_to_lens(cache.open_run(root, key), at[0], at[1])
    if headline == "score_minus_baseline":
        below, above = style.scale_words(style.DIVERGING_SCALE)  # the words follow the heatmap's colours
        st.caption(
            "Per head: the mean over relations of its better direction's accuracy minus the relation's best "
            f"fixed-offset baseline; {above} above the baseline, {below} below (0 = no better than a fixed offset)."
        )
    with st.expander("Any probe metric per head", expanded=False):
        logged = set(ph["probe"].dropna().astype(str))
        order = ["syntax", "coref"] + sorted(logged - {"syntax", "coref"})
        probes = [p for p in order if p in logged] or sorted(logged)
        c1, c2 = st.columns(2)
        probe = c1.selectbox("Probe", probes, key="probe_name")
        metric = c2.selectbox("Metric", _metrics(ph, probe), key=f"probe_metric_{probe}", format_func=scalar_words)
        z = pfig.probe_matrix(ph, probe, metric, m["n_layer"], m["n_head"])
        chart(
            pfig.probe_heatmap_figure(
                z, probe, metric, f"{probe}: {scalar_words(metric)} per head", selected=at, label=scalar_words(metric)
            ),
            key="probe_heatmap",
            on_select=selection.head_clicked,
        )
        points = cache.probe_points(root, key, token, probe, metric)
        chart(
            pfig.window_vs_probe_figure(points, probe, metric, m["windows"], label=scalar_words(metric)),
            key="probe_scatter",
        )


def _claims_section(claims) -> None:
    """What the best heads show once their choice among all heads is accounted for (``probe_claims``)."""
    if claims is None or claims.empty:
        st.caption(
            "This run's probe tables have no selection-aware statistics (written before `probe_claims`): "
            "probe again to see the best heads' split-half scores, max-over-heads nulls and strongest baselines."
        )
        return
    st.subheader("Best heads, selection-aware")
    chart(pr.claims_figure(claims), key="probe_claims_chart")
    show_table(pr.claims_view(claims), hide_index=True, width="stretch", key="probe_claims")
    st.caption(
        "The best of many heads is optimistic. Split-half: the head chosen on half of the sentences (documents "
        "for coreference) and scored on the other half. Adjusted p: against the best of all heads when each "
        "item's answer is moved at random among its candidates. Strongest baseline: the best of the fixed "
        "offsets, the nearest word of the answer's part of speech (`pos`) and, for coreference, the mention "
        "baselines; the head beats it when the interval of the difference is above zero and its split-half "
        "score is higher. At the offset: the share of the relation's items where the best head picks the "
        "offset baseline's word."
    )


def _windows_section(ph, m) -> None:
    st.subheader("How far the heads look")
    needed = needed_windows(ph, m["n_layer"], m["n_head"])
    rows = ph[ph["probe"] == "distance"]
    executed = np.full((m["n_layer"], m["n_head"]), np.nan)
    if not rows.empty:
        first = rows[rows["step"] == rows["step"].max()].drop_duplicates(["layer", "head"]).dropna(subset=["window"])
        executed[first["layer"].astype(int), first["head"].astype(int)] = first["window"].astype(float)
    chart(pr.needed_window_figure(needed, executed, m["windows"]), key="probe_needed_window")
    st.caption(
        "Needed window: the smallest distance bucket edge that holds 90% of the head's attention on the probe "
        "text. Above the diagonal a head spends attention further away than its window lets it reach."
    )
    if "sufficiency" in set(ph["probe"].astype(str)):
        s_metrics = _metrics(ph, "sufficiency")
        s_metric = address.choose(
            st.selectbox,
            "links",
            "probe_suff_metric",
            s_metrics,
            label="Gold links beyond the window",
            format_func=scalar_words,
        )
        zs = pfig.probe_matrix(ph, "sufficiency", s_metric, m["n_layer"], m["n_head"])
        words = scalar_words(s_metric)
        chart(
            pfig.probe_heatmap_figure(zs, "sufficiency", s_metric, f"{words}, per head", label=words),
            key="probe_sufficiency",
        )


def _comparison_section(tables) -> None:
    comp = tables.get("comparisons")
    if comp is None or comp.empty:
        st.info("No head-group comparison yet: `aah-viz compare RUN` writes it.")
        return
    comp = flag_without_groups(comp)  # tables written before the case was flagged
    st.subheader("Head groups against the probes")
    st.caption(
        "Within each layer: ARI of the AAH groups with clusters of the layer's heads built from their probe "
        "profiles (relation scores, coreference by distance, attention distance), against a permutation null "
        "(grey band: its mean to 95th percentile); the pooled column uses a layer-stratified null. Grey markers "
        "and rows are degenerate (their reason says why); partition validity is the cluster validity of the "
        "compared level-0 partition."
    )
    levels = sorted(int(v) for v in comp["level"].dropna().unique())
    level = levels[0]
    if len(levels) > 1:
        level = address.choose(
            st.selectbox,
            "level",
            "probe_comparison_level",
            levels,
            label="Hierarchy level",
        )
    chart(pr.comparison_figure(comp, level), key="probe_comparison_chart")
    shown = comp[comp["level"] == level]
    shown = shown[[c for c in COMPARISON_COLUMNS if c in shown]].reset_index(drop=True)
    if "target" in shown:  # the clusterings in the chart's words (the CSV keeps aah-viz compare's names)
        shown["target"] = [pr.TARGET_WORDS.get(t, t) for t in shown["target"]]
    show_table(_grey_degenerate(readable(shown)), hide_index=True, width="stretch", key="probe_comparisons")
    assoc = tables.get("window_association")
    if assoc is not None and not assoc.empty:
        st.markdown("**Window against probe score, within layers** (Spearman's rho; pooled row: no layer)")
        show_table(
            _grey_degenerate(readable(assoc.reset_index(drop=True))),
            hide_index=True,
            width="stretch",
            key="probe_assoc",
        )
        note = reach_note(assoc)
        if note:
            st.caption(note)


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Probes")
    if opened is None:
        return
    key, root, token, m = opened
    tables = cache.probe_tables(root, key, token)
    if not any(not t.empty for t in tables.values()):
        words, commands = how_to(root, key)
        st.info(words)
        st.code(commands, language="bash")
        return
    ph = tables.get("probe_heads")
    rel = tables.get("probe_relations")
    if rel is not None and not rel.empty and "context" in rel:
        last = rel[rel["step"] == rel["step"].max()].iloc[0]
        st.caption(f"Syntax probed on {plain(last['context'])} inputs with {plain(last['labels'])} relation labels.")
    _claims_section(tables.get("probe_claims"))
    if ph is not None and not ph.empty:
        _heads_section(ph, m, root, key, token)
    if rel is not None and not rel.empty:
        st.subheader("Syntactic relations: best head against the best fixed-offset baseline")
        chart(pr.relation_delta_figure(rel), key="probe_relation_deltas")
        show_table(pr.relations_view(rel), hide_index=True, width="stretch", key="probe_relations")
    coref = tables.get("probe_coref")
    if coref is not None and not coref.empty:
        st.subheader("Coreference by antecedent distance")
        chart(pr.coref_bucket_figure(coref), key="probe_coref_chart")
    if ph is not None and not ph.empty:
        _windows_section(ph, m)
    _comparison_section(tables)


if __name__ == "__main__":
    render()
