"""What ``aah-viz probe`` was pointed at: a run directory, a checkpoint, or a Hugging Face folder.

Light side: this only looks at paths and run tables; loading the model is the CLI's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aah_viz.errors import RunLogError
from aah_viz.runlog.paths import CHECKPOINT_SUFFIX, is_run, list_adapters, list_checkpoints, step_of


@dataclass
class ProbeTarget:
    kind: str  # "aah", "retrofit" (an adapter of a patched Hugging Face model) or "hf"
    model_path: Path  # the checkpoint file, the adapter file or the Hugging Face folder
    run_dir: Path | None  # where the probe tables go (None: --out needed)
    step: int | None  # the checkpoint's step (from its name), None for Hugging Face


def resolve_target(text: str, step: int | None = None) -> ProbeTarget:
    path = Path(text)
    if not path.exists():
        raise RunLogError(
            f"{path} does not exist; give a run directory, a checkpoint (.pt) or a Hugging Face model folder"
        )
    if path.is_dir() and is_run(path):
        found, kind = list_checkpoints(path), "aah"
        if not found and list_adapters(path):
            found, kind = list_adapters(path), "retrofit"
        if not found:
            raise RunLogError(
                f"run {path} has no checkpoints (checkpoints/step-XXXXXXXX.pt, or adapters/ of aah-viz retrofit); "
                f"train it with checkpoints (aah-viz train keeps the last one by default) or give a checkpoint file"
            )
        if step is None:
            chosen = found[-1]
        else:
            match = [c for c in found if c[0] == step]
            if not match:
                raise RunLogError(f"run {path} has no checkpoint at step {step}; it has steps {[s for s, _ in found]}")
            chosen = match[0]
        return ProbeTarget(kind, chosen[1], path, chosen[0])
    if path.is_file() and path.suffix == ".pt":
        run_dir = path.parent.parent if is_run(path.parent.parent) else None
        return ProbeTarget("aah", path, run_dir, step_of(path.name, CHECKPOINT_SUFFIX))
    if path.is_dir() and (path / "config.json").is_file():
        return ProbeTarget("hf", path, None, None)
    raise RunLogError(
        f"{path} is neither a run directory (manifest.json), a checkpoint (.pt) nor a "
        "Hugging Face model folder (config.json)"
    )


def windows_from_heads(heads, step: int, n_layer: int, n_head: int) -> np.ndarray | None:
    """(n_layer, n_head) windows from a run's ``heads`` table at ``step`` (or the latest step before it)."""
    if heads is None or len(heads) == 0:
        return None
    at = heads[heads["step"] <= step]
    if len(at) == 0:
        return None
    at = at[at["step"] == at["step"].max()]
    windows = np.full((n_layer, n_head), -1, dtype=np.int64)
    for layer, head, window in zip(at["layer"].astype(int), at["head"].astype(int), at["window"].astype(int)):
        if 0 <= layer < n_layer and 0 <= head < n_head:
            windows[layer, head] = window
    return None if (windows < 0).any() else windows
