"""The layer x head window heatmap as an RGB image, and PNG bytes for TensorBoard (numpy and zlib only).

Rows are layers, columns heads; a head's colour says which candidate window it executes, from the
smallest (dark purple) to the largest (yellow) on a log scale, as the dashboard's window heatmap.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

# viridis at five stops: candidate windows are few, a linear blend between these is enough
_STOPS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64)


def colour_positions(windows: np.ndarray, candidates) -> np.ndarray:
    """Where each window lies between the smallest and largest candidate, on a log scale (0..1)."""
    lo, hi = np.log2(max(min(candidates), 1)), np.log2(max(max(candidates), 1))
    pos = (np.log2(np.maximum(np.asarray(windows, dtype=np.float64), 1)) - lo) / max(hi - lo, 1e-9)
    return np.clip(pos, 0.0, 1.0)


def window_heatmap(windows: np.ndarray, candidates, cell: int = 12) -> np.ndarray:
    """(L * cell, H * cell, 3) uint8: each head of each layer a ``cell`` x ``cell`` square of its colour."""
    pos = colour_positions(windows, candidates) * (len(_STOPS) - 1)
    i = np.minimum(pos.astype(np.int64), len(_STOPS) - 2)
    frac = (pos - i)[..., None]
    rgb = _STOPS[i] * (1 - frac) + _STOPS[i + 1] * frac
    rgb = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    return np.round(rgb).astype(np.uint8)


def png_bytes(rgb: np.ndarray) -> bytes:
    """An (h, w, 3) uint8 image as a PNG file (8-bit RGB, no filtering)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), dtype=np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
