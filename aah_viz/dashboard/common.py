"""Small helpers the pages share: error boxes, charts with downloads, plain text."""

from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd
import streamlit as st

from aah_viz.dashboard.safe_text import plain  # noqa: F401 (the pages' one import for text)
from aah_viz.errors import AAHVizError
from aah_viz.figures.tabular import figure_frame
from aah_viz.figures.text import without_links

EXPORT_WIDTH = 1100  # px of a downloaded figure: wide enough for every title and legend
FIGURE_MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}


MISSING = "–"  # a missing value in every table (Streamlit's own is the word "None", read as a value)


def number_formats(frame: pd.DataFrame) -> dict[str, str]:
    """column -> one printf format for each column of fractional numbers, so a column never reads
    0.481 / 0.6739 / 0.811: whole numbers as such, else 3 decimals, more where the smallest value that is
    not 0 would read as 0.000 (a p-value of 0.0005: 0.00050)."""
    out = {}
    for column in frame.columns:
        if not pd.api.types.is_float_dtype(frame[column]):
            continue
        values = frame[column].to_numpy(dtype=np.float64, na_value=np.nan)  # pandas Float64 holds NA
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        if np.all(values == np.round(values)):
            out[column] = "%d"
            continue
        nonzero = np.abs(values[values != 0])
        smallest = float(nonzero.min()) if nonzero.size else 1.0
        out[column] = f"%.{3 if smallest >= 0.01 else min(6, 1 - int(np.floor(np.log10(smallest))))}f"
    return out


def show_table(data, **options):
    """``st.dataframe`` with missing values shown as "–" and one number format a column of fractions
    (:func:`number_formats`; a page's own column settings win), the one way every page shows a table."""
    options.setdefault("placeholder", MISSING)
    frame = getattr(data, "data", data)  # a Styler's frame
    if isinstance(frame, pd.DataFrame):
        config = {c: st.column_config.NumberColumn(format=f) for c, f in number_formats(frame).items()}
        config.update(options.get("column_config") or {})
        options["column_config"] = config
    return st.dataframe(data, **options)


def guarded(fn):
    """Run a page (or a section); a toolkit error becomes an error box instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AAHVizError as err:
            st.error(plain(err))
        return None

    return wrapper


FEW_NAMES = 3  # runs left out named in the line itself; more: a count, their names behind an expander


def say_left_out(keys, why: str, lead: str = "") -> None:
    """One line about the selected runs a page does not show, and why (after ``lead``): a caption naming
    them where there are few, else a closed expander saying their count, the names inside (41 names were
    a paragraph above the results)."""
    keys = list(keys)
    if not keys:
        return
    if len(keys) <= FEW_NAMES:
        st.caption(plain(f"{lead}Left out: {', '.join(keys)} ({why})."))
        return
    with st.expander(plain(f"{lead}Left out: {len(keys)} runs ({why})")):  # one line above the charts
        st.caption(plain(", ".join(keys)))


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "figure"


def figure_bytes(fig, fmt: str) -> bytes:
    from aah_viz.export.static import figure_bytes as kaleido_bytes  # loaded on the first download only

    fig = without_links(fig)  # an SVG or PDF would keep a link as a live one
    height = fig.layout.height or 500
    return kaleido_bytes(fig, fmt, width=EXPORT_WIDTH, height=int(height))


def downloads(fig, key: str, name: str, data: pd.DataFrame | None = None, where=None) -> None:
    """PNG, SVG and PDF of the figure (rendered through Kaleido only when clicked) and its data as CSV."""
    target = where or st
    stem = _file_stem(name)
    with target.popover("Download", icon=":material/download:", key=f"{key}_dl"):
        for fmt, mime in FIGURE_MIME.items():
            st.download_button(
                fmt.upper(),
                data=functools.partial(figure_bytes, fig, fmt),  # rendered on click only
                file_name=f"{stem}.{fmt}",
                mime=mime,
                key=f"{key}_dl_{fmt}",
                on_click="ignore",
            )
        st.download_button(
            "CSV (data)",
            data=functools.partial(_csv_text, fig, data),  # built on click only: a redraw skips the figure's table
            file_name=f"{stem}.csv",
            mime="text/csv",
            key=f"{key}_dl_csv",
            on_click="ignore",
        )


def _csv_text(fig, data: pd.DataFrame | None) -> str:
    return (data if data is not None else figure_frame(fig)).to_csv(index=False)


def data_downloads(frame: pd.DataFrame, stem: str, key: str, where=None) -> None:
    """The data behind a page, one click each: CSV and Parquet (built only when clicked)."""
    target = where or st
    c1, c2 = target.columns(2)
    c1.download_button(
        "Data (CSV)",
        data=lambda: frame.to_csv(index=False).encode(),
        file_name=f"{_file_stem(stem)}.csv",
        mime="text/csv",
        key=f"{key}_csv",
        icon=":material/download:",
        on_click="ignore",
    )
    c2.download_button(
        "Data (Parquet)",
        data=lambda: _parquet(frame),
        file_name=f"{_file_stem(stem)}.parquet",
        mime="application/vnd.apache.parquet",
        key=f"{key}_parquet",
        icon=":material/download:",
        on_click="ignore",
    )


def _parquet(frame: pd.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def chart(
    fig, key: str, name: str | None = None, data: pd.DataFrame | None = None, on_select=None, on_box=None
) -> None:
    """A Plotly chart with its downloads; ``on_select(points)`` runs (before the rerun) when a click
    changes the chart's selection, ``on_box(x0, x1)`` when a box is drawn on it (box select)."""

    def _selected() -> None:
        chosen = st.session_state[key].get("selection", {}) or {}
        boxes = list(chosen.get("box", []) or [])
        if on_box and boxes and len(boxes[0].get("x", [])) == 2:
            x0, x1 = sorted(float(v) for v in boxes[0]["x"])
            on_box(x0, x1)
            return
        points = list(chosen.get("points", []) or [])
        if points and on_select:
            on_select(points)

    fig = without_links(fig)  # a run's name or a table cell may hold an <a href=...> tag
    if on_box:  # a drag draws the box (a zoom would stay on this one chart)
        fig.update_layout(dragmode="select", selectdirection="h")
    # theme=None: the figure keeps its own template, so the page looks like the exported figure
    st.plotly_chart(
        fig,
        key=key,
        width="stretch",
        theme=None,
        config={"displaylogo": False},
        on_select=_selected if on_select or on_box else "ignore",
        selection_mode=("points", "box") if on_box else "points",
    )
    downloads(fig, key, name or key, data)
