"""The top of a page: its title, the run picker, the run's summary header and the warnings, with the
banners every page shows listed here (a new banner is one entry in a list below).

A page of one run starts with :func:`begin_run_page`; a page of several runs calls
:func:`show_selection_warnings` (or :func:`show_selection_banners`) before any number of them.
"""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import cache, pickers, session, summary, validity
from aah_viz.dashboard.safe_text import plain

# fn(root, key, token, manifest) -> (short, details) or None: in the summary header of a page of one run,
# after the zero-gradient note (summary.Banner)
RUN_BANNERS: tuple[summary.Banner, ...] = (validity.groups_in_doubt_banner,)
# fn(keys) -> None: boxes about several runs at once (Runs, Compare, Export)
SELECTION_BANNERS = (validity.groups_in_doubt_selection,)


class Opened(tuple):
    """``(key, logs_root, cache_token, manifest)`` of the page's run (unpacks like a tuple)."""

    def __new__(cls, key, root, tok, manifest):
        return super().__new__(cls, (key, root, tok, manifest))

    key = property(lambda self: self[0])
    root = property(lambda self: self[1])
    token = property(lambda self: self[2])
    manifest = property(lambda self: self[3])


def begin_run_page(title: str, summary_header: bool = True) -> Opened | None:
    """The head of a page of one run: its title, the chosen run, the run's summary header and its
    warnings. Returns ``(key, logs_root, cache_token, manifest)``, or None when no run can be shown."""
    st.title(title)
    key = pickers.pick_run()
    if key is None:
        return None
    root, tok = session.logs_root(), session.token(key)
    manifest = cache.manifest(root, key, tok)
    if summary_header:
        summary.header(root, key, tok, manifest, page=title, banners=RUN_BANNERS)
    show_run_warnings(key)
    return Opened(key, root, tok, manifest)


def show_run_warnings(key: str) -> None:
    o = cache.overview(session.logs_root(), key, session.token(key))
    for w in o.get("warnings", []):
        st.warning(plain(w))


def show_selection_banners(keys) -> None:
    for banner in SELECTION_BANNERS:
        banner(list(keys))


def show_selection_warnings(keys) -> None:
    """Pages that read several runs: one box per damaged run, naming it, before any number of it; then
    the boxes about the runs (groups in doubt)."""
    views = session.overviews()  # one cache call for all runs
    for key in keys:
        o = views.get(key) or cache.overview(session.logs_root(), key, session.token(key))
        found = o.get("warnings", [])
        if found:
            st.warning(plain(f"run {key}: " + " ".join(found)))
    show_selection_banners(keys)
