"""The run's summary beside its tables (``summary.json``): what a list of many runs shows of each run.

The Runs page shows every run's last step, final loss, val loss, ACR and causal-pair coverage, and
warns of steps missing between segments; reading those from the tables costs a scan of each run's
scalars and a footer per segment. The writer keeps them in one small file instead, rewritten at every
flush and at close. The file names the segments it was computed from (name and size, per table), so
a reader trusts it only while those are exactly the run's visible segments of ``heads`` and ``scalars``;
otherwise (an older run, a resume that cut segments, a compaction, a damaged file) the reader computes
the same summary from the tables. ``aah-viz validate`` checks that a summary it would trust agrees with
the tables.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis.queries import branch_at, file_step_bounds, scalar_frame
from aah_viz.analysis.windows import bucket_fractions, last_value, run_bucket_fractions
from aah_viz.errors import AAHVizError
from aah_viz.runlog import bounded_json, generations, paths
from aah_viz.runlog.reader import Run, load_run, shape_extent

SUMMARY_NAME = paths.SUMMARY  # "summary.json", a declared entry of the run
VERSION = 1
BOUND_TABLES = ("heads", "scalars", "branch")  # rows: [segment, size, smallest step, largest step]
VALIDITY = "cluster_validity"  # rows: [segment, size, partitions, forced, assessed, real]
TABLES = (*BOUND_TABLES, VALIDITY)
# rows: [segment, size, values logged, values not zero] of the ``scalars`` segments' controller gradient norm (every
# page's header says whether the controller learns: a scan of a long run's every scalar otherwise). Absent from
# summaries written before it: readers then read the scalars.
GRAD = "controller_grad"
GRAD_SCALAR = "controller_grad_norm"
FACT_ROWS = {**{t: t for t in TABLES}, GRAD: "scalars"}  # each list of rows and the table folder it lists
FINAL_SCALARS = ("loss", "val_loss", "acr", "acr_causal")
# rows: [segment, size, smallest step, largest step] of the tables a page reads a step or a few of (``steps``:
# the segments' index, with the bound tables': a routing update's tree opens the one segment holding it, not
# every footer of a long run). Absent from summaries written before it. Not part of what makes the summary
# current: a reader matches each segment by name and size (``Run.use_step_index``) and reads those it does not
# find.
STEPS = "steps"
STEP_TABLES = ("tree", "updates", "cluster_validity", "margins")
# a table of fewer segments is left out of the index: opening it whole is cheap, and a thousand short runs'
# summaries, each read at every cold page, stay small (its rows would add a tenth of a CPU second there)
STEP_INDEX_FROM = 16


def _listing(run_dir: Path, table: str) -> list[tuple[str, int]]:
    """(name, size) of the table's visible segments in write order: a listing and a ``stat`` each."""
    return generations.visible_sizes(paths.table_dir(run_dir, table))


def compute(run: Run, previous: dict | None = None, gradient: bool = True) -> dict:
    """The summary of ``run`` from its tables. Segment bounds already in ``previous`` (same name and size)
    are kept rather than read again: a writer's flush reads only its new segments' footers. ``gradient``:
    also the controller gradient's counts (a reader that needs only the Runs page's figures skips them)."""
    known: dict[tuple, list] = {}
    if previous is not None:
        for table in FACT_ROWS:
            for name, size, *facts in previous["tables"].get(table, []):
                known[(table, name, size)] = facts
        for table in STEP_TABLES:
            for name, size, *facts in previous.get(STEPS, {}).get(table, []):
                known[(STEPS, table, name, size)] = facts

    def rows(kind: str, table: str, folder: str, listing: list | None = None) -> list:
        out = []
        for name, size in _listing(run.path, folder) if listing is None else listing:
            facts = known.get((kind, name, size) if kind != STEPS else (STEPS, table, name, size))
            if facts is None:
                facts = _segment_facts(paths.table_dir(run.path, folder) / name, kind if kind != STEPS else STEPS)
            out.append([name, size, *facts])
        return out

    tables = {table: rows(table, table, FACT_ROWS[table]) for table in (FACT_ROWS if gradient else TABLES)}
    final = _final_values(run, tables["scalars"])
    return {
        "version": VERSION,
        "tables": tables,
        "final": {k: _finite(v) for k, v in final.items()},
        "buckets": _last_buckets(run, tables["branch"]),
        "extent": shape_extent(run),  # largest layer and head of the first and last heads segments
        STEPS: {table: rows(STEPS, table, table, listing) for table, listing in _long_tables(run.path).items()},
    }


