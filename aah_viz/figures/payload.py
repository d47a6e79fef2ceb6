"""What a figure sends to the browser: its JSON size and its arrays decoded.

Plotly serialises numpy arrays as base64 typed arrays (``{"dtype": "f4", "bdata": "...",
"shape": "24, 16"}``); :func:`decode_arrays` turns them back into numpy so tests and the bench
can read a figure's data exactly as the browser receives it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

_DTYPES = {
    "i1": np.int8,
    "u1": np.uint8,
    "i2": np.int16,
    "u2": np.uint16,
    "i4": np.int32,
    "u4": np.uint32,
    "f4": np.float32,
    "f8": np.float64,
}


def _is_typed(obj: Any) -> bool:
    return isinstance(obj, dict) and "bdata" in obj and "dtype" in obj


def decode_typed(obj: dict) -> np.ndarray:
    data = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=_DTYPES[obj["dtype"]])
    shape = obj.get("shape")
    if shape:
        dims = [int(s) for s in str(shape).split(",")]
        data = data.reshape(dims)
    return data


def decode_arrays(obj: Any) -> Any:
    """The JSON structure with every typed array replaced by a numpy array (recursively)."""
    if _is_typed(obj):
        return decode_typed(obj)
    if isinstance(obj, dict):
        return {k: decode_arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_arrays(v) for v in obj]
    return obj


def figure_data(fig_or_json) -> dict:
    """``{"data": [...traces...], "layout": {...}}`` of a figure (or its JSON text), arrays decoded."""
    text = fig_or_json if isinstance(fig_or_json, str) else fig_or_json.to_json()
    return decode_arrays(json.loads(text))


def payload_bytes(fig) -> int:
    """Size of the figure's JSON, what ``st.plotly_chart`` sends to the browser."""
    return len(fig.to_json())
