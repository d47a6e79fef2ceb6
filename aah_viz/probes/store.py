"""Write probe and comparison tables into an existing run directory.

``RunWriter`` owns a run while it is being trained; probing happens later, on a finished (or
running) run, so these tables are added as their own segments without reopening the writer:
``<run>/<table>/part-probe-<n>.parquet``, each written atomically (temporary file, fsync,
rename) in the contract's column types. Re-probing the same step replaces that step's earlier
probe segments, after the new ones are safely on disk; nothing else in the run is touched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aah_viz.errors import RunLogError
from aah_viz.runlog import paths
from aah_viz.runlog.writer import rows_to_arrow, write_segment
from aah_viz.schema import MANIFEST

PROBE_SEGMENT = re.compile(r"^part-probe-(\d+)\.parquet$")


def _next_number(directory: Path) -> int:
    numbers = [int(m.group(1)) for p in directory.glob("part-probe-*.parquet") if (m := PROBE_SEGMENT.match(p.name))]
    return max(numbers, default=0) + 1


def _steps_of(segment: Path) -> set:
    try:
        table = pq.read_table(segment, columns=["step"])
    except Exception:  # noqa: BLE001 - an unreadable segment is left alone, never deleted here
        return {None}
    return set(pc.unique(table.column("step")).to_pylist())


def write_probe_tables(run_dir, tables: dict[str, pd.DataFrame], step: int) -> list[Path]:
    """Append each non-empty table as one atomic segment; then drop older probe segments of ``step``."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        raise RunLogError(f"{run_dir} is not a run directory (no {MANIFEST}); give a run written by aah-viz train")
    arrow = {}
    for name, frame in tables.items():  # convert everything first: a type error writes nothing
        paths.check_table_name(name)
        if frame is None or len(frame) == 0:
            continue
        arrow[name] = rows_to_arrow(name, frame)
    written = []
    for name, table in arrow.items():
        directory = run_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        previous = [p for p in directory.glob("part-probe-*.parquet") if PROBE_SEGMENT.match(p.name)]
        seg = write_segment(directory, f"part-probe-{_next_number(directory):06d}.parquet", table)
        written.append(seg)
        for old in previous:
            if _steps_of(old) == {int(step)}:
                old.unlink()
        paths.fsync_dir(directory)
    return written
