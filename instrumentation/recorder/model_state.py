"""What ``RoutingRecorder`` reads from the model and the machine, and how its values reach the host.

A model is recorded through its ``RoutedLayers`` interface (``instrumentation/routed_layers.py``:
``cfg``, ``attention_layers()``, ``subscribe``, ``current_windows``, ``controller_parameters``,
``controller_initial_parameters``): an ``AAHTransformer`` offers it itself, a Hugging Face model
patched by ``instrumentation.retrofit.patch_model`` carries it as ``model.aah_routing``, and a
data-parallel wrapper holds either as ``model.module``.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import torch

from aah_viz.errors import ConfigError
from instrumentation.recorder.payload import stage
from instrumentation.routed_layers import grad_norm, weight_drift

ROUTED_INTERFACE = (
    "cfg",
    "attention_layers",
    "subscribe",
    "current_windows",
    "controller_parameters",
    "controller_initial_parameters",
)
FREEZE_MODES = ("freeze_learned_topology", "freeze_after_warmup")


def routed_layers(model: Any):
    """The ``RoutedLayers`` of ``model`` (unwrapping ``.module`` and a patched model's ``.aah_routing``)."""
    inner = getattr(model, "module", model)
    routed = getattr(inner, "aah_routing", inner)
    missing = [name for name in ROUTED_INTERFACE if not hasattr(routed, name)]
    if missing:
        raise ConfigError(
            f"RoutingRecorder needs an AAHTransformer or a model patched by instrumentation.retrofit.patch_model; "
            f"{type(model).__name__} lacks {', '.join(missing)}"
        )
    return routed


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter (CPU for a model without any)."""
    params = getattr(model, "parameters", None)
    for p in params() if params is not None else ():
        return p.device
    return torch.device("cpu")


def run_manifest(cfg, run_dir: Path, *, run_id, backend, extra: dict, **fields: Any) -> dict:
    """The manifest of a new run of a model with config ``cfg`` (``fields``: seed, preset, steps, data, recorder).
    ``extra`` may name the ``seq_len`` the run trains at, where it is not the config's block_size (a retrofit)."""
    from aah_viz.runlog import make_manifest

    extra = dict(extra)
    seq_len = int(extra.pop("seq_len", cfg.block_size))

    return make_manifest(
        run_id=run_id or Path(run_dir).name,
        regime=cfg.regime,
        config=cfg.to_dict(),
        windows=[int(w) for w in cfg.windows],
        seq_len=seq_len,
        n_layer=int(cfg.n_layer),
        n_head=int(cfg.n_head),
        max_depth=int(cfg.max_depth or 1),
        world_size=dist_world_size(),
        backend=backend or cfg.attention_backend,
        **fields,
        **extra,
    )


# ---------------------------------------------------------------------------- windows
def candidate_index(windows: torch.Tensor, candidates: tuple[int, ...]) -> torch.Tensor:
    """Index of each window among the candidates; -1 (stored as null) where it is none of them."""
    cands = torch.tensor(candidates, dtype=torch.long)
    pos = torch.searchsorted(cands, windows).clamp(max=len(cands) - 1)
    return torch.where(cands[pos] == windows, pos, torch.full_like(pos, -1))


def static_windows(routed, candidates: tuple[int, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer (window_idx, window) before any event: the model's current windows."""
    windows = routed.current_windows().detach().to("cpu", torch.long)
    idx = candidate_index(windows, candidates)
    return [i.clone() for i in idx], [w.clone() for w in windows]


def freezes_topology(cfg, ev) -> bool:
    """Does this applied update store the layer's frozen topology (the first one in a freeze mode)?"""
    if ev.froze_topology is not None:
        return bool(ev.froze_topology)
    return cfg.hierarchy_ablation_mode in FREEZE_MODES


# ---------------------------------------------------------------------------- the routing networks
class ControllerHealth:
    """Per-step gradient norm and weight drift of the routing networks, as device tensors (no sync).

    Drift is measured from ``given`` weights, else the model's own initial copies, else the weights
    at attach. Without any gradient the optimiser leaves the weights alone (AdamW skips parameters
    without a gradient, weight decay included), so the drift is then the last value computed.
    """

    def __init__(self, routed, given: list[torch.Tensor] | None):
        self.params = list(routed.controller_parameters())
        if given is not None:
            self.reference = [t.detach().to(p.device, p.dtype).clone() for t, p in zip(given, self.params)]
        else:
            init = list(routed.controller_initial_parameters())
            same = len(init) == len(self.params)
            self.reference = init if same else [p.detach().clone() for p in self.params]
        self._last_drift = None

    def __call__(self) -> tuple[Any, Any]:
        if not self.params:
            return 0.0, 0.0
        has_grad = any(p.grad is not None for p in self.params)
        if not has_grad and self._last_drift is not None:
            return 0.0, self._last_drift
        norm = stage(grad_norm(self.params)) if has_grad else 0.0
        self._last_drift = stage(weight_drift(self.params, self.reference))
        return norm, self._last_drift


# ---------------------------------------------------------------------------- the machine
def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20  # a host-side counter: no sync
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def dist_rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def dist_world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
