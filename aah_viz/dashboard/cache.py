"""Cached reads for the pages: ``st.cache_data`` over the pure data functions.

Every function takes the logs root, a run key (or a tuple of keys) and the refresh token, so a
refresh (new token) rereads everything. Results are small: the data functions reduce a run to
one step, one layer, sampled or binned steps before returning.
"""

from __future__ import annotations

import atexit
import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from aah_viz.analysis import cluster_validity, manifest_fields, queries
from aah_viz.analysis import stability as stability_stats
from aah_viz.analysis.windows import run_bucket_fractions
from aah_viz.errors import AAHVizError
from aah_viz.figures import curves as curve_figs
from aah_viz.figures import data
from aah_viz.figures import stability as stability_figs
from aah_viz.figures import validity as validity_figs
from aah_viz.figures import windows as window_figs
from aah_viz.runlog import discover_runs, load_run, resolve_under, run_summary
from aah_viz.runlog.damage import damage_warnings
from aah_viz.runlog.reader import check_shape
from aah_viz.schema import STATUS_IMPORTED


def this_script_run() -> dict:
    """A dict that lives for one script run (a page drawn, a fragment rerun) of this session: what a
    run of the page reads several times (each run's stamp, the overviews, an opened run) is taken once per
    run, and a new run of the script takes it afresh. Outside a script run (tests of the pure parts) a new
    dict."""
    ctx = get_script_run_ctx(suppress_warning=True)
    marker = getattr(ctx, "parallel_coordinator", None)  # a new object at every ScriptRunContext.reset
    if marker is None:
        return {}
    kept = getattr(ctx, "_aah_viz_script_run", None)
    if kept is None or kept[0] is not marker:
        kept = (marker, {})
        ctx._aah_viz_script_run = kept
    return kept[1]


def open_run(root: str, key: str):
    """The run, opened once per script run (one snapshot: its listings and segment footers read once however
    many of the page's cached reads miss), reading its segments' step bounds from its summary: a read of one
    step or a few opens the segments holding them, not every footer of a long run."""
    opened = this_script_run().setdefault("runs", {})
    run = opened.get((root, key))
    if run is None:
        run = opened[(root, key)] = run_summary.indexed(load_run(resolve_under(root, key)))
    return run


@st.cache_data(show_spinner=False, max_entries=8)
def discover(root: str, token: int, folders_stamp: int = 0) -> tuple[list[str], list[str]]:
    """(the run keys under ``root``, the folders searched that are not runs: their modification times
    say when to look again)."""
    folders: list[Path] = []
    try:
        paths = discover_runs(root, folders)
    except AAHVizError:
        return [], [root]
    base = Path(root).resolve()
    keys = []
    for p in paths:
        rel = Path(p).resolve().relative_to(base).as_posix()
        keys.append(rel if rel != "." else ".")
    return keys, [str(f) for f in folders] or [root]


@st.cache_data(show_spinner=False)
def overview(root: str, key: str, token: int) -> dict:
    """Run-table row, or ``{"error": message}`` when the run cannot be read (this run only)."""
    return _overview_row(root, key)


