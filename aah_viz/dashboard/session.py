"""Shared dashboard state in ``st.session_state``: logs root, freshness stamps, selected runs, the selection.

Runs are named by their key: the run directory's path relative to the logs root, as found by
``discover_runs``. Only discovered keys are ever opened, and every key (also one from a query
parameter) goes through ``resolve_under``, so nothing outside the logs root can be read.

The selection (run, layer, head, routing update) is one per session and lives in the address too
(``?run=...&layer=...&head=...&step=...``): every page reads it and writes it back, so a page
switch keeps it and a copied address reopens the same view in a fresh tab.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import streamlit as st

from aah_viz.analysis.queries import nearest
from aah_viz.dashboard import cache, config
from aah_viz.dashboard import summary as run_summary
from aah_viz.dashboard.common import plain
from aah_viz.errors import AAHVizError, UnsafePathError
from aah_viz.runlog import resolve_under
from aah_viz.runlog.paths import manifest_path

LOGS_ROOT = "logs_root"
REFERENCE_DIR = "reference_dir"
TOKEN = "refresh_token"
SELECTED = "selected_runs"
CURRENT = "current_run"
SELECTION = "selection"  # {"run": key, "layer": int, "head": int | None, "step": int | None}
URL_SEEN = "selection_url_seen"  # the query parameters this session last read or wrote
LIVE = "live_refresh"
PAGE_TITLE = "page_title"  # the title of the page being drawn
SEL_PARAMS = ("run", "layer", "head", "step")
# regimes whose windows are chosen by a controller, in the order a default run is picked
ADAPTIVE_FIRST = ("full_adaptive", "deep_practical_reuse", "shallow_freeze", "independent_scoring")


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


def token(key: str | None = None) -> int:
    """Cache token: the refresh counter, plus the run's file stamp for one run (so new segments of a
    live run and its new status are read without a refresh, and a fresh tab is never stale)."""
    base = int(st.session_state.get(TOKEN, 0))
    if key is None:
        return base
    return hash((base, run_stamp(logs_root(), key))) & ((1 << 62) - 1)


def tokens(keys) -> int:
    return hash(tuple(token(k) for k in keys)) & ((1 << 62) - 1)


def refresh() -> None:
    """Forget every cached read, so live runs show their newest segments and status."""
    st.cache_data.clear()
    st.session_state[TOKEN] = token() + 1


def all_keys() -> list[str]:
    # discovery is cheap but walks the tree: bucket it in 5-second slices so new runs appear on their own
    return cache.discover(logs_root(), token(), int(time.time() // 5))


def overviews() -> dict[str, dict]:
    return {key: cache.overview(logs_root(), key, token(key)) for key in all_keys()}


def good_keys() -> list[str]:
    return [k for k, o in overviews().items() if "error" not in o]


def check_key(key: str) -> str:
    """Accept a run key only if it resolves under the logs root and names a discovered run."""
    resolve_under(logs_root(), key)  # raises UnsafePathError for absolute paths and escapes
    if key not in all_keys():
        cache.discover.clear()  # a run newer than the discovery cached for this 5-second slice: look again
    if key not in all_keys():
        raise UnsafePathError(f"no run {key!r} under {logs_root()}; pick one of the runs listed on the Runs page")
    return key


SEL_PARAM = "sel"  # the runs ticked on the Runs page, in the address (joined by "~"); absent: every run
SEL_SEEN = "selected_runs_url_seen"


def _selection_address(good: list[str]) -> None:
    """The ticked runs travel in the address: a new ``sel=`` (a pasted link, a fresh tab) becomes the
    session's selection (unknown names dropped), and the session's selection is written back (a
    sidebar page switch drops the query). Every run selected, or none ticked, writes nothing."""
    text = st.query_params.get(SEL_PARAM)
    if text is not None and text != st.session_state.get(SEL_SEEN):
        chosen = [k for k in str(text).split("~") if k in good]
        if chosen:
            st.session_state[SELECTED] = chosen
    chosen = [k for k in good if k in set(st.session_state.get(SELECTED, good))]
    want = "~".join(chosen) if chosen and len(chosen) < len(good) else None
    if want is None:
        if SEL_PARAM in st.query_params:
            del st.query_params[SEL_PARAM]
    elif st.query_params.get(SEL_PARAM) != want:
        st.query_params[SEL_PARAM] = want
    st.session_state[SEL_SEEN] = want


def ticked() -> bool:
    """Whether the user chose some runs (not every one) on the Runs page or through the address."""
    good = good_keys()
    chosen = [k for k in st.session_state.get(SELECTED, good) if k in good]
    return 0 < len(chosen) < len(good)


def selected_keys() -> list[str]:
    good = good_keys()
    _selection_address(good)
    chosen = [k for k in st.session_state.get(SELECTED, good) if k in good]
    return chosen or good


def trained_keys(keys) -> tuple[list[str], list[str]]:
    """(runs with training to compare, probe-only runs): a probed model that was not trained here has
    no curves, windows of its own or regime, so pages that compare runs leave it out and say so."""
    views = overviews()
    kept = [k for k in keys if not views.get(k, {}).get("probe_only")]
    return kept, [k for k in keys if k not in kept]


def say_left_out(keys, why: str) -> None:
    """One caption naming the selected runs a page does not show, and why."""
    if keys:
        st.caption(f"Left out: {plain(', '.join(keys))} ({why}).")


def set_selected(keys: list[str]) -> None:
    st.session_state[SELECTED] = list(keys)


def label(key: str) -> str:
    o = cache.overview(logs_root(), key, token(key))
    if "error" in o:
        return f"{key} (unreadable)"
    seed = "" if o.get("seed") is None else f" s{o['seed']}"
    return f"{o.get('regime')}{seed} · {key}"


def default_run(keys: list[str]) -> str | None:
    """An adaptive run if there is one (the regimes whose routing there is to look at), else the first."""
    if not keys:
        return None
    views = overviews()
    for regime in ADAPTIVE_FIRST:
        for k in keys:
            if views.get(k, {}).get("regime") == regime:
                return k
    return keys[0]


# ---- the selection: one per session, mirrored in the address -------------------------------------


def selection() -> dict:
    return st.session_state.setdefault(SELECTION, {"run": None, "layer": 0, "head": None, "step": None})


def select(**values) -> None:
    """Change parts of the selection (run, layer, head, step); the address follows at the page's end."""
    sel = selection()
    for name, value in values.items():
        if name not in SEL_PARAMS:
            raise KeyError(name)
        sel[name] = value
    if "run" in values:
        st.session_state[CURRENT] = values["run"]


