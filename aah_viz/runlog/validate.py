"""``validate_run``: everything that can be wrong with a run directory, one message per problem.

Checks: the manifest (fields, types, ranges, schema version); files that lead outside the run
(links, generation records naming other files); what ``checkpoints/`` and ``adapters/`` hold
(``model_folders``: step files only); every segment readable; required
columns and their types (``schema.TABLES`` / ``schema.PROBE_TABLES``, ``group_l{i}`` in ``heads``);
stray files that would break ``pd.read_parquet(folder)``; segments set aside as unreadable and
half-done segment swaps; value ranges (layer, head, window index, window = windows[window_idx],
branch fractions) and the manifest's layer and head counts against ``heads``, its ``last_step``
against the tables; duplicated keys in ``heads``, ``branch`` and ``scalars``; model-wide scalars
with no finite value; missing steps (as ranges: nothing is allocated per planned step), steps
beyond the planned ones and empty tables of a finished run; ``events.detail`` as JSON objects; and
ACR scalars against what the ``heads`` table implies (method section 11.1).

Some problems say where a run stands rather than that it is damaged (:class:`Notice`): a
``running`` run that no live writer holds (interrupted), a failed run a signal stopped, a segment
swap for the next writer to finish. :func:`damage` leaves them out (``compact`` refuses damage).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aah_viz.errors import RunLogError, UnsafePathError
from aah_viz.runlog import containment, generations, lock, model_folders, paths, run_summary
from aah_viz.runlog.columns import GROUP_COLUMN_RE
from aah_viz.runlog.manifest import check_version, manifest_problems, read_manifest
from aah_viz.runlog.value_checks import MAX_EXAMPLES, check_values
from aah_viz.schema import (
    ALL_TABLES,
    LATER_COLUMNS,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_IMPORTED,
    STATUS_RUNNING,
    STATUS_STOPPED,
)


class Notice(str):
    """A problem that says where a run stands, not that its files are damaged: interrupted, stopped by a
    signal, a segment swap left for the next writer to finish. Compaction goes ahead on such a run."""


# ---------------------------------------------------------------------- the check
def validate_run(run_dir: str | os.PathLike) -> list[str]:
    """Problems of ``run_dir``; an empty list means the run is valid."""
    run_dir = Path(run_dir)
    try:
        manifest = read_manifest(run_dir)
        check_version(manifest, run_dir)
    except RunLogError as err:
        return [str(err)]
    problems = manifest_problems(manifest) + containment.escapes(run_dir) + model_folders.problems(run_dir)
    max_depth = manifest.get("max_depth") if isinstance(manifest.get("max_depth"), int) else 0
    kept: dict[str, pd.DataFrame] = {}
    last_steps = []
    for table in paths.list_table_dirs(run_dir):
        frame, table_problems, last = _check_table(run_dir, table, max_depth)
        problems += table_problems
        if frame is not None:
            kept[table] = frame
        if last is not None:
            last_steps.append(last)
    problems += set_aside_problems(run_dir, manifest)
    problems += check_values(manifest, kept)
    problems += _check_last_step(manifest, max(last_steps, default=None))
    problems += _check_completeness(run_dir, manifest, kept)
    problems += run_summary.problems(run_dir)
    return list(dict.fromkeys(problems))  # a problem found twice (a record's, by the table check too) once


def damage(run_dir: str | os.PathLike) -> list[str]:
    """The problems of :func:`validate_run` that are damage: all but the :class:`Notice` ones."""
    return [p for p in validate_run(run_dir) if not isinstance(p, Notice)]


def resume_command(run_dir: str | os.PathLike, manifest: dict) -> str:
    """The command that continues ``run_dir``."""
    if isinstance(manifest.get("retrofit"), dict):
        return "the same aah-viz retrofit command with --resume"
    return f"aah-viz train --out {shlex.quote(str(run_dir))} --resume"


def stop_notice(run_dir: str | os.PathLike, manifest: dict, events: pd.DataFrame | None, last: int | None):
    """A run that a signal stopped at its last recorded step (status ``stopped``, or ``failed`` as runs before
    that status said, with a ``terminated`` event there): where it stopped and how to continue it. None for
    any other run."""
    if (
        manifest.get("status") not in (STATUS_STOPPED, STATUS_FAILED)
        or events is None
        or not len(events)
        or last is None
    ):
        return None
    stops = events[events["kind"] == "terminated"]
    if not len(stops) or int(stops["step"].max()) != last:
        return None
    try:
        signal = json.loads(stops.loc[stops["step"].idxmax(), "detail"]).get("signal")
    except (TypeError, ValueError, AttributeError):
        signal = None
    named = f" ({signal})" if isinstance(signal, str) and signal.isidentifier() else ""
    return Notice(f"stopped at step {last} by a signal{named}; resume with {resume_command(run_dir, manifest)}")


def set_aside_problems(run_dir: Path, manifest: dict) -> list[str]:
    """Segments set aside as unreadable (by a resume): their rows are lost."""
    names = set()
    for table in paths.list_table_dirs(run_dir):
        for entry in os.scandir(run_dir / table):
            if entry.name.startswith("_") and entry.name.endswith(paths.QUARANTINE_SUFFIX):
                names.add(f"{table}/{entry.name[1 : -len(paths.QUARANTINE_SUFFIX)]}")
    resumes = manifest.get("resumes") if isinstance(manifest.get("resumes"), list) else []
    for resume in resumes:
        if isinstance(resume, dict) and isinstance(resume.get("set_aside"), list):
            names.update(str(n) for n in resume["set_aside"])
    return [
        f"{name}: segment set aside as unreadable (kept as _{Path(name).name}{paths.QUARANTINE_SUFFIX}); "
        f"its rows are lost"
        for name in sorted(names)
    ]


def _check_completeness(run_dir: Path, manifest: dict, tables: dict[str, pd.DataFrame]) -> list[str]:
    """Missing steps, steps past the plan, empty tables of a finished run, interrupted runs."""
    status = manifest.get("status")
    if status == STATUS_IMPORTED or manifest.get("imported"):
        return []  # published tables: the steps are the ones the paper reports
    problems = []
    if status == STATUS_RUNNING and lock.holder(run_dir) is None:
        problems.append(_interrupted(run_dir, manifest, _last(tables)))
    stopped = stop_notice(run_dir, manifest, tables.get("events"), _last(tables))
    if stopped:
        problems.append(stopped)
    heads, scalars = tables.get("heads"), tables.get("scalars")
    planned = manifest.get("steps") if isinstance(manifest.get("steps"), int) else None
    if status == STATUS_FINISHED:
        if not any(len(frame) for frame in tables.values()):
            problems.append("the run is finished but every table is empty: nothing was recorded")
        elif (heads is None or not len(heads)) and manifest.get("steps") is not None:
            # a run that plans no steps (a frontier of evaluations) records events, not steps
            problems.append("heads: the run is finished but the table has no rows")
    source = heads if heads is not None and len(heads) else scalars
    if source is None or not len(source):
        return problems
    steps = np.unique(source["step"].dropna().to_numpy(dtype=np.int64))
    end = int(steps[-1])
    if status == STATUS_FINISHED and planned is not None and planned > 0:
        end = max(end, planned - 1)
    gaps = missing_ranges(steps, end)
    if gaps:
        name = "heads" if source is heads else "scalars"
        count = sum(hi - lo + 1 for lo, hi in gaps)
        problems.append(f"{name}: {count} step{'s' if count > 1 else ''} missing: {_ranges(gaps)}")
    if planned is not None and steps[-1] >= planned:
        problems.append(
            f"heads: rows up to step {steps[-1]} but the manifest plans {planned} steps (0..{planned - 1}); "
            "the manifest does not describe these rows"
        )
    return problems


def _checkpoints(run_dir: Path) -> list:
    """The run's checkpoints; none when the gate refuses the folder (that is reported as damage already)."""
    try:
        return paths.list_checkpoints(run_dir)
    except UnsafePathError:
        return []


