"""``load_run`` and ``Run``: read a run directory, also while it is still being written.

A ``Run`` is a snapshot: each table folder is listed once per load (at its first read; ``refresh``
lists again, so a live run's new segments appear), honouring the folder's generation record so
that a compaction running meanwhile shows the old segments or the new ones, never both. Segments
are checked by their Parquet footer (cached by size and mtime) and read together through
``pyarrow.dataset`` with column projection and filters. A segment that cannot be read is skipped
with a warning naming the file; it never stops the others from being read. A segment that
vanishes between the listing and the read (a compaction or a resume finished) makes the read
list the folder again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from aah_viz.errors import RunLogError
from aah_viz.runlog import generations, lock, paths
from aah_viz.runlog.columns import column_type, table_schema
from aah_viz.runlog.manifest import check_manifest, check_version, read_manifest
from aah_viz.schema import SCHEMA_VERSION, parse_version


class Run:
    """An opened run directory. ``table(name)`` returns a pandas DataFrame."""

    def __init__(self, path: Path, manifest: dict, version: tuple[int, int]):
        self.path = Path(path)
        self.manifest = manifest
        self.schema_version = version
        self.warnings: list[str] = []
        self._footers: dict[str, tuple[int, int, pa.Schema | None]] = {}
        self._listing: dict[str, list[Path]] = {}
        self._step_index: dict[str, dict[tuple[str, int], tuple]] = {}  # table -> (name, size) -> (lo, hi)
        self._index_loader = None
        ours = parse_version(SCHEMA_VERSION)
        if version[1] > ours[1]:
            self._warn(
                f"run {self.path} was written with schema {manifest.get('schema_version')}, newer than "
                f"{SCHEMA_VERSION}: columns this aah-viz does not know are ignored"
            )

    # ------------------------------------------------------------------ manifest facts
    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def regime(self) -> str | None:
        return self.manifest.get("regime")

    @property
    def seed(self) -> int | None:
        return self.manifest.get("seed")

    @property
    def status(self) -> str | None:
        return self.manifest.get("status")

    @property
    def windows(self) -> list[int]:
        return list(self.manifest.get("windows") or [])

    @property
    def n_layer(self) -> int | None:
        return self.manifest.get("n_layer")

    @property
    def n_head(self) -> int | None:
        return self.manifest.get("n_head")

    @property
    def seq_len(self) -> int | None:
        return self.manifest.get("seq_len")

    @property
    def max_depth(self) -> int:
        return int(self.manifest.get("max_depth") or 0)

    @property
    def config(self) -> dict:
        return dict(self.manifest.get("config") or {})

    def being_written(self) -> bool:
        """Whether a live process holds the run's writer lock now (a ``running`` run that is not was interrupted)."""
        return lock.holder(self.path) is not None

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, regime={self.regime!r}, seed={self.seed!r}, status={self.status!r})"

    # ------------------------------------------------------------------ listing
    def refresh(self) -> Run:
        """Re-read the manifest (status, last_step), list the table folders again (new segments of a
        live run appear) and forget cached segment footers."""
        manifest = read_manifest(self.path)
        self.schema_version = check_version(manifest, self.path)
        self.manifest = manifest
        self._footers.clear()
        self._listing.clear()
        return self

    def tables(self) -> list[str]:
        """Names of the tables this run has on disk."""
        return paths.list_table_dirs(self.path)

    def segments(self, name: str) -> list[Path]:
        """Readable segments of a table, in write order (unreadable ones are skipped with a warning)."""
        return [seg for seg, _ in self._good_segments(name)]

    def use_step_index(self, loader) -> Run:
        """Segments' step bounds known beforehand: ``loader()`` gives ``{table: [[name, size, lo, hi], ...]}``
        (the run's summary), called at the first read that needs them. A read given ``steps`` then skips the
        segments whose known bounds lie outside them, without opening them; a segment not known (or of another
        size) is read as before, so the rows are the same either way."""
        self._index_loader = loader
        return self

    def _known(self, table: str) -> dict[tuple[str, int], tuple]:
        if self._index_loader is not None:
            loader, self._index_loader = self._index_loader, None
            rows = loader() or {}
            self._step_index = {t: {(r[0], r[1]): (r[2], r[3]) for r in rs} for t, rs in rows.items()}
        return self._step_index.get(table, {})

    def _known_bounds(self, table: str, seg: Path) -> tuple | None:
        known = self._known(table)
        if not known:
            return None
        try:
            size = seg.stat().st_size
        except FileNotFoundError:
            raise _Vanished from None
        return known.get((seg.name, size))

    def segment_bounds(self, table: str) -> list[tuple[int, int]] | None:
        """Smallest and largest step of each of the table's segments with rows, from the known bounds alone;
        None when some segment's are not known (the caller reads the footers)."""
        out = []
        for seg in self._listed(table):
            try:
                bounds = self._known_bounds(table, seg)
            except _Vanished:  # gone since the listing: the caller reads afresh
                return None
            if bounds is None:
                return None
            if bounds[0] is not None:
                out.append(bounds)
        return out

    def sampled(self, table: str, most: int) -> tuple[Run, int, int]:
        """(this snapshot seeing at most ``most`` of the table's segments, evenly spaced in write order with the
        first and last kept, the segments it sees, the table's segments): a long run's figure over training read
        from stretches spread over it. Itself when the table has no more segments."""
        listed = self._listed(table)
        if len(listed) <= most:
            return self, len(listed), len(listed)
        keep = np.unique(np.linspace(0, len(listed) - 1, max(2, most)).round().astype(int))
        view = Run(self.path, self.manifest, self.schema_version)
        view.warnings, view._footers = self.warnings, self._footers  # one run: its warnings and footers shared
        view._listing = {**self._listing, table: [listed[i] for i in keep]}
        view._step_index, view._index_loader = self._step_index, self._index_loader
        return view, len(keep), len(listed)

    def _outside(self, table: str, seg: Path, steps: tuple) -> bool:
        bounds = self._known_bounds(table, seg)
        if bounds is None:
            return False
        lo, hi = bounds
        if lo is None:  # no rows (or unreadable: nothing a reader would get from it)
            return True
        return (steps[1] is not None and lo > steps[1]) or (steps[0] is not None and hi < steps[0])

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _listed(self, name: str) -> list[Path]:
        """The table's segments of this snapshot (listed once, until ``refresh``)."""
        if name not in self._listing:
            segments, warning = generations.visible_segments(paths.table_dir(self.path, name))
            if warning:
                self._warn(warning)
            self._listing[name] = segments
        return self._listing[name]

    def _footer(self, seg: Path) -> pa.Schema | None:
        try:
            st = seg.stat()
        except FileNotFoundError:
            raise _Vanished from None
        key = str(seg)
        cached = self._footers.get(key)
        if cached is not None and cached[0] == st.st_size and cached[1] == st.st_mtime_ns:
            return cached[2]
        try:
            schema = pq.read_schema(seg)
        except Exception as err:  # noqa: BLE001 - truncated or garbage: skip, report by name
            self._warn(f"skipped unreadable segment {seg.parent.name}/{seg.name}: {_short(err)}")
            schema = None
        self._footers[key] = (st.st_size, st.st_mtime_ns, schema)
        return schema

    def _good_segments(self, name: str, steps: tuple | None = None) -> list[tuple[Path, pa.Schema]]:
        out = []
        for seg in self._listed(name):
            if steps is not None and self._outside(name, seg, steps):
                continue
            schema = self._footer(seg)
            if schema is not None:
                out.append((seg, schema))
        return out

    def _unify(self, segments: list[tuple[Path, pa.Schema]]) -> tuple[list[tuple[Path, pa.Schema]], pa.Schema]:
        """One schema for all segments; a segment whose column types conflict with the earlier
        ones (say, ``step`` stored as text) is skipped with a warning."""
        if not segments:
            return [], pa.schema([])
        try:
            return segments, pa.unify_schemas([s for _, s in segments], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        kept, unified = [], pa.schema([])
        for seg, schema in segments:
            try:
                unified = pa.unify_schemas([unified, schema], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
                self._warn(
                    f"skipped segment {seg.parent.name}/{seg.name}: its column types conflict with "
                    f"the table's other segments ({_short(err)})"
                )
                continue
            kept.append((seg, schema))
        return kept, unified

    def _mark_bad(self, seg: Path, err: Exception) -> None:
        try:
            st = seg.stat()
            self._footers[str(seg)] = (st.st_size, st.st_mtime_ns, None)
        except FileNotFoundError:
            return
        self._warn(f"skipped unreadable segment {seg.parent.name}/{seg.name}: {_short(err)}")

    # ------------------------------------------------------------------ reading
    def arrow_table(
        self, name: str, columns: Sequence[str] | None = None, filters: Any = None, steps: tuple | None = None
    ) -> pa.Table:
        """Like :meth:`table`, as a pyarrow Table."""
        for _ in range(READ_ATTEMPTS):
            try:
                return self._arrow_table(name, columns, filters, steps)
            except _Vanished:
                self._listing.pop(name, None)  # a segment went away: take a new listing
        raise RunLogError(
            f"table {name!r} of run {self.path} kept changing while it was read (compactions or resumes "
            f"running); read it again"
        )

    def _arrow_table(self, name: str, columns: Sequence[str] | None, filters: Any, steps: tuple | None) -> pa.Table:
        base = table_schema(name, self.max_depth)
        good, unified = self._unify(self._good_segments(name, steps))
        for field in base:
            if field.name not in unified.names:
                unified = unified.append(field)
        unified = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in unified])
        wanted = list(columns) if columns is not None else list(unified.names)
        missing = [c for c in wanted if c not in unified.names]
        for col in missing:
            typ = column_type(name, col)
            if typ is None:
                raise RunLogError(
                    f"table {name!r} of run {self.path} has no column {col!r}; it has {', '.join(unified.names)}"
                )
            unified = unified.append(pa.field(col, typ))
        expression = _filter_expression(filters, name, unified)
        if not good:
            return _empty(unified, wanted)
        try:
            data = self._scan([s for s, _ in good], unified, wanted, expression)
        except (OSError, pa.ArrowException):
            data = self._scan_one_by_one([s for s, _ in good], unified, wanted, expression)
        return data

    def table(
        self, name: str, columns: Sequence[str] | None = None, filters: Any = None, steps: tuple | None = None
    ) -> pd.DataFrame:
        """All rows of ``name`` as a DataFrame (segments in write order).

        ``columns`` projects; ``filters`` is a pyarrow-style list such as ``[("layer", "==", 3)]``
        (or a list of such lists for OR) or a ``pyarrow.compute`` expression. A missing table gives
        an empty DataFrame with the contract's columns. Integer columns with nulls come back as
        float64 with NaN (pandas' default), list columns as object arrays of numpy arrays. ``steps``:
        ``(lo, hi)`` (either None: open) that every row ``filters`` keeps lies within, so segments known to hold
        none of those steps are not opened (:meth:`use_step_index`); a hint, the filter still decides.
        """
        return self.arrow_table(name, columns, filters, steps).to_pandas()

    @staticmethod
    def _scan(segs: list[Path], schema: pa.Schema, columns: list[str], expression) -> pa.Table:
        dataset = ds.dataset([str(s) for s in segs], schema=schema, format="parquet")
        return dataset.to_table(columns=columns, filter=expression)

    def _scan_one_by_one(self, segs, schema, columns, expression) -> pa.Table:
        parts = []
        for seg in segs:
            try:
                parts.append(self._scan([seg], schema, columns, expression))
            except (OSError, pa.ArrowException) as err:
                if not seg.exists():
                    raise _Vanished from None  # removed after the listing (compaction, resume)
                self._mark_bad(seg, err)
        if not parts:
            return _empty(schema, columns)
        return pa.concat_tables(parts)

    def steps(self) -> np.ndarray:
        """Sorted distinct steps recorded in ``heads`` (or ``scalars`` when there are no head rows)."""
        for name in ("heads", "scalars"):
            col = self.arrow_table(name, columns=["step"]).column("step")
            if len(col):
                values = pc.unique(col.combine_chunks()).to_numpy(zero_copy_only=False)
                return np.sort(values[~pd.isna(values)].astype(np.int64))
        return np.zeros(0, dtype=np.int64)

    def scalar(self, name: str, layer: int | None = None) -> pd.DataFrame:
        """Rows of one named scalar: model-wide (``layer=None``) or of one layer, sorted by step."""
        filters = [("name", "==", name)]
        df = self.table("scalars", filters=filters)
        df = df[df["layer"].isna()] if layer is None else df[df["layer"] == layer]
        return df.sort_values("step", kind="stable").reset_index(drop=True)

    def events(self, kind: str | None = None) -> pd.DataFrame:
        """The events table, optionally of one kind."""
        return self.table("events", filters=None if kind is None else [("kind", "==", kind)])


