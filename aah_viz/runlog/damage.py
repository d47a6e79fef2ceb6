"""Lost data a reader must be told about, found cheaply enough to show on every dashboard page.

Set-aside segments (unreadable segments a resume moved out of the way), steps missing between
segments and steps held by two segments (duplicated rows), from the Parquet footers' statistics (no
row is read); and, for a failed run that a signal stopped, where it stopped and how to resume it.
``validate`` makes the full check.
"""

from __future__ import annotations

import numpy as np

from aah_viz.analysis.queries import last_step_of, segment_step_bounds
from aah_viz.runlog.validate import set_aside_problems, stop_notice
from aah_viz.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_STOPPED


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


def repeated_step_ranges(bounds: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive step ranges held by more than one segment (the writer never puts a step in two segments
    of one table, so these are duplicated rows). ``bounds`` is (n, 2)."""
    repeats, covered = [], None
    for lo, hi in sorted((int(lo), int(hi)) for lo, hi in bounds):
        if covered is not None and lo <= covered:
            start, end = lo, min(hi, covered)
            if repeats and start <= repeats[-1][1] + 1:
                repeats[-1] = (repeats[-1][0], max(repeats[-1][1], end))
            else:
                repeats.append((start, end))
        covered = hi if covered is None else max(covered, hi)
    return repeats


def _shown(ranges: list[tuple[int, int]]) -> str:
    text = ", ".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in ranges[:5])
    return text + (f" and {len(ranges) - 5} more ranges" if len(ranges) > 5 else "")


def damage_warnings(run, bounds: np.ndarray | None = None) -> list[str]:
    """One line per kind of lost data in ``run`` (an opened ``Run``); empty when nothing is lost.
    ``bounds``: the ``heads`` segments' step bounds when the caller has them (the run's summary)."""
    notes = set_aside_problems(run.path, run.manifest)
    if run.manifest.get("imported"):
        return notes
    planned = run.manifest.get("steps")
    finished = run.manifest.get("status") == STATUS_FINISHED and isinstance(planned, int) and planned > 0
    if bounds is None:
        bounds = segment_step_bounds(run, "heads")
    bounds = np.asarray(bounds, dtype=np.int64).reshape(-1, 2)
    if run.manifest.get("status") in (STATUS_FAILED, STATUS_STOPPED):  # say why it ended early and how to go on
        last = int(bounds[:, 1].max()) if len(bounds) else last_step_of(run, "scalars")
        stopped = stop_notice(run.path, run.manifest, run.events("terminated"), last)
        notes += [stopped] if stopped else []
    gaps = missing_step_ranges(bounds, planned - 1 if finished else None)
    if gaps:
        count = sum(hi - lo + 1 for lo, hi in gaps)
        notes.append(f"heads: {count} step{'s' * (count > 1)} missing ({_shown(gaps)}): the charts skip them")
    repeats = repeated_step_ranges(bounds)
    if repeats:
        count = sum(hi - lo + 1 for lo, hi in repeats)
        notes.append(
            f"heads: {count} step{'s' * (count > 1)} recorded more than once ({_shown(repeats)}): duplicated rows "
            "that the charts count twice; aah-viz validate names the files"
        )
    return notes