def _interrupted(run_dir: Path, manifest: dict, last) -> Notice:
    said = "interrupted: status is 'running' but no process is writing the run"
    command = resume_command(run_dir, manifest)
    trained = isinstance(manifest.get("train"), dict)  # a run of aah-viz train: it resumes from a checkpoint
    if last is not None and trained and not _checkpoints(run_dir):
        return Notice(
            f"{said} (it stopped after step {last}, before its first checkpoint); {command} starts it again from "
            "step 0, dropping the rows recorded so far"
        )
    return Notice(f"{said} (it stopped after step {'none' if last is None else last}); resume it ({command})")


def _check_last_step(manifest: dict, on_disk: int | None) -> list[str]:
    """The manifest's ``last_step`` against the largest step any table holds. A live writer's manifest
    may lag behind its newest segments, never lead them; a closed run's says exactly where it ended."""
    claimed, status = manifest.get("last_step"), manifest.get("status")
    if not isinstance(claimed, int) or isinstance(claimed, bool) or status == STATUS_IMPORTED:
        return []
    if on_disk is None:
        return [f"manifest.json: field 'last_step' is {claimed} but the tables hold no step; the manifest does "
                "not describe this run"]  # fmt: skip
    if claimed > on_disk or (claimed != on_disk and status in (STATUS_FINISHED, STATUS_FAILED, STATUS_STOPPED)):
        return [f"manifest.json: field 'last_step' is {claimed} but the tables' last step is {on_disk}; the "
                "manifest does not describe this run"]  # fmt: skip
    return []


def _last(tables: dict[str, pd.DataFrame]) -> int | None:
    """The last step the run recorded (heads, else scalars), or None."""
    for name in ("heads", "scalars"):
        frame = tables.get(name)
        if frame is not None and len(frame):
            return int(frame["step"].max())
    return None


