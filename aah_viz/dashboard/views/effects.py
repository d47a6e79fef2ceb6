"""Effects: a factorial sweep's answer (``aah-viz sweep``, docs/ablations.md): each factor's main effect and
each two-way interaction on the final metrics with its 95% interval over seeds (a forest), the interaction
plots, and the cells' means. The numbers are ``aah-viz effects``'s: the same functions, on the same runs."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pandas as pd
import streamlit as st

from aah_viz.dashboard import address, guide, session
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.labels import metric_words
from aah_viz.errors import AAHVizError
from aah_viz.export import effects as fx
from aah_viz.export.design_effects import cells_table, design_runs_frame, effects_table, metric_choices
from aah_viz.figures.effects import forest_figure, forest_rows, interaction_figure
from aah_viz.runlog import resolve_under
from aah_viz.sweep.design import Design
from aah_viz.sweep.plan import DESIGN_RECORD, STATE_DIR, recorded_design

ROOT_NAME = "(the logs root)"
DEFAULT_METRICS = ["val_loss", "acr"]
NO_SWEEP = (
    "No sweep under this logs root: a folder that `aah-viz sweep` wrote holds `.sweep/design.json` beside its "
    "runs. Run one (`aah-viz sweep DESIGN --logs DIR`, docs/ablations.md) and open the dashboard on DIR or a "
    "folder above it."
)


def record_path(root: str, folder: str) -> Path | None:
    """The design record of a sweep folder (a key relative to the root, "" for the root itself), when it
    is a regular file inside the logs root (a link out of it is not followed)."""
    try:
        path = resolve_under(root, posixpath.join(folder, STATE_DIR, DESIGN_RECORD))
    except AAHVizError:
        return None
    return path if path.is_file() else None


def sweep_folders(root: str, keys) -> list[str]:
    """The folders under the root that hold a sweep's runs and its recorded design, in name order."""
    parents = sorted({posixpath.dirname(k) for k in keys})
    return [p for p in parents if record_path(root, p) is not None]


@st.cache_data(show_spinner=False)
def offered_metrics(root: str, folder: str, token: int, stamp: int) -> list[str]:
    """What the sweep's runs can answer: training metrics, or a frontier sweep's configurations."""
    logs = resolve_under(root, folder) if folder else Path(root)
    return metric_choices(logs, recorded_design(logs))


@st.cache_data(show_spinner=False)
def sweep_tables(root: str, folder: str, metrics: tuple[str, ...], token: int, stamp: int) -> dict:
    """The design, the runs' final metrics, ``aah-viz effects``'s two tables and their notes (the same
    calls as the command); ``token`` changes with any run of the sweep, ``stamp`` with its record."""
    logs = resolve_under(root, folder) if folder else Path(root)
    design = recorded_design(logs)
    frame, notes = design_runs_frame(logs, design, list(metrics))
    return {
        "design": design,
        "frame": frame,
        "effects": effects_table(frame, design, list(metrics), notes=notes),
        "cells": cells_table(frame, design, list(metrics), notes=notes),
    }


def design_caption(design: Design, finished: int) -> str:
    factors = "; ".join(f"{f.name}: {', '.join(f.levels)} (reference {f.levels[0]})" for f in design.factors)
    fraction = f" The fraction {'; '.join(design.generators)}." if design.generators else ""
    return (
        f"Design **{plain(design.name)}**, `{design.command}` in {len(design.cells)} cells x {len(design.seeds)} "
        f"seed(s): {finished} of {len(design.trials())} trials finished. Factors: {plain(factors)}.{fraction}"
    )


def seeds_sentence(effects: pd.DataFrame, seeds: int) -> str | None:
    """What the page says when the intervals are missing or rest on something other than seeds."""
    notes = set(effects["note"])
    if fx.TOO_FEW_SEEDS in notes:
        return (
            f"Too few seeds for an interval: with {seeds} seed(s) a cell the model of the design leaves no "
            "residual degrees of freedom, so the effects below are point estimates with no interval and no "
            "p-value. Run 2 or more seeds a cell (`seeds` in the design, then `aah-viz sweep` again: the "
            "finished runs are kept)."
        )
    if fx.ONE_SEED in notes:
        return (
            "One seed a cell: the intervals below rest on the interactions the model leaves out (three-way and "
            "above), not on seed-to-seed variation. Run 2 or more seeds a cell for intervals over seeds."
        )
    return None