def _overview_row(root: str, key: str) -> dict:
    try:
        run = load_run(resolve_under(root, key), check=False)
        # from the summary beside the run when it is current, else computed from the tables; the shape check
        # from the summary's figures of the heads footers when it has them
        stored = run_summary.read(run.path)
        check_shape(run, run_summary.extent(stored))
        summary = stored if stored is not None else run_summary.compute(run, gradient=False)
        row = queries.run_overview(run, summary["final"], run_summary.last_scalar_step(summary))
        # a model probed or evaluated, not trained here (aah-viz probe --out on a Hugging Face model; evaluate,
        # profile or lens --out: a one-step run of another run or model folder): nothing to compare over training
        m = run.manifest
        row["probe_only"] = run.status == STATUS_IMPORTED or bool(m.get("probed_model") or m.get("evaluation_of"))
        row["warnings"] = list(run.warnings) + damage_warnings(run, run_summary.heads_bounds(summary))
        row["tables"] = run.tables()
        # None: read the table (older runs)
        row["validity_shares"] = run_summary.validity_shares(summary, row["tables"])
        row["manifest"] = dict(run.manifest)
        row["fields"] = manifest_fields.flat_fields(run.manifest)  # the Runs table's columns, once per run
        row["buckets"] = run_summary.buckets(summary)  # None: read the branch table (run_buckets)
        row["controller_grad"] = run_summary.controller_gradient(summary)  # None: read the scalars (controller_grad)
        return row
    except AAHVizError as err:
        return {"key": key, "error": str(err)}
    except Exception as err:  # noqa: BLE001 - a damaged run must not take the page down
        return {"key": key, "error": f"run {key} could not be read: {type(err).__name__}: {err}"}


@st.cache_resource(show_spinner=False)
def _overview_memo(root: str) -> dict[str, tuple[int, bytes]]:
    """run key -> (its token, its overview pickled): the overviews already computed, cleared with every cached
    resource. One dictionary rather than a cache entry per run: a thousand ``st.cache_data`` calls cost a
    quarter of a CPU second in hashing and storing alone. Pickled, so no caller shares a kept row."""
    return {}


@st.cache_data(show_spinner=False, max_entries=4)  # a live run's every flush makes a new one: keep few
def overviews(root: str, tokens: tuple[tuple[str, int], ...]) -> dict[str, dict]:
    """Every run's overview in one cache entry (a page of many runs makes one cache call, not one per run);
    keyed by each run's token, so a new or changed run recomputes only its own overview."""
    memo = _overview_memo(root)
    out = {}
    for key, token in tokens:
        kept = memo.get(key)
        if kept is not None and kept[0] == token:
            out[key] = pickle.loads(kept[1])
        else:
            out[key] = _overview_row(root, key)
            memo[key] = (token, pickle.dumps(out[key]))
    if len(memo) > 2 * len(tokens) + 64:  # runs deleted since: forget them
        for key in set(memo) - {key for key, _ in tokens}:
            memo.pop(key, None)
    return out


@st.cache_data(show_spinner=False)
def manifest(root: str, key: str, token: int) -> dict:
    o = overview(root, key, token)  # the run opened once for its row and its manifest (many runs: one open each)
    return dict(o["manifest"]) if "manifest" in o else dict(open_run(root, key).manifest)


@st.cache_data(show_spinner=False)
def tree_steps(root: str, key: str, token: int, layer: int):
    return queries.tree_steps(open_run(root, key), layer)


@st.cache_data(show_spinner=False)
def recorded_steps(root: str, key: str, token: int):
    """Steps to pick from where windows never change (no routing): segment boundaries, from the footers."""
    bounds = queries.segment_step_bounds(open_run(root, key), "heads")
    return np.unique(bounds.ravel()).astype(np.int64)


@st.cache_data(show_spinner="Reading the hierarchy ...", max_entries=256)
def hierarchy(root: str, key: str, token: int, layer: int, step: int | None) -> dict:
    steps = tree_steps(root, key, token, layer)  # the picker's, cached: not read again
    return data.hierarchy_data(open_run(root, key), layer, step, steps=steps)


@st.cache_data(show_spinner="Reading windows ...", max_entries=256)
def heatmap(root: str, key: str, token: int, step: int | None) -> dict:
    return data.window_heatmap_data(open_run(root, key), step)


@st.cache_data(show_spinner="Reading the timeline ...")
def timeline(root: str, key: str, token: int, layer: int) -> dict:
    return data.timeline_data(open_run(root, key), layer)


@st.cache_data(show_spinner=False)
def head_spans(root: str, key: str, token: int) -> pd.DataFrame:
    return data.head_spans_data(open_run(root, key))


