"""Live refresh: while switched on, a small fragment checks every few seconds whether any run's files
changed (a new segment, a new status) or a run appeared, and reruns the page when so."""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import session

INTERVAL_S = 3.0
SIGNATURE = "live_signature"
LIVE = "live_refresh"  # whether live refresh is on (kept across page switches)


def signature() -> tuple:
    return tuple((k, session.stamp(k)) for k in session.all_keys())  # fresh at every fragment run


def _watch() -> None:
    sig = signature()
    before = st.session_state.get(SIGNATURE)
    st.session_state[SIGNATURE] = sig
    if before is not None and before != sig:
        st.rerun()  # the whole page: new runs, new segments, new status


def controls() -> None:
    on = st.toggle(
        "Live refresh",
        value=st.session_state.get(LIVE, True),
        key="live_toggle",
        help=f"Check the runs every {INTERVAL_S:.0f} s and redraw when one changed (a running run's new steps, "
        "a finished status, a new run). Finished runs are read once and cached.",
    )
    st.session_state[LIVE] = on
    if on:
        st.fragment(run_every=INTERVAL_S)(_watch)()
    else:
        st.session_state.pop(SIGNATURE, None)