def head_clicked(points: list[dict]) -> None:
    """A click on a head cell (customdata [layer, head, ...]) selects that layer and head."""
    for p in points:
        cd = p.get("customdata")
        if isinstance(cd, dict):  # a numpy customdata row arrives as {"0": layer, "1": head, ...}
            cd = [cd.get("0"), cd.get("1")]
        if isinstance(cd, (list, tuple)) and len(cd) >= 2 and cd[0] is not None and cd[1] is not None:
            layer, head = int(cd[0]), int(cd[1])
            if layer >= 0 and head >= 0:  # group nodes of the hierarchy carry -1
                select(layer=layer, head=head)
                return


def _int_or_none(text) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def read_url() -> None:
    """Take the selection from the address when the address says something this session has not seen
    (a fresh tab, a pasted link); a sidebar page switch drops the parameters and keeps the session's."""
    params = {p: st.query_params.get(p) for p in SEL_PARAMS}
    params = {p: v for p, v in params.items() if v not in (None, "")}
    seen = st.session_state.get(URL_SEEN, {})
    fresh = {p: v for p, v in params.items() if seen.get(p) != v}
    if not fresh:
        return
    sel = selection()
    if "run" in fresh:
        try:
            sel["run"] = check_key(str(fresh["run"]))
            st.session_state[CURRENT] = sel["run"]
        except AAHVizError as err:
            st.error(plain(f"query parameter run={fresh['run']!r} ignored: {err}"))
    for p in ("layer", "step"):
        if p in fresh and _int_or_none(fresh[p]) is not None:
            sel[p] = _int_or_none(fresh[p])
    if "head" in fresh:
        sel["head"] = _int_or_none(fresh["head"])
    st.session_state[URL_SEEN] = {**seen, **params}


def write_url() -> None:
    """Mirror the selection into the address (only what changed, so the browser history stays short)."""
    sel = selection()
    want = {p: ("" if sel.get(p) is None else str(sel[p])) for p in SEL_PARAMS}
    for p, v in want.items():
        if v == "":
            if p in st.query_params:
                del st.query_params[p]
        elif st.query_params.get(p) != v:
            st.query_params[p] = v
    st.session_state[URL_SEEN] = {p: v for p, v in want.items() if v}


def _on_widget(name: str, widget_key: str, convert=lambda v: v) -> None:
    select(**{name: convert(st.session_state[widget_key])})


