"""Compaction: each table's many small segments merged into a few large ones, rows unchanged.

A run flushed every step has one segment per table and step; reading 10,000 segments costs a
footer read and a file open each. Compaction rewrites a table as a few files of up to
``ROWS_PER_FILE`` rows (row groups of ``ROW_GROUP_ROWS``), the rows in the same order, and swaps
them in as one generation (``generations.replace_segments``): a reader at any moment sees the
old segments or the new ones, never both or neither, and a crash at any point loses nothing.
It holds the run's writer lock, so it never runs beside a writer. It refuses a run that
``validate`` finds damaged unless forced; forced, segments that cannot be read, or whose column
types conflict with the others, are left as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aah_viz.errors import RunLogError
from aah_viz.runlog import generations, paths, run_summary
from aah_viz.runlog.lock import WriterLock
from aah_viz.runlog.manifest import check_version, read_manifest, utc_now, write_manifest
from aah_viz.runlog.validate import damage

ROWS_PER_FILE = 4_000_000
ROW_GROUP_ROWS = 256 * 1024


def compact_run(
    run_dir: str | os.PathLike, *, min_segments: int = 2, progress: bool = False, force: bool = False
) -> dict:
    """Compact every table of ``run_dir`` that has at least ``min_segments`` segments.

    Returns ``{table: {"before": n, "after": m, "rows": r, "left": [names left as they were]}}``.
    Raises :class:`~aah_viz.errors.RunLockedError` while another process writes the run, and
    :class:`~aah_viz.errors.RunLogError` for a run ``validate`` finds damaged (duplicated rows, steps
    missing, unreadable or set-aside segments, ...) unless ``force``: merged into one file, the damage
    could no longer be told from the rows around it."""
    run_dir = Path(run_dir)
    check_version(read_manifest(run_dir), run_dir)
    with WriterLock.acquire(run_dir, "compacting the run"):
        if not force:
            _refuse_damage(run_dir)
        report = compact_locked(run_dir, min_segments=min_segments, progress=progress)
        if report and paths.run_entry(run_dir, paths.SUMMARY).is_file():  # it named the replaced segments
            run_summary.write(run_dir)
        return report


def _refuse_damage(run_dir: Path) -> None:
    found = damage(run_dir)
    if found:
        more = f" (and {len(found) - 1} more: aah-viz validate lists them)" if len(found) > 1 else ""
        raise RunLogError(
            f"run {run_dir} is damaged, so it is not compacted (the damage would be merged into one file for "
            f"good): {found[0]}{more}; repair it, or pass --force to compact it as it is"
        )


def compact_locked(run_dir: Path, *, min_segments: int = 2, durable: bool = True, progress: bool = False) -> dict:
    """:func:`compact_run` for a caller that already holds the run's writer lock."""
    run_dir = Path(run_dir)
    session = generations.new_session(run_dir)
    report = {}
    tables = paths.list_table_dirs(run_dir)
    for table in _bar(tables, progress, "compacting"):
        directory = run_dir / table
        for tmp in paths.list_temp_files(directory):
            tmp.unlink(missing_ok=True)
        generations.finish(directory, durable=durable)
        segments, _ = generations.visible_segments(directory)  # what a record hides stays as it is
        if len(segments) < max(2, min_segments):
            continue
        parts, used, left = _read_all(segments)
        if len(used) < 2:
            continue
        files = _pack(parts)
        names = [f"part-{session}-{len(report) * 1000 + i:06d}.parquet" for i in range(len(files))]
        generations.replace_segments(
            directory, list(zip(names, files)), [p.name for p in used], durable=durable, row_group_rows=ROW_GROUP_ROWS
        )
        report[table] = {"before": len(segments), "after": len(names) + len(left), "rows": sum(len(p) for p in parts)}
        report[table]["left"] = [p.name for p in left]
    if report:
        manifest = read_manifest(run_dir)
        history = manifest.get("compactions") if isinstance(manifest.get("compactions"), list) else []
        summary = {t: {k: v for k, v in r.items() if k != "left"} for t, r in report.items()}
        manifest["compactions"] = [*history, {"at": utc_now(), "tables": summary}]
        write_manifest(run_dir, manifest)
    return report


def _read_all(segments: list[Path]) -> tuple[list[pa.Table], list[Path], list[Path]]:
    """(tables in write order cast to one schema, segments read, segments left as they are)."""
    parts, used, left, schema = [], [], [], None
    for seg in segments:
        try:
            data = pq.read_table(seg)
            unified = (
                data.schema if schema is None else pa.unify_schemas([schema, data.schema], promote_options="permissive")
            )
        except Exception:  # noqa: BLE001 - unreadable or conflicting: not ours to merge
            left.append(seg)
            continue
        schema = unified
        parts.append(data)
        used.append(seg)
    if schema is None:
        return [], [], left
    return [_conform(p, schema) for p in parts], used, left


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(len(table), type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _pack(parts: list[pa.Table]) -> list[list[pa.Table]]:
    """Consecutive parts grouped into files of at most ROWS_PER_FILE rows (a larger part stays whole)."""
    files, current, rows = [], [], 0
    for part in parts:
        if current and rows + len(part) > ROWS_PER_FILE:
            files.append(current)
            current, rows = [], 0
        current.append(part)
        rows += len(part)
    if current:
        files.append(current)
    return [[pa.concat_tables(f).combine_chunks()] for f in files]


def _bar(items, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(items, disable=not enabled, desc=desc, unit="table", dynamic_ncols=True)
