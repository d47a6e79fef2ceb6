"""``RunWriter``: buffered rows, atomic Parquet segments, and the manifest of one run.

Each ``flush`` writes one segment per table that has buffered rows: a temporary file, fsync,
rename to ``<table>/part-<session>-<seq>.parquet``, fsync of the folder. A crash therefore
loses at most the rows appended since the last flush; a reader never sees a partial segment.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aah_viz.errors import AAHVizError, RunLogError
from aah_viz.runlog import generations, paths, run_summary
from aah_viz.runlog.columns import rows_to_arrow
from aah_viz.runlog.compact import compact_locked
from aah_viz.runlog.discovery import runs_below
from aah_viz.runlog.lock import WriterLock
from aah_viz.runlog.manifest import check_version, read_manifest, to_jsonable, utc_now, write_manifest
from aah_viz.runlog.segment_io import write_segment
from aah_viz.runlog.summaries import UpdateSummarizer, margin_summary
from aah_viz.schema import (
    ALL_TABLES,
    MANIFEST,
    MANIFEST_FLAG,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_IMPORTED,
    STATUS_RUNNING,
    STATUS_STOPPED,
)


def _clean_leftovers(run_dir: Path) -> None:
    """What a dead writer may have left (the caller holds the lock): temporary files, half-done swaps."""
    for tmp in paths.list_temp_files(run_dir, prefix="."):
        tmp.unlink(missing_ok=True)
    for table in paths.list_table_dirs(run_dir):
        directory = run_dir / table
        for tmp in paths.list_temp_files(directory):
            tmp.unlink(missing_ok=True)
        generations.finish(directory)


class RunWriter:
    """Writes one run directory. Only one writer (rank 0) per run at a time."""

    flush_rows: int = 200_000  # auto-flush once a table buffers this many rows
    flush_interval_s: float | None = None  # and/or once this long has passed since the last flush
    manifest_interval_s: float = 1.0  # rewrite the manifest's last_step at most this often while flushing
    durable: bool = True  # fsync segments and folders; False only for data that can be regenerated

    compact_on_close: int | None = None  # compact tables of more segments than this when the run finishes

    def __init__(self, run_dir: Path, manifest: dict, *, _token: object = None, _lock: WriterLock | None = None):
        if _token is not _CONSTRUCT:
            raise TypeError("use RunWriter.create(run_dir, manifest) or RunWriter.resume(run_dir, ...)")
        self.path = Path(run_dir)
        self.manifest = manifest
        self._lock = _lock
        self.session = generations.new_session(self.path)
        self._seq = 0
        self._buffers: dict[str, list[pa.Table]] = {}
        self._buffered_rows: dict[str, int] = {}
        self._types: dict[str, dict[str, pa.DataType]] = {}
        self._max_step: int | None = manifest.get("last_step")
        self._last_flush = time.monotonic()
        self._last_manifest_write = float("-inf")
        self.closed = False
        self.segments_written = 0
        self.bytes_written = 0
        self._summarizer = None
        self._run_summary: dict | None = None  # the last summary.json written (its segments' bounds are reused)
        if manifest.get(MANIFEST_FLAG):  # this run's per-update summaries are complete: keep them so
            self._summarizer = UpdateSummarizer(int(manifest.get("n_head") or 0), int(manifest.get("max_depth") or 0))

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(cls, run_dir: str | os.PathLike, manifest: dict, *, overwrite: bool = False) -> RunWriter:
        """Start a new run in ``run_dir`` (created). Refuses an existing run unless ``overwrite``, and
        a run another live process is writing (:class:`~aah_viz.errors.RunLockedError`)."""
        run_dir = Path(run_dir)
        if not isinstance(manifest, dict) or "schema_version" not in manifest:
            raise RunLogError("RunWriter.create needs a manifest from aah_viz.runlog.make_manifest(...)")
        if run_dir.exists() and not run_dir.is_dir():
            raise RunLogError(f"{run_dir} exists and is not a folder; choose another --out")
        _refuse_a_folder_of_runs(run_dir)
        lock = WriterLock.acquire(run_dir, "writing a new run")
        try:
            has_segments = any(paths.list_segments(run_dir / t) for t in paths.list_table_dirs(run_dir))
            if paths.holds_manifest(run_dir) or has_segments:
                if not overwrite:
                    raise RunLogError(
                        f"{run_dir} already holds a run; choose another output folder, resume it, "
                        f"or pass overwrite=True (--overwrite) to replace it"
                    )
                _remove_run_contents(run_dir)
            _clean_leftovers(run_dir)
            manifest = dict(manifest)
            manifest.setdefault("run_uid", secrets.token_hex(8))  # tells this run from any other (checkpoints)
            manifest["status"] = STATUS_RUNNING
            manifest.setdefault("last_step", None)
            manifest.setdefault(MANIFEST_FLAG, True)  # a new run gets per-update summaries from its first step
            write_manifest(run_dir, manifest)
            return cls(run_dir, manifest, _token=_CONSTRUCT, _lock=lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def resume(cls, run_dir: str | os.PathLike, keep_through_step: int | None = None) -> RunWriter:
        """Reopen a run. Rows with ``step > keep_through_step`` are removed from every table.

        Affected segments are rewritten atomically; leftover temporary files are deleted; a
        segment that cannot be read is set aside as ``_<name>.corrupt`` (kept, never read).
        ``keep_through_step=None`` keeps every row, ``-1`` none (the run starts again from step 0).
        Records a ``resume`` event.
        """
        run_dir = Path(run_dir)
        if keep_through_step is not None and (isinstance(keep_through_step, bool) or keep_through_step < -1):
            raise RunLogError(f"keep_through_step must be a step >= -1 (-1 keeps no row), got {keep_through_step!r}")
        manifest = read_manifest(run_dir)
        check_version(manifest, run_dir)
        lock = WriterLock.acquire(run_dir, "resuming the run")
        try:
            return cls._resume_locked(run_dir, keep_through_step, lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _resume_locked(cls, run_dir: Path, keep_through_step: int | None, lock: WriterLock) -> RunWriter:
        manifest = read_manifest(run_dir)  # again: the last writer may have changed it before we got the lock
        _clean_leftovers(run_dir)
        dropped, set_aside = {}, []
        max_kept = None
        for table in paths.list_table_dirs(run_dir):
            directory = run_dir / table
            for seg in paths.list_segments(directory):
                try:
                    data = pq.read_table(seg)
                except Exception:  # noqa: BLE001 - any unreadable segment is set aside, never deleted
                    os.replace(seg, directory / paths.quarantine_name(seg.name))
                    set_aside.append(f"{table}/{seg.name}")
                    continue
                if "step" not in data.column_names or data.num_rows == 0:
                    continue
                steps = data.column("step")
                seg_max = pc.max(steps).as_py()
                if keep_through_step is not None and seg_max is not None and seg_max > keep_through_step:
                    kept = data.filter(pc.less_equal(steps, keep_through_step))
                    dropped[table] = dropped.get(table, 0) + data.num_rows - kept.num_rows
                    if kept.num_rows == 0:
                        seg.unlink()
                        paths.fsync_dir(directory)
                        continue
                    write_segment(directory, seg.name, kept)
                    seg_max = pc.max(kept.column("step")).as_py()
                if table in ALL_TABLES and seg_max is not None:
                    max_kept = seg_max if max_kept is None else max(max_kept, seg_max)
        manifest = dict(manifest)
        manifest["status"] = STATUS_RUNNING
        manifest["finished_at"] = None
        manifest["last_step"] = max_kept
        manifest.setdefault("resumes", [])
        manifest["resumes"] = list(manifest["resumes"]) + [
            {"at": utc_now(), "keep_through_step": keep_through_step, "dropped_rows": dropped, "set_aside": set_aside}
        ]
        write_manifest(run_dir, manifest)
        writer = cls(run_dir, manifest, _token=_CONSTRUCT, _lock=lock)
        if writer._summarizer is not None:
            writer._summarizer.prime(run_dir)
        step = keep_through_step if keep_through_step is not None else (max_kept if max_kept is not None else 0)
        step = max(step, 0)  # keep_through_step -1 (a restart from no checkpoint): the event opens step 0
        writer.event(step, "resume", keep_through_step=keep_through_step, dropped_rows=dropped, set_aside=set_aside)
        writer.flush()
        return writer

    # ------------------------------------------------------------------ writing
    @property
    def last_step(self) -> int | None:
        """Largest step appended so far (flushed or buffered), or None."""
        return self._max_step

    def append(self, table: str, rows: Any) -> None:
        """Buffer rows for ``table`` (dict of columns, DataFrame or pyarrow Table)."""
        self._check_open()
        paths.check_table_name(table)
        data = rows_to_arrow(table, rows, int(self.manifest.get("max_depth") or 0), self._types.setdefault(table, {}))
        if data.num_rows == 0:
            return
        step_max = pc.max(data.column("step")).as_py()
        if step_max is not None:
            self._max_step = step_max if self._max_step is None else max(self._max_step, step_max)
        self._buffers.setdefault(table, []).append(data)
        self._buffered_rows[table] = self._buffered_rows.get(table, 0) + data.num_rows
        if self._summarizer is not None and table in ("heads", "tree"):
            summary = self._summarizer.observe(data) if table == "heads" else margin_summary(data)
            if summary is not None and summary.num_rows:
                target = "updates" if table == "heads" else "margins"
                self._buffers.setdefault(target, []).append(summary)
                self._buffered_rows[target] = self._buffered_rows.get(target, 0) + summary.num_rows
        if self._buffered_rows[table] >= self.flush_rows or (
            self.flush_interval_s is not None and time.monotonic() - self._last_flush >= self.flush_interval_s
        ):
            self.flush()

    def event(self, step: int, kind: str, layer: int | None = None, **detail: Any) -> None:
        """One row of the ``events`` table; ``detail`` is stored as a JSON object."""
        if not isinstance(kind, str) or not kind:
            raise RunLogError(f"event kind must be a non-empty string, got {kind!r}")
        self.append(
            "events",
            {
                "step": [int(step)],
                "layer": [None if layer is None else int(layer)],
                "kind": [kind],
                "detail": [json.dumps(to_jsonable(detail), sort_keys=True)],
            },
        )

    def buffered_rows(self, table: str | None = None) -> int:
        if table is not None:
            return self._buffered_rows.get(table, 0)
        return sum(self._buffered_rows.values())

    def flush(self) -> list[Path]:
        """Write one atomic segment per table with buffered rows; update ``last_step`` in the manifest."""
        self._check_open()
        written = []
        for table in list(self._buffers):
            chunks = self._buffers[table]
            if not chunks:
                continue
            data = pa.concat_tables(chunks, promote_options="permissive") if len(chunks) > 1 else chunks[0]
            self._buffers[table] = [data]  # keep the rows until their segment is on disk
            name = paths.segment_name(self.session, self._seq)
            self._seq += 1
            try:
                seg = write_segment(self.path / table, name, data, durable=self.durable)
            except OSError as err:
                raise RunLogError(
                    f"cannot write {self.path / table / name}: {err}; the rows stay buffered, "
                    f"free space or fix permissions and flush again"
                ) from err
            del self._buffers[table]
            self._buffered_rows.pop(table, None)
            self.segments_written += 1
            self.bytes_written += seg.stat().st_size
            written.append(seg)
        now = time.monotonic()
        self._last_flush = now
        if (
            written
            and self.manifest.get("last_step") != self._max_step
            and (now - self._last_manifest_write >= self.manifest_interval_s)
        ):
            self._write_manifest_progress(now)
        if any(seg.parent.name in (*run_summary.TABLES, *run_summary.STEP_TABLES) for seg in written):
            self._write_run_summary()
        return written

    def _write_run_summary(self) -> None:
        """Rewrite ``summary.json`` from the tables; a failure only costs readers a computation."""
        try:
            self._run_summary = run_summary.write(self.path, self._run_summary, durable=self.durable)
        except (AAHVizError, OSError, pa.ArrowException):
            self._run_summary = None

    def _write_manifest_progress(self, now: float) -> None:
        self.manifest["last_step"] = self._max_step
        write_manifest(self.path, self.manifest)
        self._last_manifest_write = now

    def update_manifest(self, **fields: Any) -> None:
        """Set manifest fields and rewrite the manifest atomically."""
        self._check_open()
        protected = {"schema_version"} & set(fields)
        if protected:
            raise RunLogError(f"manifest field(s) {sorted(protected)} are set by the writer, not by callers")
        for key, value in fields.items():
            self.manifest[key] = to_jsonable(value)
        write_manifest(self.path, self.manifest)

    def close(self, status: str = STATUS_FINISHED) -> None:
        """Flush, set ``status`` and ``finished_at``, rewrite the manifest, release the run's lock.

        A finished run is compacted first when ``compact_on_close`` is set. Closing twice is harmless."""
        if self.closed:
            return
        if status not in (STATUS_FINISHED, STATUS_FAILED, STATUS_RUNNING, STATUS_IMPORTED, STATUS_STOPPED):
            raise RunLogError(f"close status must be finished, failed, stopped or imported, got {status!r}")
        try:
            self.flush()
            if status == STATUS_FINISHED and self.compact_on_close is not None:
                compact_locked(self.path, min_segments=self.compact_on_close + 1, durable=self.durable)
                self._write_run_summary()  # compaction replaced the segments the summary names
        finally:
            try:
                self.manifest["status"] = status
                self.manifest["finished_at"] = utc_now()
                self.manifest["last_step"] = self._max_step
                write_manifest(self.path, self.manifest)
                self.closed = True
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.closed:
            return
        if exc_type is None:
            self.close(STATUS_FINISHED)
            return
        try:
            step = self._max_step if self._max_step is not None else 0
            self.event(step, "error", error=exc_type.__name__, message=str(exc)[:500])
        finally:
            self.close(STATUS_FAILED)

    def _check_open(self) -> None:
        if self.closed:
            raise RunLogError(f"the writer of {self.path} is closed; resume the run to write more")


_CONSTRUCT = object()


def _refuse_a_folder_of_runs(run_dir: Path) -> None:
    """A run written into a folder that holds runs would hide them: every tool stops at a run's folder."""
    if not run_dir.is_dir() or paths.holds_manifest(run_dir):
        return
    inside = runs_below(run_dir)
    if inside:
        names = ", ".join(p.relative_to(run_dir).as_posix() for p in inside[:5])
        more = " and more" if len(inside) > 5 else ""
        raise RunLogError(
            f"{run_dir} holds runs ({names}{more}); a run written there would hide them from every tool: "
            f"give the new run a folder of its own, e.g. --out {run_dir / 'NAME'}"
        )


def _remove_run_contents(run_dir: Path) -> None:
    """Delete what a run writer put in ``run_dir`` (manifest and table folders of segments) only."""
    (run_dir / MANIFEST).unlink(missing_ok=True)
    for table in paths.list_table_dirs(run_dir):
        directory = run_dir / table
        for entry in os.scandir(directory):
            name = entry.name
            if entry.is_file() and (
                name.endswith(".parquet")
                or name.endswith(paths.TEMP_SUFFIX)
                or name.endswith(paths.QUARANTINE_SUFFIX)
                or name == generations.RECORD
            ):
                os.unlink(directory / name)
        try:
            directory.rmdir()
        except OSError:
            pass  # the folder holds other files: keep them