def show_metric(tables: dict, metric: str, key: str) -> None:
    design: Design = tables["design"]
    effects = tables["effects"].df
    part = effects[effects["metric"] == metric].reset_index(drop=True)
    words = metric_words(metric)
    st.subheader(f"Final {words}", help=help_text("factorial_effect"))
    if part.empty:
        st.info(f"No finished run of this sweep has a final {words}.")
        return
    sentence = seeds_sentence(part, len(design.seeds))
    if sentence:
        st.warning(sentence, icon=":material/info:")
    if forest_rows(part).empty:
        st.info("No effect could be estimated (every one is aliased).")
    else:
        chart(forest_figure(part, metric, label=words), key=f"{key}_forest", name=f"effects-{metric}", data=part)
    aliased = part[part["note"] == fx.ALIASED]
    if len(aliased):
        st.caption(
            plain(
                f"Not estimated, aliased in this fraction with terms in the model: {', '.join(aliased['factors'])}. "
                "Their interaction plots below show the aliased term's effect as much as the interaction's."
            )
        )
    clear = forest_rows(part)
    clear = clear[clear["clear"]]
    st.caption(
        plain(
            "Intervals that leave out zero: " + ", ".join(clear["label"]) + "."
            if len(clear)
            else "Every interval holds zero: no effect is told apart from the seed-to-seed spread at this size."
        )
    )
    pairs = [(a.name, b.name) for i, a in enumerate(design.factors) for b in design.factors[i + 1 :]]
    if pairs:
        st.markdown("**Two-way interactions** (mean of the cell means; parallel lines: no interaction)")
        levels = {f.name: list(f.levels) for f in design.factors}
        columns = st.columns(min(3, len(pairs)))
        for i, pair in enumerate(pairs):
            means = fx.interaction_means(tables["frame"], levels, pair, metric)
            with columns[i % len(columns)]:
                chart(
                    interaction_figure(means, pair, metric, label=words),
                    key=f"{key}_ix_{i}",
                    name=f"{metric}-{'-x-'.join(pair)}",
                )


@guarded
def render() -> None:
    st.title("Effects")
    st.caption(
        "A factorial sweep's answer: what each factor and each pair of factors does to the final metrics, "
        "with 95% intervals over seeds from a linear model of the design; the numbers of `aah-viz effects`."
    )
    st.markdown(f"How a sweep is designed, run and read: [docs/ablations.md]({guide.link('ablations')})")
    root = session.logs_root()
    keys = session.good_keys()
    folders = sweep_folders(root, keys)
    if not folders:
        st.info(NO_SWEEP)
        return
    names = {f: (f or ROOT_NAME) for f in folders}
    c1, c2 = st.columns([2, 3])
    folder = address.choose(
        c1.selectbox,
        "sweep",
        "effects_sweep",
        folders,
        label="Sweep",
        format_func=lambda f: names[f],
        help="A folder of runs that aah-viz sweep wrote (its design is recorded in .sweep/design.json)",
    )
    members = [k for k in keys if posixpath.dirname(k) == folder]
    stamp = os.stat(record_path(root, folder)).st_mtime_ns
    offered = offered_metrics(root, folder, session.tokens(members), stamp)
    metrics = address.choose_some(
        c2.multiselect,
        "emetric",
        "effects_metrics",
        offered,
        [m for m in DEFAULT_METRICS if m in offered] or offered[:2],
        label="Final metrics",
        format_func=metric_words,
        help="Each run's final value of these (the training table's definitions: docs/export.md); in a frontier "
        "sweep, a configuration's perplexity (ppl@NAME) or passkey accuracy (retrieval@NAME)",
    )
    if not metrics:
        st.info("Choose at least one metric.")
        return
    tables = sweep_tables(root, folder, tuple(metrics), session.tokens(members), stamp)
    design: Design = tables["design"]
    st.markdown(design_caption(design, len(tables["frame"])))
    for note in tables["effects"].notes:
        if not note.startswith("Fraction:"):  # the caption above names the fraction
            st.caption(plain(note))
    if tables["frame"].empty:
        st.info("No run of this design has finished yet; the effects appear as its trials finish.")
        return
    for i, metric in enumerate(metrics):
        show_metric(tables, metric, key=f"effects_{i}")
    st.subheader("Effects table")
    show_table(tables["effects"].df, hide_index=True, width="stretch")
    data_downloads(tables["effects"].df, f"effects-{design.name}", "effects_table")
    st.subheader("Cells")
    st.caption("Each cell's finished runs (n) and the mean and standard deviation over its seeds.")
    show_table(tables["cells"].df, hide_index=True, width="stretch")
    data_downloads(tables["cells"].df, f"cells-{design.name}", "effects_cells")


if __name__ == "__main__":
    render()
