"""AAH-v3 on pretrained Hugging Face models (see docs/retrofit.md).

``patch_model(model, regime, windows, **overrides)`` patches every self-attention in place and
returns a ``RetrofitHandle`` (also ``model.aah_routing``); ``save_adapter`` / ``load_adapter``
store and restore the AAH parameters and routing state; ``WindowedKVCache`` is the key/value cache
bounded per head by the windows, for ``generate``.
"""

from instrumentation.retrofit.adapter import load_adapter, read_adapter, save_adapter
from instrumentation.retrofit.kv_cache import WindowedKVCache, cache_bytes
from instrumentation.retrofit.patch import (
    PAPER_WINDOWS,
    TRAIN_CHOICES,
    RetrofitHandle,
    attention_modules,
    patch_model,
    patch_with_config,
    retrofit_config,
    routing_handle,
)

__all__ = [
    "PAPER_WINDOWS",
    "TRAIN_CHOICES",
    "RetrofitHandle",
    "WindowedKVCache",
    "attention_modules",
    "cache_bytes",
    "load_adapter",
    "patch_model",
    "patch_with_config",
    "read_adapter",
    "retrofit_config",
    "routing_handle",
    "save_adapter",
]
