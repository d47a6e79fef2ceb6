"""Probe and comparison tables into an existing run directory.

They go in as the rows of the probed step, replacing that step's earlier probe rows, through the
run log (:func:`aah_viz.runlog.rewrite.rewrite_step`): nothing here knows segments, locks or
generation records.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from aah_viz.runlog.rewrite import rewrite_step


def write_probe_tables(run_dir, tables: dict[str, pd.DataFrame], step: int) -> list[Path]:
    """Append each non-empty table as one atomic segment; then drop older probe segments of ``step``."""
    return rewrite_step(run_dir, tables, step, purpose="writing probe tables")
