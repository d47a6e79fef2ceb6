"""The reference patch's diagnostics CSV: one row per (layer, head) of a patched model's last forward."""

from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = ("regime", "layer_id", "head_id", "window_idx", "window_size", "seq_len", "ACR")


def write_diagnostics_csv(handle, path: str | Path) -> Path:
    """Write ``handle.diagnostics_rows()`` (executed window index and size, the layer's ACR) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(handle.diagnostics_rows())
    return path
