"""Runs: every run under the logs root in one table that is also the selector: sort by any column,
filter by any manifest field or final figure, tick the rows the other pages show; the settings that
differ between the ticked runs below it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis import manifest_fields
from aah_viz.dashboard import address, page_head, selection, session
from aah_viz.dashboard.common import data_downloads, guarded, plain, show_table
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
TABLE = "runs_table"
SHOWN = "runs_shown"  # the run keys of the table's rows, in order, as last drawn
TICKED = "runs_ticked"  # the row numbers this page ticked when it last drew the table
PAGE_ROWS = 500  # rows the table holds at a time (a sweep's thousands are pages of it)
DIFF_MAX = 50  # runs the table of differing settings shows side by side
# in the data and the filter, on screen on request ("More columns"): with them the table ran past 1500 px
ON_REQUEST = ("layers", "heads")
# short headers on screen, so every standard column fits 1500 px; the data keeps the full names and the
# tooltip says what each is
SHORT = {
    "last-batch train loss": ("train loss", "training_loss"),
    "val loss": ("val loss", "val_loss"),
    "ACR": ("ACR", "acr"),
    "causal-pair coverage": ("coverage", "causal_coverage"),
}


def _progress(o: dict, total) -> float | None:
    last = o.get("steps")
    if last is None or not isinstance(total, int) or total <= 0:
        return None
    return min(1.0, (int(last) + 1) / total)


def _table(root: str, good: dict[str, dict]) -> tuple[pd.DataFrame, dict[str, dict]]:
    """One row per run: the standard columns, then every manifest field (``config.lr``, ...)."""
    rows, fields = [], {}
    for k, o in good.items():  # the manifest came with the overview: no cache call per run
        total = o["manifest"].get("steps")
        fields[k] = o["fields"] if "fields" in o else manifest_fields.flat_fields(o["manifest"])
        row = {COLUMNS[c]: v for c, v in {"key": k, **o, "progress": _progress(o, total)}.items() if c in COLUMNS}
        row.update({f: v for f, v in fields[k].items() if f not in COLUMNS and f not in row})
        rows.append(row)
    frame = manifest_fields.fields_frame(rows)  # seed 0, not 0.0, where some runs have none
    if COLUMNS["windows"] in frame:  # 64/128/256/512 as the other pages write them, and narrow enough to fit
        frame[COLUMNS["windows"]] = frame[COLUMNS["windows"]].map(
            lambda w: w.replace(", ", "/") if isinstance(w, str) else w
        )
    base = [c for c in COLUMNS.values() if c in frame]
    extra = manifest_fields.field_order(c for c in frame.columns if c not in base)
    return frame[base + extra], fields


def _page(view: pd.DataFrame) -> pd.DataFrame:
    """The rows of one page, sorted over every matching run (a click on a header sorts the page only)."""
    if len(view) <= PAGE_ROWS:
        return view
    c1, c2, c3 = st.columns([2, 1, 2])
    by = c1.selectbox("Sort by", list(view.columns), key="runs_sort", help="Sorts every run the filter shows.")
    descending = c2.toggle("Descending", key="runs_sort_desc")
    pages = -(-len(view) // PAGE_ROWS)
    page = int(c3.number_input(f"Page (of {pages})", 1, pages, 1, key="runs_page"))
    order = view.sort_values(by, ascending=not descending, kind="stable", na_position="last")
    return order.iloc[(page - 1) * PAGE_ROWS : page * PAGE_ROWS].reset_index(drop=True)


def _take_ticks(keys: list[str]) -> None:
    """Rows ticked or unticked in the table since the page drew it become the selection; runs the
    filter hides keep theirs."""
    event, shown = st.session_state.get(TABLE), st.session_state.get(SHOWN)
    if not event or shown is None:
        return
    rows = list((event.get("selection") or {}).get("rows") or [])
    if rows == st.session_state.get(TICKED):
        return
    ticked = {shown[i] for i in rows if 0 <= i < len(shown)}
    current = set(selection.selected_keys())
    selection.set_selected([k for k in keys if k in ticked or (k in current and k not in shown)])


@guarded
def render() -> None:
    st.title("Runs")
    root = session.logs_root()
    st.caption(
        f"Every run directory under {plain(root)}. Tick the runs the other pages show and compare; "
        "click a column's header to sort by it."
    )
    overviews = session.overviews()
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
    banners = st.container()  # filled once the filter is known: the box speaks of the runs it shows
    keys = list(good)
    _take_ticks(keys)
    frame, fields = _table(root, good)
    standard = [c for c in COLUMNS.values() if c in frame and c not in ON_REQUEST]
    others = [c for c in frame.columns if c not in standard]
    differ = manifest_fields.differing(fields)
    c1, c2, c3 = st.columns([2, 2, 3])
    column = address.choose(
        c1.selectbox,
        "filter",
        "runs_filter_field",
        frame.columns,
        "regime",
        label="Filter by",
        help="Any column: a final figure or a manifest field (config.*, train.*, data.*).",
    )
    expr = address.bound(
        c2.text_input,
        "q",
        "runs_filter",
        "",
        label="Filter",
        placeholder="text, =value, <4.2, >=0.3, !=0",
        help="Plain text is found anywhere in the value; =, !=, <, <=, >, >= compare (numbers as numbers).",
    )
    extra = address.choose_some(
        c3.multiselect,
        "cols",
        "runs_columns",
        others,
        [],
        label="More columns",
        help=f"Manifest fields; {len(differ)} differ between these runs: "
        + plain(", ".join(d for d in differ if d in others)[:400]),
    )
    mask = manifest_fields.matches(frame[column], expr) if column in frame else pd.Series(True, index=frame.index)
    view = frame[mask.to_numpy()].reset_index(drop=True)
    matching = view["run"].tolist()
    with banners:
        page_head.show_selection_banners(matching)
    view = _page(view)
    shown = view["run"].tolist()
    selected = selection.selected_keys()
    ticked = [i for i, k in enumerate(shown) if k in selected]
    st.session_state[TABLE] = {"selection": {"rows": ticked, "columns": [], "cells": []}}
    st.session_state[TICKED], st.session_state[SHOWN] = ticked, shown
    show_table(
        view[standard + list(extra)],
        hide_index=True,
        width="stretch",
        height="content",  # every row of the page on the page: no box scrolling inside the page
        key=TABLE,
        on_select="rerun",
        selection_mode="multi-row",
        column_config={
            "run": st.column_config.TextColumn("run", pinned=True),
            "progress": st.column_config.ProgressColumn(
                "progress",
                help="steps recorded / steps planned",
                min_value=0.0,
                max_value=1.0,
                format="percent",
                width="small",
            ),
            "status": st.column_config.TextColumn("status", help=TERMS["status"][1]),
            "T (tokens)": st.column_config.Column("T", help="sequence length (tokens)"),
            "candidate windows (tokens)": st.column_config.Column("windows", help="candidate windows (tokens)"),
        }
        | {
            column: st.column_config.NumberColumn(short, help=f"{column}: {TERMS[term][1]}", format="%.3f")
            for column, (short, term) in SHORT.items()
        },
    )
    hidden = len(frame) - len(matching)
    st.caption(
        f"{len(selected)} of {len(keys)} runs selected"
        + (f"; the filter hides {hidden} (their selection is kept)" if hidden else "")
        + (f"; this page holds {len(shown)} of the {len(matching)} shown" if len(shown) < len(matching) else "")
        + ". Tick a row's box to select it, the header's box for every shown row."
    )
    b1, b2, _ = st.columns([2, 2, 3])
    if b1.button("Select only shown", key="runs_select_shown", help="Tick the runs the filter shows, no others"):
        selection.set_selected(matching)
        st.rerun()
    if b2.button("Select all", key="runs_select_all", help="Tick every run (also when none is ticked)"):
        selection.set_selected(keys)
        st.rerun()
    running = [k for k, o in good.items() if o.get("status") == "running"]
    if running:
        st.caption(f"{len(running)} run(s) still being written; with live refresh on (sidebar) the table follows them.")
    data_downloads(frame, "runs", key="runs_data")
    _diff(selected, fields)


def _diff(selected: list[str], fields: dict[str, dict]) -> None:
    """The manifest fields whose values differ between the selected runs: one row per field."""
    st.subheader("What differs between the selected runs")
    if len(selected) < 2:
        st.caption("Select two runs or more to see the settings that differ between them.")
        return
    chosen = {k: fields[k] for k in selected if k in fields}
    # the fields a reader compares first: values that differ where every run has the field; a field some runs
    # lack (runs of other kinds) on request; a field repeating another run by run (config.seed) named once
    summary = manifest_fields.diff_summary(chosen)
    values, partial = ([f for f in summary[part] if f != "run_id"] for part in ("values", "partial"))
    mirrors = {f: same for f, same in summary["same_as"].items() if "run_id" not in (f, same)}
    differ = values + partial
    if not differ:
        st.caption("The selected runs have the same settings in every manifest field.")
        return
    if len(chosen) > DIFF_MAX:
        st.caption(
            plain(
                f"{len(differ)} fields differ between the {len(chosen)} selected runs: "
                + ", ".join(differ)[:600]
                + f". Select {DIFF_MAX} runs or fewer to see their values side by side."
            )
        )
        return
    with_partial = bool(partial) and st.toggle(
        f"Also the {len(partial)} fields only some of these runs have",
        value=not values,
        key="runs_diff_partial",
        help="Runs of other kinds (a frontier, a probe, an import) or older versions lack some fields.",
    )
    shown = values + (partial if with_partial else [])
    diff = pd.DataFrame({k: [_cell(chosen[k].get(f)) for f in shown] for k in chosen}, index=shown)
    diff.index.name = "field"
    show_table(diff.reset_index(), hide_index=True, width="stretch", key="runs_diff")
    same = len({f for row in chosen.values() for f in row}) - len(differ) - len(mirrors)
    repeats = ", ".join(f"{f} = {other}" for f, other in mirrors.items())
    st.caption(
        plain(
            f"{len(values)} fields differ in value between runs that all have them"
            + (f"; {len(partial)} only some runs have ({'shown' if with_partial else 'not shown'})" if partial else "")
            + (f"; {len(mirrors)} repeat a field shown, value for value ({repeats[:300]})" if mirrors else "")
            + f"; {same} are the same in every selected run and are not shown."
        )
    )


def _cell(value) -> str:
    return "–" if value is None else str(value)


if __name__ == "__main__":
    render()