def _long_tables(run_dir: Path) -> dict[str, list[tuple[str, int]]]:
    """The listings of the index's tables of ``STEP_INDEX_FROM`` segments or more."""
    listings = {table: _listing(run_dir, table) for table in STEP_TABLES}
    return {table: listing for table, listing in listings.items() if len(listing) >= STEP_INDEX_FROM}


def _tail(run: Run, table: str, rows: list, since: int | None, until: int | None = None) -> Run:
    """``run`` seen with only the segments of ``table`` whose steps reach ``since`` (and start by ``until``):
    a reader's filter on steps finds the same rows there, and a long run's flush reads a few footers."""
    view = Run(run.path, run.manifest, run.schema_version)
    keep = {
        name
        for name, _, lo, hi in rows
        if hi is not None and (since is None or hi >= since) and (until is None or lo <= until)
    }
    view._listing[table] = [seg for seg in run._listed(table) if seg.name in keep]
    return view


def _final_values(run: Run, scalar_rows: list) -> dict:
    """``queries.last_values(run, FINAL_SCALARS)`` (the same tail windows, growing tenfold until every name is
    found), reading only the segments that hold steps of the window."""
    ends = [hi for _, _, _, hi in scalar_rows if hi is not None]
    out = {n: None for n in FINAL_SCALARS}
    if not ends:
        return out
    last, window, missing = max(ends), 1000, list(FINAL_SCALARS)
    while missing:
        since = last - window
        since = since if since > 0 else None
        rows = scalar_frame(_tail(run, "scalars", scalar_rows, since), missing, since=since)  # every row >= since
        for name in list(missing):
            v = last_value(rows, name)
            if v is not None:
                out[name] = v
                missing.remove(name)
        if since is None:
            break
        window *= 10
    return out


def _last_buckets(run: Run, branch_rows: list) -> list | None:
    """[[window, share], ...]: each candidate window's share of the heads at the last ``branch`` step,
    averaged over layers (the Compare page's ``window_frac_<W>``); None without ``branch`` rows."""
    ends = [hi for _, _, _, hi in branch_rows if hi is not None]
    if not ends:
        return None
    last = max(ends)
    shares = run_bucket_fractions(
        bucket_fractions(branch_at(_tail(run, "branch", branch_rows, last, last), last), run.windows)
    )
    return [[int(w), float(v)] for w, v in shares.items()]


def _segment_facts(seg: Path, table: str) -> list:
    """What the summary keeps of one segment: its step bounds, or its level-0 partitions' counts
    (``analysis.cluster_validity.run_shares`` over the rows: forced splits, assessed, beating the null)."""
    if table == GRAD:
        return _gradient_facts(seg)
    if table != VALIDITY:  # a bound table or a table of the index (STEPS)
        bounds = file_step_bounds(seg)
        return list(bounds) if bounds is not None else [None, None]
    try:
        data = pq.read_table(seg)
    except Exception:  # noqa: BLE001 - an unreadable segment holds no rows for a reader
        return [0, 0, 0, 0]
    n = data.num_rows
    origin = data.column("origin").to_pandas() if "origin" in data.column_names else pd.Series([None] * n)
    verdict = data.column("verdict").to_pandas() if "verdict" in data.column_names else pd.Series([None] * n)
    assessed = verdict != cv.UNDEFINED  # as run_shares: a missing verdict counts as assessed, not real
    return [n, int((origin == cv.FORCED).sum()), int(assessed.sum()), int((verdict[assessed] == cv.REAL).sum())]


