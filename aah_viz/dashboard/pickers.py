"""The pickers of the selection (run, layer, head, routing update): each shows the shared choice,
changes it, and writes it to the address, so every page agrees on it."""

from __future__ import annotations

import numpy as np
import streamlit as st

from aah_viz.analysis.queries import nearest
from aah_viz.dashboard import address, selection, session
from aah_viz.dashboard.safe_text import plain

# regimes whose windows are chosen by a controller, in the order a default run is picked
ADAPTIVE_FIRST = ("full_adaptive", "deep_practical_reuse", "shallow_freeze", "independent_scoring")


def default_run(keys: list[str]) -> str | None:
    """An adaptive run if there is one (the regimes whose routing there is to look at), else the first."""
    if not keys:
        return None
    views = session.overviews()
    for regime in ADAPTIVE_FIRST:
        for k in keys:
            if views.get(k, {}).get("regime") == regime:
                return k
    return keys[0]


def _on_widget(name: str, widget_key: str, convert=lambda v: v) -> None:
    selection.select(**{name: convert(st.session_state[widget_key])})


def say_no_runs() -> None:
    """The one line of every page when the logs root holds no readable run (nothing to pick anywhere)."""
    root = plain(session.logs_root())
    st.info(
        f"No readable run under {root}. Record one with aah-viz train --out {root}/NAME "
        "or point the dashboard elsewhere with `aah-viz dashboard --logs DIR`."
    )


def pick_run(where=None) -> str | None:
    """A run picker over the selected runs; the choice is shared by every page and kept in the address."""
    keys = selection.selected_keys()
    if not keys:
        say_no_runs()
        return None
    selection.read_address()
    wanted = selection.current().get("run")
    if wanted not in keys:
        if wanted in session.good_keys():  # named by the address but not among the selected runs: show it anyway
            keys = [wanted, *keys]
        else:
            shown = default_run(keys)
            if wanted:  # a damaged run named by a link: said, not swapped for another silently
                _unreadable(wanted, shown)
            wanted = shown
    selection.select(run=wanted)
    target = where or st
    labels = {k: session.label(k) for k in keys}  # computed now: format_func may be called outside the script run
    st.session_state["run_picker"] = wanted
    key = target.selectbox(
        "Run",
        keys,
        format_func=labels.__getitem__,
        key="run_picker",
        on_change=_on_widget,
        args=("run", "run_picker"),
    )
    selection.select(run=key)
    selection.write_address()
    return key


def _unreadable(key: str, shown: str | None) -> None:
    why = (session.overviews().get(key) or {}).get("error") or "it is not among the readable runs"
    st.warning(plain(f"Run {key} cannot be read ({why}); showing {shown} instead. The Runs page lists what is wrong."))


def _not_here(what: str, value, shown) -> None:
    """A layer, head or step the run does not have (a pasted address, another run's choice): said, not
    corrected silently."""
    st.toast(
        plain(f"This run has no {what} {value}; showing {shown}."),
        icon=":material/link_off:",
        duration=address.NOTICE_S,
    )


def pick_layer(n_layer: int, where=None) -> int:
    """The selected layer (shared by every page), with a picker."""
    n = max(1, int(n_layer or 1))
    sel = selection.current()
    layer = sel.get("layer") if isinstance(sel.get("layer"), int) and 0 <= sel["layer"] < n else 0
    if isinstance(sel.get("layer"), int) and sel["layer"] != layer:
        _not_here("layer", sel["layer"], f"layer {layer} (its layers are 0-{n - 1})")
    selection.select(layer=layer)
    st.session_state["layer_picker"] = layer
    target = where or st
    out = int(
        target.selectbox(
            "Layer", list(range(n)), key="layer_picker", on_change=_on_widget, args=("layer", "layer_picker", int)
        )
    )
    selection.select(layer=out)
    selection.write_address()
    return out


def pick_head(n_head: int, where=None) -> int | None:
    """The selected head (or none), with a picker; a click on a head in a heatmap sets it too."""
    n = max(1, int(n_head or 1))
    sel = selection.current()
    layer = sel.get("layer") or 0
    head = sel.get("head") if isinstance(sel.get("head"), int) and 0 <= sel["head"] < n else None
    if isinstance(sel.get("head"), int) and head is None:
        _not_here("head", sel["head"], f"no head selected (its heads are 0-{n - 1})")
    selection.select(head=head)
    options = [-1, *range(n)]  # -1: no head selected (a None option would show as an empty box)
    st.session_state["head_picker"] = -1 if head is None else head
    target = where or st
    out = target.selectbox(
        "Head",
        options,
        format_func=lambda h: "none" if h < 0 else f"L{layer}H{h}",
        key="head_picker",
        on_change=_on_widget,
        args=("head", "head_picker", lambda h: None if h < 0 else int(h)),
        help="Click a head in any layer × head heatmap to select it.",
    )
    out = None if out < 0 else int(out)
    selection.select(head=out)
    selection.write_address()
    return out


FOLLOWED = "step_followed"  # the newest updates the step picker showed while it followed a growing run


def _on_step(widget_key: str) -> None:
    """The step slider reported a value. While following, a value the slider was only given earlier (an
    older newest update) is the browser echoing a draw that a rerun cut short, not a choice: seen live, it
    froze a growing run's Hierarchy at its first update. Ignored, the page keeps following."""
    value = int(st.session_state[widget_key])
    following = selection.current().get("step") is None
    if following and value in st.session_state.get(FOLLOWED, ()):
        return
    selection.select(step=value)


def pick_step(steps, label: str, where=None, help: str | None = None) -> int | None:
    """A slider over ``steps`` (routing updates): the selected step snaps to the nearest one. Until the user
    moves it (or the address names a step), it follows the newest update, so a live run's page shows its
    latest routing, and no step goes into the address."""
    steps = np.asarray(steps, dtype=np.int64)
    target = where or st
    if len(steps) == 0:
        return None
    wanted = selection.current().get("step")
    following = wanted is None
    value = int(steps[-1]) if following else nearest(steps, int(wanted))
    if not following and not int(steps[0]) <= int(wanted) <= int(steps[-1]):  # inside: snapped to an update
        _not_here("step", wanted, f"step {value} (its steps here run {int(steps[0])}-{int(steps[-1])})")
    if len(steps) == 1:
        target.caption(f"{label}: {value} (the only one recorded)")
    else:
        options = [int(s) for s in steps.tolist()]
        if following:  # the older newest updates: an echo of one of them is not the user's choice
            shown = st.session_state.setdefault(FOLLOWED, set())
            shown.intersection_update(options[:-1])
        st.session_state["step_picker"] = value
        target.select_slider(
            label,
            options=options,
            key="step_picker",
            on_change=_on_step,  # the user's choice: kept in the selection and the address
            args=("step_picker",),
            help=(help + " " if help else "") + "Follows the newest update until you move it.",
        )
    if not following:
        selection.select(step=value)
    elif len(steps) > 1:
        st.session_state.setdefault(FOLLOWED, set()).add(value)
    selection.write_address()
    return value
