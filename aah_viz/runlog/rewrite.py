"""Rows of one step added to a finished run, replacing that step's earlier rows: the probe segments.

Probing (``aah-viz probe``, ``aah-viz compare``) happens on a finished (or interrupted) run, so its
tables are added without reopening the run writer: ``<run>/<table>/part-probe-<n>.parquet`` in the
contract's column types, under the run's writer lock (a run still being trained is refused).
Writing the same step again replaces that step's earlier rows in one generation
(``generations.replace_segments``): a reader sees the old rows or the new ones, never both;
segments that also hold other steps are rewritten without that step. Nothing else in the run is
touched.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aah_viz.errors import RunLogError
from aah_viz.runlog import generations, paths
from aah_viz.runlog.columns import rows_to_arrow
from aah_viz.runlog.lock import WriterLock
from aah_viz.schema import MANIFEST

PROBE_SEGMENT = re.compile(r"^part-probe-(\d+)\.parquet$")


def _next_number(directory: Path) -> int:
    """After every probe segment on disk or in the generation record: names are never reused."""
    names = [p.name for p in directory.glob("part-probe-*.parquet")] + sorted(generations.recorded_names(directory))
    numbers = [int(m.group(1)) for name in names if (m := PROBE_SEGMENT.match(name))]
    return max(numbers, default=0) + 1


def _without_step(segment: Path, step: int):
    """(holds ``step``, the segment's rows of other steps or None); unreadable segments are left alone."""
    try:
        table = pq.read_table(segment)
    except Exception:  # noqa: BLE001 - an unreadable segment is left alone, never deleted here
        return False, None
    if "step" not in table.column_names:
        return False, None
    is_step = pc.equal(table.column("step"), int(step))
    if not pc.any(is_step).as_py():
        return False, None
    rest = table.filter(pc.invert(is_step))
    return True, (rest if rest.num_rows else None)


def rewrite_step(
    run_dir: str | os.PathLike,
    tables: dict[str, pd.DataFrame],
    step: int,
    *,
    purpose: str,
    clear_empty: bool = False,
) -> list[Path]:
    """Add each non-empty table's rows as one atomic segment, replacing the table's earlier rows of
    ``step``; with ``clear_empty``, an empty table given removes that step's earlier rows (the tables
    written together describe one result, so none may keep rows of an earlier one). ``purpose`` says
    who holds the lock meanwhile (a refused writer is told). Returns the new segments, one per table
    written."""
    run_dir = Path(run_dir)
    if not paths.is_run(run_dir):
        raise RunLogError(f"{run_dir} is not a run directory (no {MANIFEST}); give a run written by aah-viz train")
    arrow = {}
    for name, frame in tables.items():  # convert everything first: a type error writes nothing
        paths.check_table_name(name)
        if frame is None or len(frame) == 0:
            if clear_empty and frame is not None and (run_dir / name).is_dir():
                arrow[name] = None
            continue
        arrow[name] = rows_to_arrow(name, frame)
    written = []
    with WriterLock.acquire(run_dir, purpose):
        for name, table in arrow.items():
            directory = run_dir / name
            directory.mkdir(parents=True, exist_ok=True)
            generations.finish(directory)
            number = _next_number(directory)
            new, replaces = [], []
            for old in paths.list_segments(directory):
                holds, rest = _without_step(old, step)
                if holds:
                    replaces.append(old.name)
                    if rest is not None:  # the other steps' rows keep their place before the new ones
                        new.append((f"part-probe-{number:06d}.parquet", [rest]))
                        number += 1
            if table is None:  # cleared: that step's rows go, nothing new comes
                if replaces:
                    generations.replace_segments(directory, new, replaces)
                continue
            new.append((f"part-probe-{number:06d}.parquet", [table]))
            written += generations.replace_segments(directory, new, replaces)[-1:]
    return written