def _gradient_facts(seg: Path) -> list:
    """[values logged, values not zero] of the controller gradient norm in one ``scalars`` segment (every layer,
    as ``queries.scalar_frame``; a null value is not logged)."""
    try:
        data = pq.read_table(seg, columns=["name", "value"], filters=[("name", "==", GRAD_SCALAR)])
    except Exception:  # noqa: BLE001 - an unreadable segment holds no rows for a reader
        return [0, 0]
    values = data.column("value").to_pandas().dropna()
    return [int(len(values)), int((values != 0).sum())]


def _finite(value):
    return None if value is None or not math.isfinite(value) else float(value)


def write(run_dir: str | os.PathLike, previous: dict | None = None, durable: bool = True) -> dict:
    """Compute the summary of the run at ``run_dir`` from its tables and write it; returns it."""
    summary = compute(load_run(run_dir), previous)
    path = paths.run_entry(run_dir, SUMMARY_NAME)
    paths.atomic_write_bytes(path, json.dumps(summary, allow_nan=False).encode() + b"\n", durable=durable)
    return summary


def _well_formed(data) -> bool:
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return False
    tables, final = data.get("tables"), data.get("final")
    if not isinstance(tables, dict) or not isinstance(final, dict) or set(final) != set(FINAL_SCALARS):
        return False
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in final.values()):
        return False
    buckets = data.get("buckets")
    if buckets is not None and not (
        isinstance(buckets, list)
        and all(isinstance(b, list) and len(b) == 2 and type(b[0]) is int and type(b[1]) is float for b in buckets)
    ):
        return False
    extent = data.get("extent", {})  # absent in summaries written before it: the reader reads the footers
    if not isinstance(extent, dict) or not set(extent) <= {"layer", "head"}:
        return False
    if not all(type(v) is int for v in extent.values()):
        return False
    for table in FACT_ROWS:
        rows = tables.get(table)
        if table == GRAD and rows is None:  # written before it
            continue
        if not _rows_well_formed(rows, 4 if table in (*BOUND_TABLES, GRAD) else 6, table in BOUND_TABLES):
            return False
    index = data.get(STEPS, {})  # absent in summaries written before it
    return isinstance(index, dict) and all(
        table in STEP_TABLES and _rows_well_formed(rows, 4, True) for table, rows in index.items()
    )


def _rows_well_formed(rows, width: int, bounds: bool) -> bool:
    """``bounds``: rows of [segment, size, smallest step, largest step], both steps None for no rows."""
    if type(rows) is not list:
        return False
    for row in rows:  # type() rather than isinstance: a long run's summary has thousands of rows, read at every open
        if type(row) is not list or len(row) != width or type(row[0]) is not str or type(row[1]) is not int:
            return False
        if bounds:
            lo, hi = row[2], row[3]
            if not ((lo is None and hi is None) or (type(lo) is int and type(hi) is int)):
                return False
        elif any(type(v) is not int for v in row[2:]):
            return False
    return True


def _stored(run_dir: Path) -> dict | None:
    """The stored summary when it is well formed, current or not."""
    try:
        data = bounded_json.loads(bounded_json.read_regular(paths.run_entry(run_dir, SUMMARY_NAME)))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    except Exception:  # noqa: BLE001 - a refused entry (a link out, a hard link): not trusted
        return None
    return data if _well_formed(data) else None


def read(run_dir: str | os.PathLike) -> dict | None:
    """The stored summary when it is well formed and was computed from exactly the run's visible
    segments of ``heads`` and ``scalars`` now; None otherwise (the caller computes it)."""
    run_dir = Path(run_dir)
    data = _stored(run_dir)
    if data is None:
        return None
    listings = {}
    for table in FACT_ROWS:
        if table not in data["tables"]:
            continue
        folder = FACT_ROWS[table]
        if folder not in listings:
            listings[folder] = _listing(run_dir, folder)
        if [(row[0], row[1]) for row in data["tables"][table]] != listings[folder]:
            return None
    return data


