"""Checkpoints: ``RUN/checkpoints/step-XXXXXXXX.pt``, routing state included, safe to load.

A checkpoint is one ``torch.save`` of plain containers and tensors, so it loads with
``torch.load(..., weights_only=True)`` (nothing is unpickled):

    {"model": state_dict,            # parameters and the routing state (partitions, EMA, windows)
     "optimizer": optimizer.state_dict(),
     "step": S,                      # the last completed step; a resume starts at S + 1
     "config": cfg.to_dict(),
     "rng": {"torch": ByteTensor, "cuda": [ByteTensor, ...]},
     "controller_init": [tensors]}   # the controller weights at step 0 (for weight drift)

Files are written to a temporary name, fsynced and renamed, so a killed process never leaves a
half-written checkpoint under a real name. Names, listing and pruning: ``aah_viz.runlog.paths``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from aah_viz.errors import RunLogError
from aah_viz.runlog.paths import atomic_path, checkpoint_path, list_checkpoints, prune_checkpoints

__all__ = [
    "checkpoint_path",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "prune_checkpoints",
    "refusal",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    config: dict,
    extra: dict | None = None,
) -> Path:
    """Write the checkpoint of the completed ``step`` atomically; returns its path."""
    path = checkpoint_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else {},
        "step": int(step),
        "config": config,
        "rng": rng_state(),
    }
    payload.update(extra or {})
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(payload, fh)
    return path


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def refusal(path: str | Path, err: Exception) -> str | None:
    """One line in our words when ``torch.load(weights_only=True)`` refused a file because it holds
    Python objects (code could run on loading): what it holds and that we never load it. None for
    any other error. torch's own text advises retrying with ``weights_only=False``: never shown."""
    import pickle

    if not isinstance(err, pickle.UnpicklingError):
        return None
    named = re.search(r"GLOBAL ([\w.]+)", str(err))
    what = f" (it asks for {named.group(1)})" if named else ""
    return (
        f"refused to load {path}: it holds Python objects, not only tensors and plain values{what}; loading it "
        "could run code, so aah-viz never does. Use a file written by aah-viz or save_pretrained, from a "
        "source you trust"
    )


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; a damaged or refused file raises RunLogError naming it."""
    path = Path(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means an unusable file
        refused = refusal(path, err)
        if refused:
            raise RunLogError(refused) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise RunLogError(
            f"checkpoint {path} cannot be read ({type(err).__name__}: {first}); delete it to resume from the one before"
        ) from err
    if not isinstance(payload, dict):
        raise RunLogError(f"checkpoint {path} holds a {type(payload).__name__}, not a checkpoint of aah-viz train")
    for key in ("model", "step", "config"):
        if key not in payload:
            raise RunLogError(f"checkpoint {path} has no {key!r} entry; it was not written by aah-viz train")
    return payload
