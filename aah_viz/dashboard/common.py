"""Small helpers the pages share: error boxes, charts, step and layer pickers."""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

from aah_viz.errors import AAHVizError


def guarded(fn):
    """Run a page (or a section); a toolkit error becomes an error box instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AAHVizError as err:
            st.error(str(err))
        return None

    return wrapper


def chart(fig, key: str) -> None:
    # theme=None: the figure keeps its own template, so the page looks like the exported figure
    st.plotly_chart(fig, key=key, width="stretch", theme=None, config={"displaylogo": False})


def layer_picker(n_layer: int, key: str, where=None, label: str = "Layer") -> int:
    target = where or st
    return int(target.selectbox(label, list(range(int(n_layer or 1))), key=key))


def step_slider(steps: np.ndarray, key: str, label: str, where=None, default: int | None = None) -> int | None:
    """A slider over recorded steps (the values themselves, so it only lands on real steps)."""
    target = where or st
    steps = [int(s) for s in np.asarray(steps).tolist()]
    if not steps:
        return None
    if len(steps) == 1:
        target.caption(f"{label}: {steps[0]} (the only one recorded)")
        return steps[0]
    value = st.session_state.get(key)
    if value not in steps:
        value = default if default in steps else steps[-1]
        st.session_state[key] = value
    return int(target.select_slider(label, options=steps, key=key))
