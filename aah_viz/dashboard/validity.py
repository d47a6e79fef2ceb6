"""Are the head groups real? The banners (listed in ``page_head``) on pages that show groups, the
Stability page's section, and the Hierarchy page's words for each level."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis import cluster_validity as cv
from aah_viz.dashboard import cache, session
from aah_viz.dashboard.common import chart, plain, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.head_similarity import TITLE as HEAD_SIMILARITY_TITLE

LAYER_COLUMNS = {
    "layer": "layer",
    "partitions": "partitions",
    "forced_share": "forced split",
    "real_share": "beats chance",
    "median_similarity": "median similarity",
}


SEE_ALSO = (
    " See Stability → are the head groups real?, and Stability → "
    f"{HEAD_SIMILARITY_TITLE.lower()} for the similarities that do give real groups."
)


VALIDITY_PLACE = "Stability → are the head groups real?"
SIMILARITY_PLACE = f"Stability → {HEAD_SIMILARITY_TITLE.lower()}"


def has_head_similarity(root: str, key: str, token: int) -> bool:
    """Whether the run has a ``head_similarity`` table (aah-viz head-similarity): only then has the
    section on which similarities give real groups something to show."""
    return "head_similarity" in cache.open_run(root, key).tables()


def groups_in_doubt_banner(root: str, key: str, token: int, manifest: dict) -> tuple[str, str] | None:
    """Every page of one run: its groups colour the windows, the training and the probes too, so the
    doubt is said wherever the run is shown; it points to the head-similarity section only where the
    run has one to see."""
    shares = run_shares(root, key, token)  # from the run's summary: no validity rows read
    text = cv.doubt_from_shares(shares)
    if not text:
        return None
    similarity = has_head_similarity(root, key, token)
    # the line stays one line (the trained samples all have the section): the section is named in the details
    short = f"**Head groups mostly not clusters** ({cv.doubt_in_brief(shares)}; see Stability)"
    return short, text + (SEE_ALSO if similarity else f" See {VALIDITY_PLACE}.")


def run_shares(root: str, key: str, token: int) -> dict:
    """The run's ``cv.run_shares``: from its summary (the overview has it), else from its validity rows."""
    shares = cache.overview(root, key, token).get("validity_shares")
    return shares if shares is not None else cv.run_shares(cache.validity(root, key, token)["validity"])


def groups_in_doubt_selection(keys) -> None:
    """Pages of several runs (Runs, Compare, Export): one box naming each run whose groups are in doubt."""
    root = session.logs_root()
    named, with_similarity = [], []
    views = session.overviews()  # one cache call for all runs
    for key in keys:
        kept = views.get(key, {}).get("validity_shares")
        shares = kept if kept is not None else run_shares(root, key, session.token(key))
        if cv.doubt_from_shares(shares):
            named.append(f"{key} ({shares['partitions']} partitions: {cv.doubt_in_brief(shares)})")
            listed = views.get(key, {}).get("tables")  # the run's table names came with its overview
            if listed is None:
                listed = ["head_similarity"] if has_head_similarity(root, key, session.token(key)) else []
            if "head_similarity" in listed:
                with_similarity.append(key)
    if named:
        # one line with the runs on demand (a paragraph naming 24 runs pushed the table below the fold)
        c1, c2 = st.columns([6, 1], vertical_alignment="center")
        c1.warning(
            f"**Head groups mostly not clusters** in {len(named)} of the {len(keys)} runs shown: read their groups "
            "as an artefact of the method, not as structure.",
            icon="⚠️",
        )
        with c2.popover("Details", width="stretch"):
            st.markdown(
                plain("Runs whose head groups are mostly not clusters: " + "; ".join(named))
                + ". Read their groups (and comparisons of them with probes) as an artefact of the method, not as "
                "structure." + similarity_pointer(with_similarity, len(named))
            )


def similarity_pointer(with_similarity: list[str], named: int | None = None) -> str:
    """Where to read more about several runs: the head-similarity section only for the runs that have one
    (a run without a head_similarity table would find it empty); "each of them" when all ``named`` do."""
    if not with_similarity:
        return f" See {VALIDITY_PLACE}."
    if named is not None and len(with_similarity) == named:
        return f" See {VALIDITY_PLACE}; {SIMILARITY_PLACE} shows which similarities do give real groups, for each."
    return (
        f" See {VALIDITY_PLACE}; {SIMILARITY_PLACE} shows which similarities do give real groups, for "
        + plain(", ".join(with_similarity))
        + " (the runs with a head-similarity table)."
    )


def section(root: str, key: str, token: int) -> None:
    """The Stability page's view: similarity, silhouette against chance, and shares, over training."""
    st.subheader("Are the head groups real?")
    fig, shares = cache.validity_figure(root, key, token)
    if fig is None:
        st.info("No level-0 partitions recorded: the regime has no grouping, or routing has not updated yet.")
        return
    chart(fig, key="valid_fig", name="cluster-validity")
    st.caption(
        "A partition is real only when its silhouette beats both nulls: random partitions with the same group "
        "sizes, and the same number of groups fitted to structureless heads.",
        help=help_text("cluster_validity"),
    )
    # the real share is nan where nothing was assessed: unknown, not zero
    show_table(
        shares.rename(columns=LAYER_COLUMNS),
        hide_index=True,
        width="stretch",
        key="valid_layers",
        column_config={
            "partitions": st.column_config.NumberColumn(help="level-0 partitions assessed (one per routing update)"),
            "forced split": st.column_config.NumberColumn(help=help_text("forced_split"), format="%.2f"),
            "beats chance": st.column_config.NumberColumn(help=help_text("cluster_validity"), format="%.2f"),
            "median similarity": st.column_config.NumberColumn(
                help="median over updates of the median pairwise cosine similarity of the heads", format="%.3f"
            ),
        },
    )


def level_notes(root: str, key: str, token: int, layer: int, tree: pd.DataFrame) -> list[str]:
    """One sentence per level of the drawn tree: its origin and, at level 0, its validity."""
    if tree is None or tree.empty:
        return []
    step = int(tree["step"].iloc[0])
    v = cache.validity_at(root, key, token, layer, step)
    row = v[(v["step"] == step) & (v["layer"] == layer)]
    config = cache.manifest(root, key, token).get("config") or {}
    # level 0 clusters heads by cosine; the levels above by the run's upper metric (the config's default if unrecorded)
    upper = config.get("upper_cluster_metric", "cosine_normdiff")
    scale = float(config.get("cosine_normdiff_scale", 16.0))
    notes = []
    for level, rows in tree.groupby("level", sort=True):
        first = rows.iloc[0]
        if int(level) == 0 and not row.empty:
            notes.append(f"Level 0: {cv.describe(row.iloc[0].to_dict())}.")
        else:
            metric = "cosine" if int(level) == 0 else upper
            notes.append(f"Level {int(level)}: {cv.describe_level(first.to_dict(), metric, scale)}.")
    return notes
