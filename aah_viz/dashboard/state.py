"""Shared dashboard state in ``st.session_state``: logs root, refresh token, selected runs.

Runs are named by their key: the run directory's path relative to the logs root, as found by
``discover_runs``. Only discovered keys are ever opened, and every key (also one from a query
parameter) goes through ``resolve_under``, so nothing outside the logs root can be read.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from aah_viz.dashboard import cache
from aah_viz.errors import AAHVizError, UnsafePathError
from aah_viz.runlog import resolve_under

LOGS_ROOT = "logs_root"
REFERENCE_DIR = "reference_dir"
TOKEN = "refresh_token"
SELECTED = "selected_runs"
CURRENT = "current_run"


def init(logs_root: Path, reference_dir: Path | None) -> None:
    st.session_state[LOGS_ROOT] = str(logs_root)
    st.session_state[REFERENCE_DIR] = None if reference_dir is None else str(reference_dir)
    st.session_state.setdefault(TOKEN, 0)


def logs_root() -> str:
    if LOGS_ROOT not in st.session_state:  # a page opened on its own (tests): use the configured default
        from aah_viz.dashboard import config

        init(config.logs_root(), config.reference_dir())
    return st.session_state[LOGS_ROOT]


def reference_dir() -> str | None:
    logs_root()
    return st.session_state.get(REFERENCE_DIR)


def token() -> int:
    return int(st.session_state.get(TOKEN, 0))


def refresh() -> None:
    """Forget every cached read, so live runs show their newest segments and status."""
    st.cache_data.clear()
    st.session_state[TOKEN] = token() + 1


def all_keys() -> list[str]:
    return cache.discover(logs_root(), token())


def overviews() -> dict[str, dict]:
    return {key: cache.overview(logs_root(), key, token()) for key in all_keys()}


def good_keys() -> list[str]:
    return [k for k, o in overviews().items() if "error" not in o]


def check_key(key: str) -> str:
    """Accept a run key only if it resolves under the logs root and names a discovered run."""
    resolve_under(logs_root(), key)  # raises UnsafePathError for absolute paths and escapes
    if key not in all_keys():
        raise UnsafePathError(f"no run {key!r} under {logs_root()}; pick one of the runs listed on the Runs page")
    return key


def selected_keys() -> list[str]:
    good = good_keys()
    chosen = [k for k in st.session_state.get(SELECTED, good) if k in good]
    return chosen or good


def set_selected(keys: list[str]) -> None:
    st.session_state[SELECTED] = list(keys)


def label(key: str) -> str:
    o = cache.overview(logs_root(), key, token())
    if "error" in o:
        return f"{key} (unreadable)"
    seed = "" if o.get("seed") is None else f" s{o['seed']}"
    return f"{o.get('regime')}{seed} · {key}"


def _from_query() -> str | None:
    value = st.query_params.get("run")
    if not value:
        return None
    try:
        return check_key(str(value))
    except AAHVizError as err:
        st.error(f"query parameter run={value!r} ignored: {err}")
        return None


def pick_run(where=None) -> str | None:
    """A run picker over the selected runs; the choice is shared by every page."""
    keys = selected_keys()
    if not keys:
        st.info(
            f"No readable run under {logs_root()}. Record one with `aah-viz train --out {logs_root()}/NAME` "
            "or point the dashboard elsewhere with `aah-viz dashboard --logs DIR`."
        )
        return None
    wanted = _from_query() or st.session_state.get(CURRENT)
    if wanted not in keys:
        wanted = keys[0]
    st.session_state[CURRENT] = wanted
    target = where or st
    labels = {k: label(k) for k in keys}  # computed now: format_func may be called outside the script run
    key = target.selectbox("Run", keys, index=keys.index(wanted), format_func=labels.__getitem__, key="run_picker")
    st.session_state[CURRENT] = key
    if st.query_params.get("run") != key:
        st.query_params["run"] = key  # the address names the run shown: a shareable link
    return key


def show_run_warnings(key: str) -> None:
    o = cache.overview(logs_root(), key, token())
    for w in o.get("warnings", []):
        st.warning(w)


def open_run(title: str) -> tuple[str, str, int, dict] | None:
    """The page preamble: its title, the chosen run, and that run's manifest and warnings.

    Returns ``(key, logs_root, cache_token, manifest)``, or None when no run can be shown.
    """
    st.title(title)
    key = pick_run()
    if key is None:
        return None
    root, tok = logs_root(), token()
    manifest = cache.manifest(root, key, tok)
    show_run_warnings(key)
    return key, root, tok, manifest
