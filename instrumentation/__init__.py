"""The model side of aah-viz (needs torch): the AAH-v3 model, its regimes, backends and recorder.

    from instrumentation import AAHConfig, AAHTransformer
    cfg = AAHConfig.from_preset("tiny", regime="shallow_freeze")
    model = AAHTransformer(cfg)

Names are imported on first use, so ``instrumentation.config`` (the config, presets and regimes)
can be read without torch, and a missing optional module never breaks the others.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "AAHConfig": "instrumentation.config",
    "PRESETS": "instrumentation.config",
    "REGIMES": "instrumentation.config",
    "AAHTransformer": "instrumentation.model",
    "ModelOutput": "instrumentation.model",
    "RoutingEvent": "instrumentation.events",
    "TreeLevel": "instrumentation.events",
    "ClusterFacts": "instrumentation.events",
    "RoutingRecorder": "instrumentation.recorder",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'instrumentation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
