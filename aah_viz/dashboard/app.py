"""The routing dashboard's Streamlit entry point: ``aah-viz dashboard`` runs this file.

Page files are found beside this module, so the dashboard works the same from an installed wheel and
from a checkout (where the top-level ``app.py`` runs :func:`main` for ``streamlit run app.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

from aah_viz.dashboard import address, config, live, selection, session
from aah_viz.dashboard.common import plain
from aah_viz.dashboard.views import frontier
from aah_viz.errors import AAHVizError

PAGE_DIR = Path(__file__).resolve().parent
FIRST = "first_page"
# (page file under PAGE_DIR without .py, title, url path); the first is the default page, or Frontier
# when a frontier run is there
PAGES = [
    ("views/runs", "Runs", "runs"),
    ("views/frontier", "Frontier", "frontier"),
    ("views/training", "Training", "training"),
    ("views/hierarchy", "Hierarchy", "hierarchy"),
    ("views/windows", "Windows", "windows"),
    ("views/stability", "Stability", "stability"),
    ("views/probes", "Probes", "probes"),
    ("views/lens", "Lens", "lens"),
    ("views/compare", "Compare", "compare"),
    ("views/effects", "Effects", "effects"),
    ("views/export", "Export", "export"),
    ("glossary", "Glossary", "glossary"),
    ("guide", "Guide", "guide"),
]
# url path -> the page's file (what Streamlit's test runner switches to)
PAGE_FILES = {url: str(PAGE_DIR / f"{module}.py") for module, _, url in PAGES}


def first_page() -> str:
    """Frontier when a frontier run is under the logs root (a real model's result comes first), else
    Runs; decided once a session from the manifests alone, before any page draws."""
    if FIRST not in st.session_state:
        st.session_state[FIRST] = "views/frontier" if frontier.any_frontier(session.logs_root()) else PAGES[0][0]
    return st.session_state[FIRST]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    st.set_page_config(page_title="aah-viz: routing dashboard", layout="wide")
    try:
        session.init(config.logs_root(argv), config.reference_dir(argv))
    except AAHVizError as err:
        st.error(plain(err))
        st.stop()
    first = first_page()
    pages = {module: st.Page(PAGE_DIR / f"{module}.py", title=title, url_path=url) for module, title, url in PAGES}

    def start() -> None:
        """The address without a page: go to the first page, keeping the query. Every page keeps its own
        path whatever the logs root holds (``/runs`` is the Runs page with or without a frontier run)."""
        st.switch_page(pages[first], query_params=dict(st.query_params))

    start_page = st.Page(start, title="Start", url_path="start", default=True, visibility="hidden")
    page = st.navigation([start_page, *pages.values()])
    with st.sidebar:
        st.caption(f"Logs root: {plain(session.logs_root())}")
        live.controls()
        if st.button(
            "Refresh runs", key="refresh", help="Re-read every run (new segments of runs still being written, status)"
        ):
            session.refresh()
    if page is not start_page:  # the page it goes to reads the address (and says what it ignored)
        address.say_unknown(address.PAGE_PARAMS | set(selection.PARAMS) | {selection.TICKED_PARAM})
        selection.read_address()
    page.run()


if __name__ == "__main__":  # Streamlit runs the entry point as __main__
    main()
