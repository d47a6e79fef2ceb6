"""Lost data a reader must be told about, found cheaply enough to show on every dashboard page.

Set-aside segments (unreadable segments a resume moved out of the way) and steps missing between
segments, from the Parquet footers' statistics (no row is read). ``validate`` makes the full check.
"""

from __future__ import annotations

import numpy as np

from aah_viz.analysis.queries import segment_step_bounds
from aah_viz.runlog.validate import set_aside_problems
from aah_viz.schema import STATUS_FINISHED


def missing_step_ranges(bounds: np.ndarray, planned_end: int | None = None) -> list[tuple[int, int]]:
    """Inclusive step ranges no segment covers: before the first, between segments, and, for a
    finished run (``planned_end`` = its last planned step), after the last. ``bounds`` is (n, 2)."""
    if len(bounds) == 0:
        return []
    gaps, covered = [], -1
    for lo, hi in sorted((int(lo), int(hi)) for lo, hi in bounds):
        if lo > covered + 1:
            gaps.append((covered + 1, lo - 1))
        covered = max(covered, hi)
    if planned_end is not None and planned_end > covered:
        gaps.append((covered + 1, planned_end))
    return gaps


def damage_warnings(run) -> list[str]:
    """One line per kind of lost data in ``run`` (an opened ``Run``); empty when nothing is lost."""
    notes = set_aside_problems(run.path, run.manifest)
    if run.manifest.get("imported"):
        return notes
    planned = run.manifest.get("steps")
    finished = run.manifest.get("status") == STATUS_FINISHED and isinstance(planned, int) and planned > 0
    gaps = missing_step_ranges(segment_step_bounds(run, "heads"), planned - 1 if finished else None)
    if gaps:
        count = sum(hi - lo + 1 for lo, hi in gaps)
        shown = ", ".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in gaps[:5])
        more = f" and {len(gaps) - 5} more ranges" if len(gaps) > 5 else ""
        notes.append(f"heads: {count} step{'s' * (count > 1)} missing ({shown}{more}): the charts skip them")
    return notes
