"""Writing one Parquet segment file: under a hidden temporary name, fsynced, then renamed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aah_viz.errors import UnsafePathError
from aah_viz.runlog import paths

COMPRESSION = "zstd"


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Dictionary-encode repetitive columns (ids, names, flags); floats and float lists are
    mostly distinct values, where dictionary encoding costs time and saves nothing."""
    keep = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean)
    return [f.name for f in schema if any(test(f.type) for test in keep)]


def write_temp(directory: Path, name: str, tables, *, durable: bool = True, row_group_rows: int | None = None) -> Path:
    """Write ``tables`` (one pyarrow Table, or several of one schema) to a new hidden temporary file
    for the segment ``name`` (created exclusively, never through a link); the caller renames it.
    Returns the temporary path."""
    if directory.is_symlink():  # writers refuse such a run (containment); never write through one anyway
        raise UnsafePathError(f"{directory} is a symbolic link; aah-viz writes no segment through a link")
    directory.mkdir(parents=True, exist_ok=True)
    tables = [tables] if isinstance(tables, pa.Table) else list(tables)
    tmp = directory / paths.temp_name(name)
    schema = tables[0].schema
    fd = paths.create_exclusive(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            with pq.ParquetWriter(
                fh, schema, compression=COMPRESSION, use_dictionary=_dictionary_columns(schema) or False
            ) as out:
                for table in tables:
                    out.write_table(table, row_group_size=row_group_rows)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_segment(directory: Path, name: str, table: pa.Table, *, durable: bool = True) -> Path:
    """Write one segment atomically (temp file, fsync, rename, fsync of the folder).

    ``durable=False`` skips the fsyncs (still atomic for readers, not across a power loss)."""
    tmp = write_temp(directory, name, table, durable=durable)
    final = directory / name
    try:
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        paths.fsync_dir(directory)
    return final