def missing_ranges(steps: np.ndarray, end: int) -> list[tuple[int, int]]:
    """Inclusive ranges of ``0..end`` that the sorted distinct ``steps`` do not hold. The work is per
    recorded step, never per planned one: a manifest planning 10**15 steps costs nothing more."""
    inside = steps[(steps >= 0) & (steps <= end)]
    before = np.concatenate(([-1], inside))
    after = np.concatenate((inside, [end + 1]))
    gap = after - before > 1
    return [(int(lo) + 1, int(hi) - 1) for lo, hi in zip(before[gap], after[gap])]


def _ranges(ranges: list[tuple[int, int]], shown: int = 5) -> str:
    """``10-14, 20, 31-33`` for inclusive ranges (the first ``shown``, then a count)."""
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:shown])
    return text + (f" and {len(ranges) - shown} more ranges" if len(ranges) > shown else "")


_KEEP_COLUMNS = {
    "heads": ["step", "layer", "head", "window_idx", "window"],
    "branch": ["step", "layer", "window", "fraction"],
    "scalars": ["step", "layer", "name", "value"],
    "events": ["step", "kind", "detail"],
    "tree": ["step", "layer", "level", "node"],
}


def _check_table(run_dir: Path, table: str, max_depth: int) -> tuple[pd.DataFrame | None, list[str], int | None]:
    """(the columns the value checks read, the table's problems, its largest step)."""
    directory = run_dir / table
    problems = []
    last = None
    for stray in paths.list_stray_files(directory):
        problems.append(
            f"{table}/{stray.name}: not a .parquet segment; it breaks pd.read_parquet('{table}'): "
            f"move it out of the table folder"
        )
    required = dict(ALL_TABLES.get(table, {}))
    if table == "heads":
        for level in range(max_depth):
            required[f"group_l{level}"] = pa.int16()
    segments, warning = generations.visible_segments(directory)
    if warning:
        problems.append(warning)
    stale, orphans = generations.unfinished(directory)
    if stale or orphans:
        problems.append(
            Notice(
                f"{table}: a segment swap (compaction or re-probe) was interrupted: {len(stale) + len(orphans)} "
                f"files pandas would read twice ({', '.join((stale + orphans)[:MAX_EXAMPLES])}); "
                f"aah-viz compact finishes it"
            )
        )
    kept_hidden = generations.unaccounted(directory)
    if kept_hidden:
        problems.append(
            f"{table}: {generations.RECORD} hides {len(kept_hidden)} segments whose rows its new segments cannot "
            f"hold ({', '.join(kept_hidden[:MAX_EXAMPLES])}): not a swap of this run's; readers skip them and "
            f"nothing deletes them; move {table}/{generations.RECORD} out of the run to read them again"
        )
    keep = _KEEP_COLUMNS.get(table, [])
    parts, names = [], []
    for seg in segments:
        where = f"{table}/{seg.name}"
        try:
            data = pq.read_table(seg)
        except Exception as err:  # noqa: BLE001 - any failure to read is a problem of this file
            problems.append(f"{where}: unreadable segment ({_first_line(err)}); readers skip it")
            continue
        schema = data.schema
        for name, typ in required.items():
            if name not in schema.names:
                if name not in LATER_COLUMNS.get(table, ()):  # an older writer's segment lacks these
                    problems.append(f"{where}: missing required column {name!r} ({typ})")
            elif schema.field(name).type != typ and not pa.types.is_null(schema.field(name).type):
                problems.append(f"{where}: column {name!r} has type {schema.field(name).type}, expected {typ}")
        for name in schema.names:
            if (
                table == "heads"
                and GROUP_COLUMN_RE.match(name)
                and not pa.types.is_integer(schema.field(name).type)
                and not pa.types.is_null(schema.field(name).type)
            ):
                problems.append(f"{where}: column {name!r} has type {schema.field(name).type}, expected int16")
        if "step" in schema.names and data.column("step").null_count:
            problems.append(f"{where}: {data.column('step').null_count} rows without a step")
        if "step" in schema.names and pa.types.is_integer(schema.field("step").type):
            top = pc.max(data.column("step")).as_py()
            last = top if last is None or (top is not None and top > last) else last
        if keep and all(c in schema.names for c in keep):
            part = data.select(keep)
            types = {c: required.get(c, part.schema.field(c).type) for c in keep}
            try:
                part = part.cast(pa.schema([pa.field(c, types[c]) for c in keep]))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue  # wrong types are reported above; value checks need the contract's types
            parts.append(part.append_column("_file", pa.array(np.full(part.num_rows, len(names), np.int32))))
            names.append(seg.name)
    if not parts:
        return None, problems, last
    frame = pa.concat_tables(parts).to_pandas()
    frame["_file"] = pd.Categorical.from_codes(frame["_file"].to_numpy(), categories=names)
    return frame, problems, last


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]
