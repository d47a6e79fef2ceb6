"""The dashboard's session: the logs root, the runs under it, and the cache tokens that say when a
run's files changed.

Runs are named by their key: the run directory's path relative to the logs root, as found by
``discover_runs``. Only discovered keys are ever opened, and every key (also one from a query
parameter) goes through ``resolve_under``, so nothing outside the logs root can be read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import streamlit as st

from aah_viz.dashboard import cache, config
from aah_viz.errors import UnsafePathError
from aah_viz.runlog import resolve_under
from aah_viz.runlog.paths import manifest_path

LOGS_ROOT = "logs_root"
REFERENCE_DIR = "reference_dir"
TOKEN = "refresh_token"
RUNNING = "runs_running"  # the runs whose status was running when the page last drew


def init(logs_root: Path, reference_dir: Path | None) -> None:
    st.session_state[LOGS_ROOT] = str(logs_root)
    st.session_state[REFERENCE_DIR] = None if reference_dir is None else str(reference_dir)
    st.session_state.setdefault(TOKEN, 0)


def logs_root() -> str:
    if LOGS_ROOT not in st.session_state:  # a page opened on its own (tests): use the configured default
        init(config.logs_root(), config.reference_dir())
    return st.session_state[LOGS_ROOT]


def reference_dir() -> str | None:
    logs_root()
    return st.session_state.get(REFERENCE_DIR)


def run_stamp(root: str, key: str) -> int:
    """A number that changes whenever the run's files change: the modification times of its manifest
    and of each table folder (a new segment is renamed into its folder). A few ``stat`` calls."""
    base = Path(root) / key
    total = 0
    try:
        total += os.stat(manifest_path(base)).st_mtime_ns
        with os.scandir(base) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    total = (total * 31 + e.stat(follow_symlinks=False).st_mtime_ns) % (1 << 62)
    except OSError:
        return -1
    return total


this_script_run = cache.this_script_run  # a dict for one script run (the cache's opened runs live there too)


def stamp(key: str) -> int:
    """``run_stamp`` of one run, taken once per script run (pages ask for a run's token many times)."""
    memo = this_script_run()
    stamps = memo.setdefault("stamps", {})
    if key not in stamps:
        if "root" not in memo:
            memo["root"] = logs_root()
        stamps[key] = run_stamp(memo["root"], key)
    return stamps[key]


def token(key: str | None = None) -> int:
    """Cache token: the refresh counter, plus the run's file stamp for one run (so new segments of a
    live run and its new status are read without a refresh, and a fresh tab is never stale)."""
    memo = this_script_run()
    if "base" not in memo:
        memo["base"] = int(st.session_state.get(TOKEN, 0))
    if key is None:
        return memo["base"]
    return hash((memo["base"], stamp(key))) & ((1 << 62) - 1)


def tokens(keys) -> int:
    return hash(tuple(token(k) for k in keys)) & ((1 << 62) - 1)


def refresh() -> None:
    """Forget every cached read, so live runs show their newest segments and status."""
    st.cache_data.clear()
    st.session_state[TOKEN] = token() + 1
    this_script_run().clear()  # what this run read before is read again


# logs root -> the folders its last discovery searched (not runs): a new run changes one's modification time
_SEARCHED: dict[str, list[str]] = {}
RECHECK_S = 300  # and discovery runs again this often whatever the times say (a file system of coarse times)


def folders_stamp(root: str) -> int:
    """The modification times of the folders the last discovery searched: a few ``stat`` calls, where a
    discovery walks every run."""
    total = int(time.time() // RECHECK_S)
    for folder in _SEARCHED.get(root, [root]):
        try:
            total = hash((total, os.stat(folder).st_mtime_ns))
        except OSError:
            total = hash((total, -1))
    return total


def all_keys() -> list[str]:
    """The runs under the logs root; discovered again only when a folder holding runs changed (new runs
    appear on their own), once per script run at most."""
    memo = this_script_run()
    if "keys" not in memo:
        root = logs_root()
        keys, searched = cache.discover(root, token(), folders_stamp(root))
        _SEARCHED[root] = searched
        memo["keys"] = keys
    return memo["keys"]


def overviews() -> dict[str, dict]:
    """Every run's overview; one cache call per script run (the tokens of a thousand runs hash once)."""
    memo = this_script_run()
    if "overviews" not in memo:
        memo["overviews"] = cache.overviews(logs_root(), tuple((key, token(key)) for key in all_keys()))
        # live refresh follows these runs' every new segment, the others' folder and manifest only
        st.session_state[RUNNING] = [k for k, o in memo["overviews"].items() if o.get("status") == "running"]
    return memo["overviews"]


def good_keys() -> list[str]:
    return [k for k, o in overviews().items() if "error" not in o]


def check_key(key: str) -> str:
    """Accept a run key only if it resolves under the logs root and names a discovered run."""
    resolve_under(logs_root(), key)  # raises UnsafePathError for absolute paths and escapes
    if key not in all_keys():
        cache.discover.clear()  # a run newer than the discovery cached: look again
        this_script_run().pop("keys", None)
        this_script_run().pop("overviews", None)
    if key not in all_keys():
        raise UnsafePathError(f"no run {key!r} under {logs_root()}; pick one of the runs listed on the Runs page")
    return key


def trained_keys(keys) -> tuple[list[str], list[str]]:
    """(runs with training to compare, probe-only runs): a probed model that was not trained here has
    no curves, windows of its own or regime, so pages that compare runs leave it out and say so."""
    views = overviews()
    kept = [k for k in keys if not views.get(k, {}).get("probe_only")]
    return kept, [k for k in keys if k not in kept]


def label(key: str) -> str:
    o = overviews().get(key) or cache.overview(logs_root(), key, token(key))  # one cache call for all runs
    if "error" in o:
        return f"{key} (unreadable)"
    seed = "" if o.get("seed") is None else f" s{o['seed']}"
    return f"{o.get('regime')}{seed} · {key}"