READ_ATTEMPTS = 5


class _Vanished(Exception):
    """A listed segment is gone: the snapshot is stale."""


def _empty(schema: pa.Schema, columns: list[str]) -> pa.Table:
    return pa.schema([schema.field(c) for c in columns]).empty_table()


def _filter_expression(filters: Any, table: str, schema: pa.Schema):
    if filters is None:
        return None
    if isinstance(filters, pc.Expression):
        return filters
    try:
        names = set()
        groups = filters if filters and isinstance(filters[0], list) else [filters]
        for group in groups:
            for clause in group:
                names.add(clause[0])
        unknown = sorted(names - set(schema.names))
        if unknown:
            raise RunLogError(
                f"filter on table {table!r} names unknown column(s) {unknown}; it has {', '.join(schema.names)}"
            )
        return pq.filters_to_expression(filters)
    except RunLogError:
        raise
    except Exception as err:  # noqa: BLE001
        raise RunLogError(
            f"invalid filters {filters!r} for table {table!r}: {err}; use a list like [('layer', '==', 3)]"
        ) from None


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:200]


def load_run(path: str | os.PathLike | Run, check: bool = True) -> Run:
    """Open a run directory. Raises :class:`RunLogError` (no, unreadable or invalid manifest, or a
    manifest whose layer and head counts contradict the ``heads`` table) or
    :class:`SchemaVersionError` (written by a newer major schema). ``check=False`` leaves the shape
    check (``check_shape``) to a caller that has the footers' figures already."""
    if isinstance(path, Run):
        return path
    path = Path(path)
    manifest = read_manifest(path)
    version = check_version(manifest, path)
    check_manifest(manifest, path)
    run = Run(path, manifest, version)
    if check:
        check_shape(run)
    return run


