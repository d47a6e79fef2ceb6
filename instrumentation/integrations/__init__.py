"""Adapters that attach the ``RoutingRecorder`` to other training frameworks (optional extras).

- ``instrumentation.integrations.hf``: a Hugging Face ``transformers`` ``TrainerCallback``
  (extra ``hf``), plus ``AAHForCausalLM``, the thin ``nn.Module`` the ``Trainer`` trains;
- ``instrumentation.integrations.lightning``: a PyTorch Lightning ``Callback`` (extra ``lightning``).

Both call ``model.prepare_step(global_step)`` before every training forward, as ``aah-viz train``
does: ``set_step`` (AAH routing keys its warm-up and control schedule on it), then
``set_control(apply_window_control)`` (so that with control off the hierarchy is rebuilt every
step); they close one recorder step per optimiser step. Importing
this package imports neither framework.
"""

from __future__ import annotations

from typing import Any

import torch


def prepare_step(model, step: int) -> None:
    """``model.prepare_step(step)``; ``set_step`` for a routing handle that has only that."""
    prepare = getattr(model, "prepare_step", None)
    (prepare or model.set_step)(int(step))


def find_aah_model(obj: Any) -> torch.nn.Module:
    """The AAHTransformer inside ``obj`` (itself, a ``.module`` / ``.model`` / ``.aah`` attribute chain),
    or the routing handle of a Hugging Face model patched by ``instrumentation.retrofit``."""
    seen = set()
    stack = [obj]
    while stack:
        cur = stack.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        handle = getattr(cur, "aah_routing", None)  # a Hugging Face model patched by instrumentation.retrofit
        if handle is not None:
            return handle
        if hasattr(cur, "set_step") and hasattr(cur, "current_windows") and hasattr(cur, "subscribe"):
            return cur
        for name in ("aah", "model", "module", "_orig_mod"):
            child = getattr(cur, name, None)
            if isinstance(child, torch.nn.Module):
                stack.append(child)
    from aah_viz.errors import ConfigError

    raise ConfigError(
        f"no AAH model found in {type(obj).__name__}: pass the AAHTransformer (or a module holding it as .aah, "
        f".model or .module) to the callback"
    )


__all__ = ["find_aah_model"]
