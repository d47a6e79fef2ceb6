"""Training: any logged scalar of the selected runs against step, tokens or wall time, one chart per
scalar on one shared x range; runs overlaid or grouped by a manifest field (mean and band over the
group), TensorBoard's smoothing with the raw line faint behind, a y axis the first losses cannot
flatten. Every choice lives in the address, and the data behind the page downloads in one click."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from aah_viz.analysis import curves as curve_stats
from aah_viz.analysis import manifest_fields
from aah_viz.analysis.configurations import group_labels, group_rows, setup_groups
from aah_viz.dashboard import address, cache, page_head, selection, session
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, say_left_out, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.labels import scalar_label, scalar_words
from aah_viz.figures import curves as cfig
from aah_viz.figures import style

RANGE_KEY = "tr_range"
# whether the x range is one the user chose (slider, box, address): only such a range stays put
# while a live run grows and goes in the address; otherwise the axis follows the run
RANGE_USER = "tr_range_user"
RANGE_FULL = "tr_range_full"  # the full range of the last draw (a slider moved back to it follows again)
GROUP_FIRST = ("regime", "seed", "preset", "windows")
SCALARS_KEY = "tr_scalars"
# whether the user chose the scalars (the picker, the address): until then they are the default of what the
# runs have logged so far (a live run's validation loss joins once evaluated) and stay out of the address
SCALARS_USER = "tr_scalars_user"


def _set_range(x0: float, x1: float) -> None:
    """A box drawn on any chart becomes the x range of every chart (and of the address)."""
    st.session_state[RANGE_KEY] = (x0, x1)
    st.session_state[RANGE_USER] = True


def _slider_moved() -> None:
    """The slider moved by hand: a chosen range, unless it was moved back to the whole run."""
    full = st.session_state.get(RANGE_FULL)
    st.session_state[RANGE_USER] = full is None or tuple(st.session_state[RANGE_KEY]) != tuple(full)


def _follow_unless_chosen(full, parse) -> None:
    """Before the slider is drawn: a range from a new address is the user's (one ``parse`` refuses is no
    choice: said, and the axis follows the run); without one chosen, the range is the whole run now (a
    live run's new steps widen it) and stays out of the address."""
    text = st.query_params.get("range")
    if text is not None and text != st.session_state.get(address.SEEN, {}).get("range"):
        try:
            parse(text)
            st.session_state[RANGE_USER] = True
        except (ValueError, TypeError, OverflowError):
            pass
    if not st.session_state.get(RANGE_USER):
        st.session_state[RANGE_KEY] = full
        st.session_state[address.KEEP + RANGE_KEY] = full
    st.session_state[RANGE_FULL] = full


def _chose(flag: str):
    def on_change() -> None:
        st.session_state[flag] = True

    return on_change


def _default_unless_chosen(param: str, key: str, flag: str, default) -> None:
    """Before the widget is drawn: a value from a new address is the user's; without one chosen, the
    widget shows ``default`` as it is now (it grows with a live run) and stays out of the address."""
    text = st.query_params.get(param)
    if text is not None and text != st.session_state.get(address.SEEN, {}).get(param):
        st.session_state[flag] = True
    if not st.session_state.get(flag):
        st.session_state[key] = list(default)
        st.session_state[address.KEEP + key] = list(default)


def _group_fields(root: str, keys) -> tuple[list[str], dict[str, dict]]:
    """The fields runs can be grouped by: regime, seed, preset, windows, then every field that differs."""
    fields = {k: cache.fields(root, k, session.token(k)) for k in keys}
    differ = manifest_fields.differing(fields)
    options = [f for f in GROUP_FIRST if any(f in row for row in fields.values())]
    return options + [f for f in differ if f not in options], fields


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Training")
    if opened is None:
        return
    key, root, _, _ = opened
    trained, probe_only = session.trained_keys(selection.selected_keys())
    say_left_out(probe_only, "probes or evaluations, not trained here: no training scalars")
    if not trained:
        st.info("No trained run among the selected runs: pick runs on the Runs page.")
        return
    # the runs ticked on the Runs page when there are some, else the page's run
    default_runs = trained if selection.ticked() else ([key] if key in trained else trained[:1])
    labels = {k: session.label(k) for k in trained}  # computed now: format_func may be called outside the run
    c1, c2 = st.columns([3, 2])
    keys = address.choose_some(
        c1.multiselect,
        "runs",
        "tr_runs",
        trained,
        default_runs,
        label="Runs",
        format_func=labels.__getitem__,
        help="Runs drawn together (the runs selected on the Runs page), each in its own colour unless "
        "coloured by regime below.",
    )
    keys = tuple(keys) or tuple(default_runs)
    names = sorted({n for k in keys for n in cache.scalar_names(root, k, session.token(k))}, key=cfig.scalar_order)
    default_scalars = [n for n in cfig.DEFAULT_SCALARS if n in names] or names[:1]
    _default_unless_chosen("scalars", SCALARS_KEY, SCALARS_USER, default_scalars)
    scalars = address.choose_some(
        c2.multiselect,
        "scalars",
        SCALARS_KEY,
        names,
        default_scalars,
        on_change=_chose(SCALARS_USER),
        label="Scalars",
        format_func=scalar_label,
        help="Every scalar the runs logged, model-wide ones first, then each layer's as NAME/layer_L; one chart each.",
    )
    c1, c2, c3, c6, c4, c5 = st.columns([3, 2, 2, 2, 3, 2])
    x = address.choose(
        c1.radio,
        "x",
        "tr_x",
        cfig.X_AXES,
        "step",
        label="x axis",
        format_func=cfig.X_NAMES.get,
        horizontal=True,
        help="Tokens and wall time are summed from each step's logged tokens/s and step time.",
    )
    group_options, _ = _group_fields(root, keys)
    group = address.choose(
        c2.selectbox,
        "group",
        "tr_group",
        ["none", *group_options],
        "none",
        label="Group runs by",
        help="Runs with the same value of this manifest field become one line: their mean, with a band.",
    )
    band = address.choose(
        c3.selectbox,
        "band",
        "tr_band",
        curve_stats.BANDS,
        "minmax",
        label="Band",
        format_func=curve_stats.BAND_NAMES.get,
        disabled=group == "none",
    )
    colour_by = address.choose(
        c6.selectbox,
        "colour",
        "tr_colour",
        list(style.COLOUR_BY),
        "run",
        label="Colour",
        format_func=style.COLOUR_BY.get,
        disabled=group != "none",
        help="Each run its own colour (runs of one regime and seed stay apart), or the regime's colour "
        "on every page with a dash a seed.",
    )
    smoothing = address.bound(
        c4.slider,
        "smooth",
        "tr_smoothing",
        0.6,
        parse=address.number_in(0.0, 0.99),
        label="Smoothing",
        min_value=0.0,
        max_value=0.99,
        step=0.01,
        help=help_text("smoothing"),
    )
    robust = address.bound(
        c5.toggle,
        "outliers",
        "tr_robust",
        True,
        parse=address.flag,
        dump=address.flag_text,
        label="ignore outliers",
        help="Values more than 3 interquartile ranges beyond the middle half of those shown (the first "
        "losses, about 115 nats, would flatten every curve) do not set the y range; the lines run beyond it.",
    )
    log_y = address.bound(
        c5.toggle, "logy", "tr_log_y", False, parse=address.flag, dump=address.flag_text, label="log y"
    )
    frame = cache.curves(root, keys, session.tokens(keys), tuple(scalars))
    if frame.empty or not scalars:
        st.info("No scalars logged yet by these runs: they appear here once the first step is logged.")
        return
    xs = frame[x].to_numpy(dtype=np.float64)
    xs = xs[np.isfinite(xs)]
    if xs.size == 0:
        st.info(f"These runs logged no step time, so there is no {cfig.X_NAMES[x]} axis: pick step.")
        return
    lo, hi = float(xs.min()), float(xs.max())
    integral = x in ("step", "tokens")  # whole steps and tokens ("128 – 247104", never "128.00 – 247104.00")
    cast = int if integral else float
    full = (cast(lo), cast(hi))
    x_range = full
    if st.session_state.get("tr_range_axis") != x:  # another x axis: a kept range means nothing there
        st.session_state.pop(RANGE_KEY, None)
        st.session_state.pop(address.KEEP + RANGE_KEY, None)
        st.session_state.pop(RANGE_USER, None)
        st.session_state["tr_range_axis"] = x
    if hi > lo:
        in_range = address.range_in(lo, hi, cast)
        _follow_unless_chosen(full, in_range)
        x_range = address.bound(
            st.slider,
            "range",
            RANGE_KEY,
            full,
            parse=in_range,
            dump=address.range_text,
            fix=_clip(lo, hi, cast),
            label=f"{cfig.X_NAMES[x]} range (every chart; or draw a box on a chart)",
            min_value=full[0],
            max_value=full[1],
            format="%d" if integral else "%.1f",
            on_change=_slider_moved,
        )
    groups = short = None
    if group != "none":  # runs of different models, T or windows are never averaged together
        manifests = {k: cache.manifest(root, k, session.token(k)) for k in keys}
        groups = setup_groups(manifests, group)
        short = group_labels(manifests, groups, group)  # the legend's names; the full ones in the hover and table
    for name in scalars:
        fig = cfig.curves_figure(
            frame,
            name,
            x=x,
            smoothing=smoothing,
            groups=groups,
            group_by=None if group == "none" else group,
            band=band,
            robust=robust,
            log_y=log_y,
            x_range=None if x_range == full else x_range,
            color_by=colour_by,
            title=f"{scalar_words(name)} against {cfig.X_NAMES[x]}",  # words; the y axis names the tag
            labels=short,
        )
        chart(
            fig,
            key=f"tr_fig_{name}",
            name=f"{name}-{x}",
            # grouped: per group and x the mean, the band's edges and the runs behind it; else each run's series
            data=cfig.grouped_frame(fig, name, x) if groups is not None else frame[frame["name"] == name],
            on_box=_set_range,
        )
    notes = [
        f"Smoothing {smoothing:.2f}: TensorBoard's debiased exponential moving average, raw lines faint behind"
        if smoothing > 0
        else "No smoothing",
        "lines binned to at most 1,000 points",
        "validation losses are points, never smoothed",
    ]
    if groups is not None:
        rows = group_rows(groups, short)
        notes.append(
            f"{len(rows)} groups by {group} (each one's runs and settings: the table below); "
            f"band: {curve_stats.BAND_NAMES[band]}, clipped to the values each scalar can take"
        )
        few = [r["group"] for r in rows if 1 < r["runs"] < curve_stats.FEW_RUNS]
        # a few groups by name; many by count (the table says which): never a paragraph of names
        few_text = "; ".join(few) if len(few) <= 4 else f"{len(few)} groups (their runs: the table below)"
        if few and band not in curve_stats.ESTIMATED_BANDS:  # min-max shows the runs themselves: said in a word
            notes.append(f"fewer than {curve_stats.FEW_RUNS} runs in {few_text}: their band is those runs")
        if band in curve_stats.ESTIMATED_BANDS and few:
            st.info(
                plain(
                    f"{len(few)} group(s) hold fewer than {curve_stats.FEW_RUNS} runs "
                    + (f"({'; '.join(few)})" if len(few) <= 4 else "(the table below names them)")
                    + f": a {curve_stats.BAND_NAMES[band]} band from 2 runs says little (at n = 2 a 95% interval is "
                    "12.7 standard errors wide). Min-max shows the runs themselves."
                ),
                icon=":material/info:",
            )
        with st.expander(f"The {len(rows)} groups: runs and settings", expanded=len(rows) <= 3):
            show_table(pd.DataFrame(rows), hide_index=True, width="stretch", key="tr_groups")
    st.caption(plain("; ".join(notes) + "."))
    st.caption(
        "Training loss is the loss of one logged training batch with dropout on, so it sits above the "
        "validation loss (held-out batches, no dropout); compare runs on validation loss."
    )
    data_downloads(frame, f"training-{'-'.join(scalars)}", key="tr_data")
    with st.expander("These charts from the command line"):
        st.code(
            figure_command(root, keys, scalars, x, group, band, smoothing, robust, log_y, colour_by), language="bash"
        )


def figure_command(root, keys, scalars, x, group, band, smoothing, robust, log_y, colour_by="run") -> str:
    """The ``aah-viz figure`` commands that write the charts shown, one file a scalar (what is on screen:
    the x axis, grouping, band, smoothing, robust y, log y and the runs' colours)."""
    runs = " ".join(shlex.quote(str(Path(root) / k)) for k in keys)
    opts = f"x={x},band={band},smoothing={smoothing:g},robust={str(robust).lower()},log_y={str(log_y).lower()}"
    if group != "none":
        opts += f",group={group}"
    elif colour_by != "run":
        opts += f",color_by={colour_by}"
    return "\n".join(
        f"aah-viz figure {runs} --kind curves --opt {shlex.quote(f'scalar={name},{opts}')} "
        f"--out {shlex.quote(name.replace('/', '-') + '.pdf')}"
        for name in scalars
    )


def _clip(lo: float, hi: float, cast):
    """A kept range made to fit the current data (another x axis, a run that grew)."""

    def fix(value):
        a, b = (cast(v) for v in value)
        a, b = max(cast(lo), a), min(cast(hi), b)
        if not a < b:
            raise ValueError(value)
        return (a, b)

    return fix


if __name__ == "__main__":
    render()