def heads_extent(segment: Path) -> dict[str, int] | None:
    """Largest ``layer`` and ``head`` in one heads segment, from its footer statistics (no data read)."""
    try:
        meta = pq.read_metadata(segment)
    except Exception:  # noqa: BLE001 - unreadable: the reader skips it with a warning later
        return None
    found: dict[str, int] = {}
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            column = group.column(j)
            stats = column.statistics
            if column.path_in_schema in ("layer", "head") and stats is not None and stats.has_min_max:
                found[column.path_in_schema] = max(found.get(column.path_in_schema, -1), int(stats.max))
    return found


def shape_extent(run: Run) -> dict[str, int]:
    """Largest ``layer`` and ``head`` of the first and last ``heads`` segments, from their footers."""
    segments = run._listed("heads")
    seen: dict[str, int] = {}
    for seg in {segments[0], segments[-1]} if segments else ():
        for column, largest in (heads_extent(seg) or {}).items():
            seen[column] = max(seen.get(column, -1), largest)
    return seen


def check_shape(run: Run, extent: dict[str, int] | None = None) -> None:
    """The manifest's ``n_layer`` and ``n_head`` against the first and last ``heads`` segments'
    footers (cheap: no rows are read; ``validate`` checks every row). ``extent``: those footers' largest
    layer and head when the caller has them (the run's summary, trusted only for these very segments)."""
    seen = shape_extent(run) if extent is None else extent
    for field, column in (("n_layer", "layer"), ("n_head", "head")):
        if column in seen and seen[column] + 1 != run.manifest[field]:
            raise RunLogError(
                f"run {run.path} cannot be opened: its manifest.json field {field!r} is {run.manifest[field]} "
                f"but the heads table has {column}s 0..{seen[column]}; the manifest does not describe this run"
            )
