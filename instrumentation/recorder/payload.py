"""The recorder's values on their way from the model to the run log.

On the training thread an event's tensors are only staged (``stage``: a non-blocking host copy or
a CPU clone), so the hot path never waits for an accelerator; on the writer thread a snapshot of
the buffers becomes numpy (``to_host``) and then rows (``payload_rows``, built by the torch-free
``aah_viz.runlog.rows``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from aah_viz.runlog import rows
from aah_viz.schema import group_column
from instrumentation.recorder.validity_rows import validity_columns


def stage(value: torch.Tensor) -> torch.Tensor:
    """A private copy on the host (non-blocking from a GPU) or on the CPU (a clone)."""
    value = value.detach()
    if value.device.type == "cpu":
        return value.clone()
    return value.to("cpu", non_blocking=True)


def keep(value: torch.Tensor) -> torch.Tensor:
    """Tree tensors are built fresh for each update: on the host they need no copy."""
    if value.device.type != "cpu":
        return stage(value)
    return value.detach() if value.requires_grad else value


def stage_value(value: Any) -> Any:
    """``stage`` for tensors; other values as they are."""
    return stage(value) if isinstance(value, torch.Tensor) else value


def to_host(value: Any) -> Any:
    """Tensors inside dicts, lists and tuples as numpy arrays (half precision as float32)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype in (torch.bfloat16, torch.float16) else value).numpy()
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    return value


def stack_host(rows: list[list[torch.Tensor]]) -> np.ndarray:
    """Steps x layers of (H,) tensors as one (S, L, H) array."""
    return torch.stack([torch.stack(r) for r in rows]).numpy()


def stage_update(ev, step: int, layer: int, *, features: bool) -> dict:
    """A routing update's tree (and the level-0 clustering features, for the partition's validity)."""
    levels = [
        {
            "level": tl.level,
            "groups": tl.groups,
            "parent": tl.parent,
            "members": tl.members,
            "logits": keep(tl.logits),
            "base_logits": keep(tl.base_logits),
            "raw_idx": keep(tl.raw_idx),
            "final_idx": keep(tl.final_idx),
            "joint_paired": list(tl.joint_paired),
            "facts": tl.facts,
            "features": stage(tl.features) if (features and tl.features is not None) else None,
        }
        for tl in ev.tree
    ]
    # fixed and frozen paths cluster nothing: no level-0 features
    level0 = stage(ev.head_features) if ev.head_features is not None else None
    return {"step": step, "layer": layer, "shadow": not ev.applied, "levels": levels, "features": level0}


def restore_groups(run_dir: Path, groups: np.ndarray) -> tuple[set[int], bool]:
    """After a resume: fill ``groups`` (L, depth, H) with the last step's groups per head; return the
    layers that already froze their topology and whether warm-up already ended."""
    from aah_viz.runlog import load_run

    run = load_run(run_dir)
    heads = run.table("heads")
    if heads is not None and len(heads):
        last = heads[heads["step"] == heads["step"].max()]
        layer, head = last["layer"].to_numpy(dtype=np.int64), last["head"].to_numpy(dtype=np.int64)
        for level in range(groups.shape[1]):
            col = group_column(level)
            if col in last.columns:
                groups[layer, level, head] = last[col].fillna(-1).to_numpy(dtype=np.int64)
    events = run.table("events")
    if events is None or not len(events):
        return set(), False
    kinds = events["kind"].astype(str)
    frozen = {int(l) for l in events.loc[kinds == "freeze", "layer"].dropna()}
    return frozen, bool((kinds == "warmup_end").any())


def payload_rows(
    p: dict, *, detail: str, max_depth: int, w_min: int, flops_shape, sim_threshold: float, sinks: int = 0
) -> list[tuple[str, dict]]:
    """Every ``(table, columns)`` one buffered snapshot writes (on the writer thread)."""
    out = []
    scalars = to_host(p["scalars"])
    if p["steps"]:
        win = stack_host(p["win"])
        raw = np.full(win.shape, -1, dtype=np.int64)
        for s, per_layer in enumerate(p["raw"]):
            for layer, t in per_layer.items():
                raw[s, layer] = t.numpy()
        work = [{layer: rows.float_or_none(v) for layer, v in d.items()} for d in to_host(p["work"])]
        out += rows.step_tables(
            np.asarray(p["steps"], dtype=np.int64),
            stack_host(p["idx"]),
            win,
            np.asarray(p["T"], dtype=np.int64),
            np.stack(p["groups"]) if max_depth else None,
            raw,
            work,
            scalars,
            w_min=w_min,
            flops_shape=flops_shape,
            branch=detail != "minimal",
            sinks=sinks,
        )
    elif scalars:
        out.append(("scalars", rows.model_scalar_columns(scalars, [])))
    if p["layer_scalars"]:
        steps, layers, names, values = zip(*to_host(p["layer_scalars"]))
        out.append(("scalars", rows.scalar_columns(list(steps), list(names), list(values), layers=list(layers))))
    if p["updates"] and detail != "minimal":
        updates = to_host(p["updates"])
        tree = rows.tree_columns(updates, keep_vectors=detail == "full")
        if tree["step"]:
            out.append(("tree", tree))
        validity = validity_columns(updates, sim_threshold)
        if validity:
            out.append(("cluster_validity", validity))
    if p["events"]:
        out.append(("events", rows.event_columns(p["events"])))
    return out
