"""Live refresh: while switched on, a small fragment checks every few seconds whether any run's files
changed (a new segment, a new status) or a run appeared, and reruns the page when so."""

from __future__ import annotations

import os

import streamlit as st

from aah_viz.dashboard import session
from aah_viz.schema import MANIFEST

INTERVAL_S = 3.0
SIGNATURE = "live_signature"
LIVE = "live_refresh"  # whether live refresh is on (kept across page switches)


def signature() -> tuple:
    """What changes when a run changes, in a few ``stat`` calls a run (an idle tab checks every few seconds):
    the full stamp of the runs still being written (a new segment), and for the others the times of the run's
    folder and manifest (a writer that opens a run again takes a lock file there and rewrites the manifest,
    a new table is a new folder). The page itself reads every run's full stamp whenever it draws."""
    root = session.logs_root()
    running = set(st.session_state.get(session.RUNNING, ()))
    return tuple((k, session.stamp(k) if k in running else quiet_stamp(root, k)) for k in session.all_keys())


def quiet_stamp(root: str, key: str) -> tuple[int, int]:
    base = os.path.join(root, key)
    try:
        return os.stat(base).st_mtime_ns, os.stat(os.path.join(base, MANIFEST)).st_mtime_ns
    except OSError:
        return -1, -1


def check() -> None:
    """One look of live refresh (every ``INTERVAL_S`` while it is on): rerun the page when a run changed."""
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
        st.fragment(run_every=INTERVAL_S)(check)()
    else:
        st.session_state.pop(SIGNATURE, None)