def pick_run(where=None) -> str | None:
    """A run picker over the selected runs; the choice is shared by every page and kept in the address."""
    keys = selected_keys()
    if not keys:
        root = plain(logs_root())
        st.info(
            f"No readable run under {root}. Record one with aah-viz train --out {root}/NAME "
            "or point the dashboard elsewhere with `aah-viz dashboard --logs DIR`."
        )
        return None
    read_url()
    sel = selection()
    wanted = sel.get("run")
    if wanted not in keys:
        if wanted in good_keys():  # named by the address but not among the selected runs: show it anyway
            keys = [wanted, *keys]
        else:
            wanted = default_run(keys)
    select(run=wanted)
    target = where or st
    labels = {k: label(k) for k in keys}  # computed now: format_func may be called outside the script run
    st.session_state["run_picker"] = wanted
    key = target.selectbox(
        "Run",
        keys,
        format_func=labels.__getitem__,
        key="run_picker",
        on_change=_on_widget,
        args=("run", "run_picker"),
    )
    select(run=key)
    write_url()
    return key


def pick_layer(n_layer: int, where=None) -> int:
    """The selected layer (shared by every page), with a picker."""
    n = max(1, int(n_layer or 1))
    sel = selection()
    layer = sel.get("layer") if isinstance(sel.get("layer"), int) and 0 <= sel["layer"] < n else 0
    select(layer=layer)
    st.session_state["layer_picker"] = layer
    target = where or st
    out = int(
        target.selectbox(
            "Layer", list(range(n)), key="layer_picker", on_change=_on_widget, args=("layer", "layer_picker", int)
        )
    )
    select(layer=out)
    write_url()
    return out


def pick_head(n_head: int, where=None) -> int | None:
    """The selected head (or none), with a picker; a click on a head in a heatmap sets it too."""
    n = max(1, int(n_head or 1))
    sel = selection()
    layer = sel.get("layer") or 0
    head = sel.get("head") if isinstance(sel.get("head"), int) and 0 <= sel["head"] < n else None
    select(head=head)
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
    select(head=out)
    write_url()
    return out


def pick_step(steps, label: str, where=None, help: str | None = None) -> int | None:
    """A slider over ``steps`` (routing updates): the selected step snaps to the nearest one."""
    steps = np.asarray(steps, dtype=np.int64)
    target = where or st
    if len(steps) == 0:
        return None
    sel = selection()
    wanted = sel.get("step")
    value = int(steps[-1]) if wanted is None else nearest(steps, int(wanted))
    select(step=value)
    if len(steps) == 1:
        target.caption(f"{label}: {value} (the only one recorded)")
        write_url()
        return value
    options = [int(s) for s in steps.tolist()]
    st.session_state["step_picker"] = value
    out = int(
        target.select_slider(
            label,
            options=options,
            key="step_picker",
            on_change=_on_widget,
            args=("step", "step_picker", int),
            help=help,
        )
    )
    select(step=out)
    write_url()
    return out


def show_run_warnings(key: str) -> None:
    o = cache.overview(logs_root(), key, token(key))
    for w in o.get("warnings", []):
        st.warning(plain(w))


# fn(keys) -> None: boxes about several runs at once (pages of several runs); other parts register
# theirs (the groups-in-doubt box of ``validity``) so this module need not import them
SELECTION_BANNERS: list = []


def register_selection_banner(fn):
    if fn not in SELECTION_BANNERS:
        SELECTION_BANNERS.append(fn)
    return fn


def show_selection_banners(keys) -> None:
    for banner in SELECTION_BANNERS:
        banner(list(keys))


def show_selection_warnings(keys) -> None:
    """Pages that read several runs: one box per damaged run, naming it, before any number of it; then
    the registered boxes about the runs (groups in doubt)."""
    for key in keys:
        found = cache.overview(logs_root(), key, token(key)).get("warnings", [])
        if found:
            st.warning(plain(f"run {key}: " + " ".join(found)))
    show_selection_banners(keys)


class Opened(tuple):
    """``(key, logs_root, cache_token, manifest)`` of the page's run (unpacks like a tuple)."""

    def __new__(cls, key, root, tok, manifest):
        return super().__new__(cls, (key, root, tok, manifest))

    key = property(lambda self: self[0])
    root = property(lambda self: self[1])
    token = property(lambda self: self[2])
    manifest = property(lambda self: self[3])


def open_run(title: str, summary: bool = True) -> Opened | None:
    """The page preamble: its title, the chosen run, the run's summary header and its warnings.

    Returns ``(key, logs_root, cache_token, manifest)``, or None when no run can be shown.
    """
    st.title(title)
    st.session_state[PAGE_TITLE] = title  # page-aware banners read it
    key = pick_run()
    if key is None:
        return None
    root, tok = logs_root(), token(key)
    manifest = cache.manifest(root, key, tok)
    if summary:
        run_summary.header(root, key, tok, manifest, page=title)
    show_run_warnings(key)
    return Opened(key, root, tok, manifest)
