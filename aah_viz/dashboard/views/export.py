"""Export: every table as CSV, Markdown or LaTeX and every figure as PNG, SVG or PDF, to download."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import address, cache, page_head, pickers, selection, session
from aah_viz.dashboard.common import chart, figure_bytes, guarded, plain, show_table
from aah_viz.dashboard.configuration import one_configuration
from aah_viz.errors import AAHVizError
from aah_viz.export.formats import EXTENSIONS, FORMATS, display_frame
from aah_viz.export.formats import render as render_table
from aah_viz.export.kinds import TABLE_NAMES
from aah_viz.export.tables import build_table
from aah_viz.figures import FIGURE_KINDS, FIGURE_OPTIONS
from aah_viz.figures.tabular import figure_frame

FIGURE_FORMATS = ("png", "svg", "pdf")
MIME = {
    "png": "image/png",
    "svg": "image/svg+xml",
    "pdf": "application/pdf",
    "csv": "text/csv",
    "md": "text/markdown",
    "latex": "application/x-tex",
}
SINGLE_RUN_KINDS = {
    "training_curves",
    "hierarchy",
    "window_heatmap",
    "head_timeline",
    "branch_bars",
    "stability",
    "switch_rate",
    "controller_health",
    "probe_heatmap",
    "window_vs_probe",
}


# the figure options in words on the page (the help names the option as aah-viz figure --opt takes it)
OPTION_WORDS = {
    "log_step": "log step axis",
    "log_y": "log y axis",
    "robust": "ignore outliers",
    "max_points": "points per line",
    "max_columns": "most steps shown",
    "color_by": "colour by",
    "x": "x axis",
    "group": "group by",
    "doc": "document",
}
# an option of the Training page's charts -> its widget there: Export starts from what that page shows
TRAINING_VIEW = {
    "scalar": "tr_scalars",
    "x": "tr_x",
    "group": "tr_group",
    "band": "tr_band",
    "smoothing": "tr_smoothing",
    "robust": "tr_robust",
    "log_y": "tr_log_y",
    "color_by": "tr_colour",
}
TRAINING_KINDS = ("curves", "training_curves")

BUILD_AT_ONCE = 100  # more selected runs than this: the table is built when asked for
BUILT = "exp_table_built"


@st.cache_data(show_spinner="Building the table ...")
def table_text(root: str, keys: tuple[str, ...], token: int, name: str, by: str, fmt: str) -> tuple[str, object]:
    runs = [cache.open_run(root, k) for k in keys]
    table = build_table(name, runs, by=by)
    return render_table(table, fmt), display_frame(table)  # the preview as the text prints it


@st.cache_data(show_spinner="Building the figure ...", max_entries=32)
def figure(root: str, keys: tuple[str, ...], token: int, kind: str, opts: tuple):
    """The figure of ``kind`` from the runs (a redraw of the page builds it once)."""
    return FIGURE_KINDS[kind]([cache.open_run(root, k) for k in keys], **dict(opts))


def _tables(root: str, keys: tuple[str, ...], token: int) -> None:
    st.subheader("Tables")
    names = tuple(TABLE_NAMES)
    c1, c2, c3 = st.columns(3)
    name = c1.selectbox("Table", names, key="exp_table")
    by = c2.radio(
        "Rows",
        ["run", "regime"],
        horizontal=True,
        key="exp_by",
        format_func=lambda b: "one per run" if b == "run" else "mean over seeds per setup",
        help="Per setup: the runs of one regime set up alike (Compare's rows); runs of one regime with other "
        "settings are rows of their own, named by what differs.",
    )
    fmt = c3.radio("Format", tuple(FORMATS), horizontal=True, key="exp_table_fmt")
    if len(keys) > BUILD_AT_ONCE and not st.session_state.get(BUILT):
        # a table reads every selected run's tables: with many runs the rest of the page comes first
        st.caption(f"The table reads the tables of all {len(keys)} selected runs.")
        if not st.button(f"Build the table of {len(keys)} runs", key="exp_table_build"):
            return
        st.session_state[BUILT] = True  # built once: kept on every later draw of the page
    try:
        text, df = table_text(root, keys, token, name, by, fmt)
    except AAHVizError as err:
        st.error(plain(f"Table {name!r} cannot be built from the selected runs: {err}"))
        return
    show_table(df, hide_index=True, width="stretch", key="exp_table_preview")
    st.download_button(
        f"Download {name}.{EXTENSIONS.get(fmt, fmt)}",
        data=text,
        file_name=f"{name}-{by}.{EXTENSIONS.get(fmt, fmt)}",
        mime=MIME.get(fmt, "text/plain"),
        key="exp_table_download",
        on_click="ignore",  # a download needs no rerun
    )
    with st.expander("Rendered text"):
        st.code(text, language="latex" if fmt == "latex" else None)


def _option_value(text: str):
    """An option typed on the page: int, float, true/false, or the text itself ('' = the default)."""
    text = text.strip()
    if text == "":
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _figures(root: str, keys: tuple[str, ...], token: int) -> None:
    st.subheader("Figures")
    c1, c2 = st.columns(2)
    kind = c1.selectbox("Figure", list(FIGURE_KINDS), key="exp_fig_kind")
    fmt = c2.radio("Format", (*FIGURE_FORMATS, "csv"), horizontal=True, key="exp_fig_fmt")
    current = pickers.pick_run() if kind in SINGLE_RUN_KINDS else None
    use = (current,) if current else keys
    opts_help = FIGURE_OPTIONS.get(kind, {})
    sel = selection.current()
    opts = {}
    if opts_help:
        cols = st.columns(len(opts_help))
        for col, (name, help_) in zip(cols, opts_help.items()):
            default = sel.get(name) if name in ("layer", "head", "step") else None
            if kind in TRAINING_KINDS and name in TRAINING_VIEW:
                default = _on_training(name)
            text = col.text_input(
                OPTION_WORDS.get(name, name),
                value="" if default is None else str(default).lower() if isinstance(default, bool) else str(default),
                key=f"exp_opt_{kind}_{name}",
                help=f"{help_} (aah-viz figure --opt {name}=...)",
                placeholder="default",
            )
            value = _option_value(text)
            if value is not None:
                opts[name] = value
    fig = figure(root, tuple(use), session.tokens(use), kind, tuple(sorted(opts.items())))
    chart(fig, key="exp_fig_preview", name=kind)
    suffix = "-".join(f"{k}{v}" for k, v in opts.items())
    stem = f"{kind}-{suffix}" if suffix else kind

    def make_bytes() -> bytes:  # runs only when the button is clicked
        if fmt == "csv":
            return figure_frame(fig).to_csv(index=False).encode()
        return figure_bytes(fig, fmt)

    st.download_button(
        f"Download {stem}.{fmt}",
        data=make_bytes,
        file_name=f"{stem}.{fmt}",
        mime=MIME[fmt],
        key="exp_fig_download",
        on_click="ignore",
    )


def _on_training(name: str):
    """What the Training page last showed for a figure option (None: it was never opened), so a figure of
    its charts exports what is on screen there."""
    value = st.session_state.get(address.KEEP + TRAINING_VIEW[name])
    if name == "scalar":
        return value[0] if value else None
    return None if value in (None, "none") else value


@guarded
def render() -> None:
    st.title("Export")
    root, token = session.logs_root(), session.token()
    keys = tuple(selection.selected_keys())
    if not keys:  # the selection falls back to every run: none means none under the root
        pickers.say_no_runs()
        return
    page_head.show_selection_warnings(keys)
    st.caption(
        f"{len(keys)} selected runs. Tables and figures are built from the same run directories the other pages "
        "show; those of several runs from one configuration at a time."
    )
    # Compare's configurations (model, T, windows, training steps): a table or figure never pools them
    keys = tuple(one_configuration(keys, "exp_config"))
    token = session.tokens(keys)  # each run's own stamp: a live run's new segments rebuild its tables
    try:
        _tables(root, keys, token)
    except ImportError as err:
        st.error(plain(f"Table export is not available in this install: {err}"))
    _figures(root, keys, token)


if __name__ == "__main__":
    render()
