"""The contract's column types, and rows of any usual shape converted to them.

``schema.py`` names each table's columns and types; here a column's type is looked up (``heads``
also has one ``group_l<i>`` column per hierarchy level) and rows (a dict of columns, a DataFrame
or a pyarrow Table) become a pyarrow Table in those types, with a one-line error for a value that
does not fit. The run writer and every other writer of segments go through :func:`rows_to_arrow`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from aah_viz.errors import RunLogError
from aah_viz.runlog.manifest import to_jsonable
from aah_viz.schema import ALL_TABLES

GROUP_COLUMN_RE = re.compile(r"^group_l(\d+)$")
GROUP_TYPE = pa.int16()


def column_type(table: str, column: str) -> pa.DataType | None:
    """The contract type of a column, or None for a column the schema does not name."""
    known = ALL_TABLES.get(table, {})
    if column in known:
        return known[column]
    if table == "heads" and GROUP_COLUMN_RE.match(column):
        return GROUP_TYPE
    return None


def table_schema(table: str, max_depth: int = 0) -> pa.Schema:
    """Required columns of ``table`` (``heads`` with ``group_l0..group_l{max_depth-1}``)."""
    fields = [pa.field(name, typ) for name, typ in ALL_TABLES.get(table, {}).items()]
    if table == "heads":
        fields += [pa.field(f"group_l{i}", GROUP_TYPE) for i in range(max_depth)]
    return pa.schema(fields)


def _is_array_like(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)) or (
        hasattr(value, "__array__") and not np.isscalar(value) and getattr(value, "ndim", 1) > 0
    )


def _to_array(table: str, column: str, value: Any, n: int, target: pa.DataType | None) -> pa.Array:
    try:
        return _convert(table, column, value, n, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError) as err:
        raise RunLogError(
            f"table {table!r}: column {column!r} cannot be stored as {target or 'a Parquet column'} "
            f"({str(err).splitlines()[0][:200]}); see docs/log-format.md for the column types"
        ) from None


def _convert(table: str, column: str, value: Any, n: int, target: pa.DataType | None) -> pa.Array:
    # NaN stands for null only where the column cannot hold NaN (integers, strings, lists);
    # in float columns NaN stays NaN, as in numpy.
    nan_is_null = target is None or not pa.types.is_floating(target)
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        arr = value
    elif not _is_array_like(value):  # a scalar: one value for every row
        if isinstance(value, dict):
            value = json.dumps(to_jsonable(value))
        if isinstance(value, (int, float, bool, np.number, np.bool_)) and not isinstance(value, str):
            arr = pa.array(np.full(n, value), type=target, from_pandas=nan_is_null)
        elif value is None:
            arr = pa.nulls(n, type=target) if target is not None else pa.nulls(n)
        else:
            arr = pa.array([value] * n, type=target)
    elif isinstance(value, np.ndarray) or (
        hasattr(value, "dtype") and isinstance(value.dtype, np.dtype) and hasattr(value, "to_numpy")
    ):
        np_value = value if isinstance(value, np.ndarray) else value.to_numpy()
        if np_value.ndim == 1 and np_value.dtype.kind in "iufb":
            arr = pa.array(np_value, type=target, from_pandas=nan_is_null and np_value.dtype.kind == "f")
        elif np_value.ndim == 2 and target is not None and pa.types.is_list(target):
            flat = pa.array(np_value.reshape(-1), type=target.value_type)
            arr = pa.ListArray.from_arrays(pa.array(np.arange(len(np_value) + 1) * np_value.shape[1], pa.int32()), flat)
        else:
            data = (
                [x.tolist() if isinstance(x, np.ndarray) else x for x in np_value.tolist()]
                if np_value.dtype == object
                else np_value.tolist()
            )
            arr = pa.array(data, type=target, from_pandas=nan_is_null)
    elif hasattr(value, "dtype") and hasattr(value, "array"):  # pandas Series with an extension dtype
        arr = pa.array(value, type=target, from_pandas=True)
    else:
        data = [x.tolist() if isinstance(x, np.ndarray) else x for x in value]
        arr = pa.array(data, type=target, from_pandas=nan_is_null)
    if len(arr) != n:
        raise RunLogError(f"table {table!r}: column {column!r} has {len(arr)} rows, the other columns {n}")
    if target is not None and arr.type != target:
        try:
            arr = arr.cast(target)  # safe cast: overflow raises
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise RunLogError(
                f"table {table!r}: column {column!r} cannot be stored as {target} ({err}); "
                f"see docs/log-format.md for the column types"
            ) from None
    return arr


def rows_to_arrow(table: str, rows: Any, max_depth: int = 0, remembered: dict | None = None) -> pa.Table:
    """Rows (dict of columns, DataFrame or pyarrow Table) as a Table in the contract's types.

    Missing contract columns become nulls; unknown columns are kept with the type they first had.
    """
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if isinstance(rows, pa.Table):
        columns = {name: rows.column(name) for name in rows.column_names}
        n = rows.num_rows
    elif hasattr(rows, "columns") and hasattr(rows, "iloc"):  # pandas DataFrame
        columns = {str(c): rows[c] for c in rows.columns}
        n = len(rows)
    elif isinstance(rows, Mapping):
        columns = dict(rows)
        lengths = {len(v) for v in columns.values() if _is_array_like(v)}
        if len(lengths) > 1:
            detail = {k: len(v) for k, v in columns.items() if _is_array_like(v)}
            raise RunLogError(f"table {table!r}: columns have different lengths {detail}")
        n = lengths.pop() if lengths else 1
    else:
        raise RunLogError(
            f"table {table!r}: rows must be a dict of columns, a DataFrame or a "
            f"pyarrow Table, got {type(rows).__name__}"
        )
    if "step" not in columns:
        raise RunLogError(f"table {table!r}: rows need a 'step' column")
    remembered = remembered if remembered is not None else {}
    arrays: dict[str, pa.Array] = {}
    for name, value in columns.items():
        target = column_type(table, name) or remembered.get(name)
        arr = _to_array(table, name, value, n, target)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if target is None and not pa.types.is_null(arr.type):
            remembered[name] = arr.type
        arrays[name] = arr
    schema = table_schema(table, max_depth)
    ordered = {}
    for field in schema:
        ordered[field.name] = arrays.pop(field.name) if field.name in arrays else pa.nulls(n, type=field.type)
    for name in sorted(arrays):
        ordered[name] = arrays[name]
    return pa.table(ordered)
