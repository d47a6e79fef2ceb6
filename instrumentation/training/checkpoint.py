"""Checkpoints: ``RUN/checkpoints/step-XXXXXXXX.pt``, routing state included, safe to load.

A checkpoint is one ``torch.save`` of plain containers and tensors, so it loads with
``torch.load(..., weights_only=True)`` (nothing is unpickled):

    {"model": state_dict,            # parameters and the routing state (partitions, EMA, windows)
     "optimizer": optimizer.state_dict(),
     "step": S,                      # the last completed step; a resume starts at S + 1
     "config": cfg.to_dict(),
     "rng": {"torch": ByteTensor, "cuda": [ByteTensor, ...]},
     "controller_init": [tensors],   # the controller weights at step 0 (for weight drift)
     "run_uid": "...",               # the manifest's run_uid: whose checkpoint this is
     "seed": 0, "data_sha256": "..."}  # the run's seed and training text (None: the synthetic corpus)

A resume trusts a checkpoint only when it is the run's own (``check_belongs``): its run id, its
step, its config, its seed and its text agree with the run and the file name; a checkpoint without a
run id is refused when the run has one (it cannot be told from another run's).

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
    "check_belongs",
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


def check_belongs(payload: dict[str, Any], path: str | Path, step: int, manifest: dict) -> None:
    """Refuse (RunLogError, with the reason) a checkpoint that is not the run's own of ``step``: another
    run's (run id), another step than its name says, or another config than the run records."""
    from aah_viz.runlog.manifest import to_jsonable

    remedy = "remove it to resume from the checkpoint before it"
    held = payload.get("step")
    if not isinstance(held, int) or held != step:
        raise RunLogError(
            f"checkpoint {path} holds step {held!r}, not step {step} as its name says: it is not this run's checkpoint "
            f"of step {step}; {remedy}"
        )
    ours, theirs = manifest.get("run_uid"), payload.get("run_uid")
    if ours is not None and theirs is not None and ours != theirs:
        raise RunLogError(
            f"checkpoint {path} belongs to another run (run {theirs}; this run is {ours}): resuming from it would "
            f"continue that run's weights; {remedy}"
        )
    recorded = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    saved = to_jsonable(payload.get("config") or {})
    for key in sorted(set(recorded) | set(saved)):
        if recorded.get(key) != saved.get(key):
            raise RunLogError(
                f"checkpoint {path} was written with config {key}={saved.get(key)!r}, but the run records "
                f"{key}={recorded.get(key)!r}: it is not this run's checkpoint; {remedy}"
            )
    data = manifest.get("data") if isinstance(manifest.get("data"), dict) else {}
    for key, mine in (("seed", manifest.get("seed")), ("data_sha256", data.get("sha256"))):
        if key in payload and payload[key] != mine:
            raise RunLogError(
                f"checkpoint {path} was written with {key} {payload[key]!r}, but the run records {mine!r}: it is "
                f"not this run's checkpoint; {remedy}"
            )
    if ours is not None and theirs is None:
        raise RunLogError(
            f"checkpoint {path} records no run id while this run is {ours}: it cannot be told from another run's "
            f"checkpoint; {remedy}"
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
