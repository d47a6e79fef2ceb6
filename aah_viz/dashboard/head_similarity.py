"""Do head groups mean anything? The section that shows a run's ``head_similarity`` table: which
similarities give real, stable groups in which layers, and whether they agree with span and probe."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis import head_similarity as hs
from aah_viz.analysis.similarity_measures import SIMILARITIES
from aah_viz.dashboard import address, cache
from aah_viz.dashboard.common import chart, show_table
from aah_viz.figures import head_similarity as hfig

TITLE = "Do head groups mean anything?"
ANCHOR = "do-head-groups-mean-anything"  # Streamlit's anchor of the section's subheader (the banner links to it)
SUMMARY_COLUMNS = {
    "similarity": "similarity",
    "layers": "layers",
    "real": "real",
    "stable": "stable",
    "real_and_stable": "real and stable",
    "agrees_with_span": "agrees with span",
    "agrees_with_probe": "agrees with probe",
}


@st.cache_data(show_spinner=False)
def table(root: str, key: str, token: int) -> pd.DataFrame:
    run = cache.open_run(root, key)
    return run.table("head_similarity") if "head_similarity" in run.tables() else pd.DataFrame()


def verdict_sentence(summary: pd.DataFrame) -> str:
    """The section's answer in one sentence, from ``hs.summary``: which similarities give real and stable
    groups in how many layers (the best first), or that none does."""
    if summary is None or summary.empty:
        return "No grouping was judged."
    good = summary[summary["real_and_stable"] > 0].sort_values("real_and_stable", ascending=False, kind="stable")
    if good.empty:
        real = summary[summary["real"] > 0]
        if real.empty:
            return "**No similarity gives real head groups in any layer**: every grouping is at chance or undefined."
        named = ", ".join(f"{r.similarity} in {r.real} of {r.layers} layers" for r in real.itertuples())
        return f"**No similarity gives real and stable head groups.** Real but not shown stable: {named}."
    named = ", ".join(f"{r.similarity} in {r.real_and_stable} of {r.layers} layers" for r in good.itertuples())
    return f"**Real and stable head groups:** {named}."


def missing_sentence(t: pd.DataFrame) -> str:
    """What the table leaves out and why: a table computed from the run's own tables (a run that kept no
    checkpoint) has no model measurement, so neither the method's features nor halves of the data."""
    rows = hs.groupings(t)
    present = [s for s in SIMILARITIES if s in set(rows["similarity"])]
    absent = [s for s in SIMILARITIES if s not in present]
    no_halves = rows["reason"].fillna("").str.contains("no halves measured").all()
    if not absent and not no_halves:
        return ""
    parts = [f"Similarities here: {', '.join(present)}."]
    if absent:
        parts.append(
            f"Not measured: {', '.join(absent)}: they need each head's features, which training does not keep "
            '(it records the grouping each update made from them: "Are the head groups real?" above judges those '
            "groups update by update), so they are measured again from the run's model or its profile."
        )
    if no_halves:
        parts.append("Stability is not measured: the heads were measured once, not on two halves of the data.")
    parts.append(
        "`aah-viz head-similarity RUN` on a run that keeps its checkpoint measures all five on two halves "
        "(docs/head-groups.md)."
    )
    return " ".join(parts)


def section(root: str, key: str, token: int) -> None:
    """The grid of verdicts, the agreement with span and probe, and the per-similarity counts."""
    st.subheader(TITLE, anchor=ANCHOR)
    t = table(root, key, token)
    if t.empty:
        st.info(
            "No head_similarity table in this run. `aah-viz head-similarity RUN` groups the heads by five "
            "similarities (the method's features, standardised features, attention by distance, span, probe "
            "scores) and judges every grouping (docs/head-groups.md)."
        )
        return
    procedures = list(hs.PROCEDURES)
    procedure = address.choose(
        st.radio,
        "procedure",
        "hsim_procedure",
        procedures,
        label="grouping procedure",
        horizontal=True,
        format_func=lambda p: "the method's (threshold)" if p == "method" else "complete linkage (same count)",
    )
    st.markdown(verdict_sentence(hs.summary(t, procedure)))
    missing = missing_sentence(t)
    if missing:
        st.caption(missing)
    chart(hfig.verdict_figure(t, procedure, "which similarities give real, stable head groups"),
          key="hsim_verdicts", name="head-similarity")  # fmt: skip
    st.caption(
        "Real: the grouping's silhouette beats both validity nulls (random groupings of the same sizes, and "
        "structureless heads grouped alike). Stable: the groupings of two disjoint halves of the data agree "
        "beyond chance (ARI, p <= 0.05). Light grey (no grouping, –): the similarity is undefined in that "
        f"layer (no probe or span scores there, or heads all alike). With more than {hfig.MOST_TEXT_COLUMNS} "
        "layers the cells carry colour only: hover a cell for its words. In the agreement grids, a blank cell "
        "has no grouping to compare and – an undefined ARI."
    )
    chart(hfig.agreement_figure(t, procedure, "do they agree with what heads do?"), key="hsim_agree",
          name="head-similarity-agreement")  # fmt: skip
    show_table(hs.summary(t, procedure).rename(columns=SUMMARY_COLUMNS)[list(SUMMARY_COLUMNS.values())],
                 hide_index=True, width="stretch", key="hsim_summary")  # fmt: skip
    mantel = hs.mantel_view(t, procedure)
    if len(mantel):
        st.markdown("**Similar heads, similar probe profiles? Within-layer Mantel tests**")
        show_table(mantel, hide_index=True, width="stretch", key="hsim_mantel")
        st.caption(
            "Spearman's rho between two similarities' distances over each layer's pairs of heads, against the "
            "heads relabelled at random (exact: every relabelling); Holm's adjustment across the layers. No "
            "grouping is involved. The ARI of the two groupings is shown only where both are judged real."
        )
