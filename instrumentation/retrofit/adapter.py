"""Adapters: the AAH parameters and routing state of a patched model in one safetensors file.

Nothing of the base model is stored: an adapter loads onto a fresh copy of the same pretrained
model. Tensors (parameters, and the routing state's tensors) are safetensors entries; the config
and the routing state's plain values (groups, topology, steps) are JSON in the file's metadata.
Loading parses JSON and reads tensors; nothing is unpickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aah_viz.errors import ConfigError
from aah_viz.runlog import bounded_json
from aah_viz.runlog.paths import atomic_path
from instrumentation.config import AAHConfig
from instrumentation.retrofit.patch import RetrofitHandle, patch_with_config, routing_handle

FORMAT = "aah-viz-adapter/1"
_STATE = "_extra_state"


def _split_state(layer: nn.Module, prefix: str, tensors: dict, plain: dict) -> None:
    for name, value in layer.state_dict().items():
        if name == _STATE:
            if not value:
                continue
            state = {}
            for field, v in value.get("routing_state", {}).items():
                if isinstance(v, torch.Tensor):
                    tensors[f"{prefix}state.{field}"] = v.detach().cpu().contiguous().clone()
                else:
                    state[field] = v
            plain[prefix] = {"routing_state": state, "step": value.get("step")}
        else:
            tensors[f"{prefix}{name}"] = value.detach().cpu().contiguous().clone()


def save_adapter(
    handle: RetrofitHandle, path: str | Path, *, base_parameters: list[str] | None = None, **metadata: Any
) -> Path:
    """Write ``handle``'s AAH parameters, routing state and config to ``path`` (atomically).

    ``base_parameters`` names parameters of the base model that adaptation trained too (the output
    head with ``--train aah+head``); they are stored as ``model.<name>`` and loaded back with the rest.
    """
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, Any] = {}
    for i, layer in enumerate(handle.attention_layers()):
        _split_state(layer, f"layers.{i}.", tensors, plain)
    if base_parameters:
        named = dict(handle.model.named_parameters())
        for name in base_parameters:
            tensors[f"model.{name}"] = named[name].detach().cpu().contiguous().clone()
    meta = {
        "format": FORMAT,
        "config": json.dumps(handle.cfg.to_dict()),
        "routing_state": json.dumps(plain),
        "extra": json.dumps(metadata, default=str),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
    return path


def read_adapter(path: str | Path) -> tuple[AAHConfig, dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """(config, tensors, routing-state plain values, extra metadata) of an adapter file."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"adapter {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
    except Exception as err:  # a truncated or foreign file
        raise ConfigError(f"adapter {path} is not a safetensors file: {err}") from err
    if meta.get("format") != FORMAT:
        raise ConfigError(f"adapter {path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        cfg_doc, state, extra = (bounded_json.loads(meta.get(k, "{}")) for k in ("config", "routing_state", "extra"))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"adapter {path}: its metadata is not the JSON an adapter holds ({err})") from None
    if not all(isinstance(d, dict) for d in (cfg_doc, state, extra)):
        raise ConfigError(f"adapter {path}: its metadata config, routing_state and extra must be JSON objects")
    return AAHConfig.from_dict(cfg_doc), tensors, state, extra


def load_adapter(model: nn.Module, path: str | Path) -> RetrofitHandle:
    """Patch ``model`` (an unpatched copy of the base model) with the adapter's config, parameters
    and routing state; returns the handle. A model already patched gets the parameters and state only
    (its config must match the adapter's)."""
    cfg, tensors, plain, _ = read_adapter(path)
    handle = routing_handle(model)
    if handle is None:
        handle = patch_with_config(model, cfg)
    elif handle.cfg.to_dict() != cfg.to_dict():
        raise ConfigError(f"adapter {path} was saved with another config than the model is patched with")
    for i, layer in enumerate(handle.attention_layers()):
        prefix = f"layers.{i}."
        mine = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        state = {k[len("state.") :]: v for k, v in mine.items() if k.startswith("state.")}
        params = {k: v for k, v in mine.items() if not k.startswith("state.")}
        own = layer.state_dict()
        missing = sorted(set(own) - set(params) - {_STATE})
        if missing:
            raise ConfigError(f"adapter {path}: layer {i} lacks {', '.join(missing)}")
        with torch.no_grad():
            for name, value in params.items():
                own[name].copy_(value)
        if prefix in plain:
            routing = dict(plain[prefix]["routing_state"], **state)
            layer.set_extra_state({"routing_state": routing, "step": plain[prefix]["step"]})
    base = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    if base:
        named = dict(model.named_parameters())
        unknown = sorted(set(base) - set(named))
        if unknown:
            raise ConfigError(f"adapter {path}: the model has no parameter {', '.join(unknown[:3])}")
        with torch.no_grad():
            for name, value in base.items():
                named[name].copy_(value)
    return handle
