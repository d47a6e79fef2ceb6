"""The run directory: writer, reader, validator (format: ``docs/log-format.md``).

``RunWriter`` writes atomic Parquet segments and the manifest; ``load_run`` reads a run, also one
still being written; ``validate_run`` lists what is wrong with one. No torch here.
"""

from aah_viz.runlog.columns import table_schema
from aah_viz.runlog.discovery import discover_runs, run_dirs
from aah_viz.runlog.manifest import make_manifest, read_manifest
from aah_viz.runlog.paths import resolve_under
from aah_viz.runlog.reader import Run, load_run
from aah_viz.runlog.validate import validate_run
from aah_viz.runlog.writer import RunWriter

__all__ = [
    "Run",
    "RunWriter",
    "discover_runs",
    "load_run",
    "make_manifest",
    "read_manifest",
    "run_dirs",
    "resolve_under",
    "table_schema",
    "validate_run",
]