@st.cache_data(show_spinner=False, max_entries=64)
def head_retrieval(root: str, key: str, token: int) -> dict:
    return data.head_retrieval_data(open_run(root, key))


@st.cache_data(show_spinner=False, max_entries=256)
def branch(root: str, key: str, token: int, step: int | None) -> dict:
    return data.branch_data(open_run(root, key), step)


@st.cache_data(show_spinner="Reading cost figures ...")
def cost(root: str, keys: tuple[str, ...], token: int) -> pd.DataFrame:
    return data.cost_table([open_run(root, k) for k in keys])


@st.cache_data(show_spinner="Reading coverage ...")
def coverage(root: str, keys: tuple[str, ...], token: int) -> pd.DataFrame:
    return data.coverage_data([open_run(root, k) for k in keys])


@st.cache_data(show_spinner="Reading coverage and cost ...")
def coverage_cost(root: str, keys: tuple[str, ...], token: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Coverage over training and the cost table from one read of each run's scalars."""
    return data.coverage_and_cost([open_run(root, k) for k in keys], keys=list(keys))


@st.cache_data(show_spinner=False)
def bucket_table(root: str, keys: tuple[str, ...], token: int) -> pd.DataFrame:
    return data.bucket_table([open_run(root, k) for k in keys], keys=list(keys))


@st.cache_data(show_spinner="Reading cluster validity ...")
def validity(root: str, key: str, token: int) -> dict:
    return data.validity_data(open_run(root, key))


@st.cache_data(show_spinner=False, max_entries=256)
def validity_at(root: str, key: str, token: int, layer: int, step: int) -> pd.DataFrame:
    """The level-0 partition's validity row of one layer at one routing update (the Hierarchy page's note)."""
    return queries.cluster_validity(open_run(root, key), step=step, layer=layer)


@st.cache_data(show_spinner="Comparing routing updates ...")
def stability(root: str, key: str, token: int) -> dict:
    return data.stability_data(open_run(root, key))


@st.cache_data(show_spinner=False)
def controller(root: str, key: str, token: int) -> dict:
    return data.controller_data(open_run(root, key))


# Figures of one run that depend on nothing else, built once per run and token and handed out as they are (a
# cached resource, not a copy): Plotly's subplots and traces cost a redraw more than reading the cached data.
# Shared objects: ``common.chart`` only reads them (a copy where it must change one), and so must every caller.
@st.cache_resource(show_spinner=False, max_entries=16)
def stability_figure(root: str, key: str, token: int):
    return stability_figs.stability_figure(stability(root, key, token)["updates"], "routing stability over training")


@st.cache_resource(show_spinner=False, max_entries=16)
def validity_figure(root: str, key: str, token: int) -> tuple:
    """(the cluster validity figure, the shares by layer) of the run's level-0 partitions (None, None: none)."""
    d = validity(root, key, token)
    if d["validity"].empty:
        return None, None
    fig = validity_figs.validity_figure(d["validity"], d["threshold"], "cluster validity over training")
    return fig, cluster_validity.shares_by_layer(d["validity"])


@st.cache_resource(show_spinner=False, max_entries=16)
def coverage_figure(root: str, keys: tuple[str, ...], token: int, warmup: int | None):
    """The Windows page's coverage over training of the runs ``keys`` (``token``: their tokens combined)."""
    coverage, _ = coverage_cost(root, keys, token)
    return window_figs.coverage_figure(coverage, "ACR, causal-pair coverage and realised work", warmup=warmup)


@st.cache_resource(show_spinner=False, max_entries=16)
def controller_figure(root: str, key: str, token: int):
    c = controller(root, key, token)
    title = "controller gradient norm, weight drift and decision margin"
    return stability_figs.controller_health_figure(c["series"], c["margins"], title)


@st.cache_data(show_spinner=False)
def stability_layers(root: str, key: str, token: int) -> pd.DataFrame:
    """Per layer: updates, mean ARI, switch shares (the page header's figure). From the per-update
    summaries' plain columns when the run has them (no per-head lists read), else as the Stability page."""
    run = open_run(root, key)
    if queries.has_summaries(run):
        updates = run.table("updates", columns=list(stability_stats.UPDATE_COLUMNS))
        return stability_stats.layer_summary(updates.sort_values(["layer", "step"], kind="stable"))
    return data.stability_data(run)["layers"]


@st.cache_data(show_spinner=False)
def controller_grad(root: str, key: str, token: int) -> tuple[int, int]:
    """(logged values, of them not zero) of the controller's gradient norm: all the page header needs (as
    ``run_summary.controller_gradient`` keeps it; this reads the scalars of a run whose summary does not)."""
    s = queries.scalar_frame(open_run(root, key), [run_summary.GRAD_SCALAR])
    values = s["value"].dropna()
    return len(values), int((values != 0).sum())


@st.cache_data(show_spinner=False)
def probe_tables(root: str, key: str, token: int) -> dict[str, pd.DataFrame]:
    return queries.probe_tables(open_run(root, key))


@st.cache_data(show_spinner=False)
def probe_points(root: str, key: str, token: int, probe: str, metric: str) -> pd.DataFrame:
    return data.probe_points(open_run(root, key), probe, metric)


@st.cache_data(show_spinner=False)
def run_buckets(root: str, key: str, token: int) -> dict[int, float]:
    """Share of (layer, head) slots at each candidate window at the run's last step."""
    kept = overview(root, key, token).get("buckets")  # from the run's summary
    if kept is not None:
        return dict(kept)
    run = open_run(root, key)
    shares = run_bucket_fractions(data.branch_data(run)["per_layer"])
    return {int(w): float(v) for w, v in shares.items()}


@st.cache_resource(show_spinner="Importing the reference's published results ...")
def reference_runs(reference_dir: str, stamp: float) -> tuple[str, list[str]]:
    """Import the reference CSVs once per process into a private folder; (folder, run keys)."""
    from aah_viz.importers import import_reference  # the importer (and the export package) load on first use only

    out = tempfile.mkdtemp(prefix="aah-viz-reference-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)  # a private copy: gone with the process
    written = list(import_reference(reference_dir, out, overwrite=True))
    base = Path(out).resolve()
    return out, [Path(p).resolve().relative_to(base).as_posix() for p in written]


def reference_stamp(reference_dir: str) -> float:
    """Newest modification time of the reference CSVs (a changed file triggers a new import)."""
    files = list(Path(reference_dir).glob("*.csv"))
    return max((f.stat().st_mtime for f in files), default=0.0)


@st.cache_data(show_spinner="Reading training curves ...")
def training(root: str, keys: tuple[str, ...], token: int) -> pd.DataFrame:
    return data.training_data([open_run(root, k) for k in keys])


@st.cache_data(show_spinner=False)
def update_steps(root: str, key: str, token: int, layer: int | None = None):
    """Sorted routing-update steps (of one layer, or of any layer); empty without routing."""
    ups = queries.update_steps(open_run(root, key))
    if layer is not None:
        ups = ups[ups["layer"] == int(layer)]
    return np.unique(ups["step"].to_numpy()).astype(np.int64)


@st.cache_data(show_spinner=False)
def scalar_names(root: str, key: str, token: int) -> list[str]:
    """The model-wide scalars the run logged."""
    return curve_figs.scalar_names(open_run(root, key))


@st.cache_data(show_spinner="Reading curves ...")
def curves(root: str, keys: tuple[str, ...], token: int, names: tuple[str, ...]) -> pd.DataFrame:
    return curve_figs.curve_data([open_run(root, k) for k in keys], names, keys=keys)


@st.cache_data(show_spinner=False)
def fields(root: str, key: str, token: int) -> dict:
    """The run's manifest as flat fields (``regime``, ``config.lr``, ...)."""
    return manifest_fields.flat_fields(manifest(root, key, token))
