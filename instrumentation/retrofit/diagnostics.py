"""The reference patch's diagnostics CSV: one row per (layer, head) of a patched model's last forward."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from aah_viz.errors import ConfigError
from aah_viz.runlog.paths import atomic_write_bytes

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
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError(f"--diagnostics-csv {path} is not a plain file (a folder, a link or a FIFO): give a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(handle.diagnostics_rows())
    atomic_write_bytes(path, text.getvalue().encode("utf-8"))  # written aside and renamed: never through a FIFO
    return path
