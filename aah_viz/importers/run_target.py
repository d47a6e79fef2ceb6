"""The run directory an import writes: a new one, or an earlier import's when asked to overwrite (never
a run that was not imported)."""

from __future__ import annotations

from pathlib import Path

from aah_viz.errors import AAHVizError
from aah_viz.runlog import read_manifest
from aah_viz.runlog.containment import refuse_escapes
from aah_viz.runlog.paths import resolve_under


def import_target(out_dir: Path, run_id: str, overwrite: bool) -> Path:
    """``out_dir/run_id``, checked before anything is written: refused when it exists, unless ``overwrite``
    and it is an imported run."""
    path = resolve_under(out_dir, run_id)
    if path.exists() and not overwrite:
        raise AAHVizError(
            f"{path} already exists; importing again would replace it. Pass --overwrite (overwrite=True) to "
            f"replace imported runs, or choose another --out folder"
        )
    if path.exists() and overwrite:
        refuse_escapes(path, "replaced")  # a link out of it: neither its manifest read nor anything deleted
        try:
            manifest = read_manifest(path)
        except (OSError, ValueError, AAHVizError):
            manifest = {}
        if not manifest.get("imported"):
            raise AAHVizError(
                f"{path} exists and is not an imported run; refusing to replace it (choose another --out folder)"
            )
    return path
