"""The reference patch's diagnostics CSV: one row per (layer, head) of a patched model's last forward."""

from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = (  # the reference patch's heatmap (write_aah_diagnostics); aah-viz import-reference reads it
    "regime",
    "layer_id",
    "head_id",
    "selected_window_idx",
    "selected_window_size",
    "pre_clamp_window_idx",
    "final_window_idx",
    "final_window_size",
    "ACR",
)


def write_diagnostics_csv(handle, path: str | Path) -> Path:
    """Write ``handle.diagnostics_rows()`` (executed window index and size, raw index, the layer's ACR) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(handle.diagnostics_rows())
    return path