def step_index(run_dir: str | os.PathLike) -> dict[str, list]:
    """``{table: [[segment, size, smallest step, largest step], ...]}`` as the stored summary keeps them (the
    bound tables and the index), for ``Run.use_step_index``: {} without a well-formed summary. Each row counts
    only for a segment of that name and size, so a summary behind the tables costs reads, never rows."""
    data = _stored(Path(run_dir))
    if data is None:
        return {}
    return {**{t: data["tables"][t] for t in BOUND_TABLES}, **data.get(STEPS, {})}


def indexed(run: Run) -> Run:
    """``run`` reading its segments' step bounds from its stored summary (when a read needs them)."""
    path = run.path
    return run.use_step_index(lambda: step_index(path))


def summary(run: Run) -> tuple[dict, bool]:
    """(the run's summary, whether it came from the stored file): read when current, else computed."""
    stored = read(run.path)
    if stored is not None:
        return stored, True
    return compute(run), False


def extent(data: dict | None) -> dict[str, int] | None:
    """The ``heads`` footers' largest layer and head (``reader.check_shape``); None when not kept."""
    return None if data is None or "extent" not in data else dict(data["extent"])


def heads_bounds(data: dict) -> list[tuple[int, int]]:
    """Smallest and largest step of each ``heads`` segment with rows (as ``segment_step_bounds``)."""
    return [(lo, hi) for _, _, lo, hi in data["tables"]["heads"] if lo is not None]


def validity_shares(data: dict, tables=None) -> dict | None:
    """``analysis.cluster_validity.run_shares`` of the run from its summary; None when the run has no
    ``cluster_validity`` segments but has a ``tree`` table (older runs: the caller reads the tree).
    ``tables``: the run's table names (a run with neither table, not routed, has no partitions)."""
    rows = data["tables"][VALIDITY]
    if not rows and tables is not None and not {"tree", VALIDITY} & set(tables):
        return {"partitions": 0, "forced_share": math.nan, "real_share": math.nan}
    if not rows:
        return None
    partitions, forced, assessed, real = (sum(r[i] for r in rows) for i in range(2, 6))
    if not partitions:
        return {"partitions": 0, "forced_share": math.nan, "real_share": math.nan}
    return {
        "partitions": partitions,
        "forced_share": forced / partitions,
        "real_share": real / assessed if assessed else math.nan,
    }


def buckets(data: dict) -> dict[int, float] | None:
    """{window: share} at the run's last ``branch`` step; None when the run has no ``branch`` rows."""
    return None if data.get("buckets") is None else {w: v for w, v in data["buckets"]}


def controller_gradient(data: dict) -> tuple[int, int] | None:
    """(values of the controller gradient norm logged, of them not zero); None when the summary does not keep
    them (written before it, or computed without them): the caller reads the scalars."""
    rows = data["tables"].get(GRAD)
    return None if rows is None else (sum(r[2] for r in rows), sum(r[3] for r in rows))


def last_scalar_step(data: dict) -> int | None:
    his = [hi for _, _, _, hi in data["tables"]["scalars"] if hi is not None]
    return max(his) if his else None


def problems(run_dir: str | os.PathLike) -> list[str]:
    """For ``validate``: a stored summary that readers would trust but that disagrees with the tables."""
    run_dir = Path(run_dir)
    stored = read(run_dir)
    if stored is None:
        return []
    try:
        computed = compute(load_run(run_dir))
    except AAHVizError:  # a run that cannot be opened: validate reports why
        return []
    if "extent" not in stored:  # written before the summary kept it
        computed.pop("extent")
    if GRAD not in stored["tables"]:  # the same
        computed["tables"].pop(GRAD)
    if STEPS not in stored:  # the same
        computed.pop(STEPS)
    if computed == stored:
        return []
    wrong = [k for k in ("tables", "final", "buckets", "extent", STEPS) if computed.get(k) != stored.get(k)]
    return [
        f"{SUMMARY_NAME} disagrees with the tables ({', '.join(wrong)}): the Runs page would show wrong "
        "figures; delete it (readers then compute the summary from the tables)"
    ]
