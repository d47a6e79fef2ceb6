"""The routing dashboard: ``streamlit run app.py [-- --logs DIR --reference DIR]``.

Page wiring only; the pages live in ``aah_viz/dashboard/``.
"""

import sys

import streamlit as st

from aah_viz.dashboard import config, live, state

st.set_page_config(page_title="aah-viz: routing dashboard", layout="wide")
state.init(config.logs_root(sys.argv[1:]), config.reference_dir(sys.argv[1:]))

PAGES = [
    st.Page("aah_viz/dashboard/runs.py", title="Runs", url_path="runs", default=True),
    st.Page("aah_viz/dashboard/training.py", title="Training", url_path="training"),
    st.Page("aah_viz/dashboard/hierarchy.py", title="Hierarchy", url_path="hierarchy"),
    st.Page("aah_viz/dashboard/windows.py", title="Windows", url_path="windows"),
    st.Page("aah_viz/dashboard/stability.py", title="Stability", url_path="stability"),
    st.Page("aah_viz/dashboard/probes.py", title="Probes", url_path="probes"),
    st.Page("aah_viz/dashboard/compare.py", title="Compare", url_path="compare"),
    st.Page("aah_viz/dashboard/export.py", title="Export", url_path="export"),
    st.Page("aah_viz/dashboard/glossary.py", title="Glossary", url_path="glossary"),
]
page = st.navigation(PAGES)

with st.sidebar:
    st.caption(f"Logs root: `{state.logs_root()}`")
    live.controls()
    if st.button(
        "Refresh runs", key="refresh", help="Re-read every run (new segments of runs still being written, status)"
    ):
        state.refresh()

state.read_url()
page.run()
