"""Attention execution backends: ``fn(q, k, v, windows, ...) -> AttentionResult``.

``get_backend(name, device=..., training=..., dropout_p=...)`` returns ``(fn, resolved_name,
fallback_reason)``. A backend that cannot run in the requested setting falls back to
``banded`` with a ``warnings.warn`` naming the reason; the reason is returned so the model can
record it in the run manifest. See docs/backends.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from aah_viz.errors import ConfigError
from instrumentation.config import CHOICES

from .result import AttentionResult, HeadStats
from .windows import acr, band_pairs, bucket_heads, causal_coverage, causal_pairs, clamp_window

BACKENDS = CHOICES["attention_backend"]
FALLBACK = "banded"

__all__ = [
    "AttentionResult",
    "BACKENDS",
    "FALLBACK",
    "HeadStats",
    "acr",
    "band_pairs",
    "bucket_heads",
    "causal_coverage",
    "causal_pairs",
    "clamp_window",
    "get_backend",
    "unavailable_reason",
]


def _load(name: str) -> Callable:
    if name == "dense_masked":
        from .dense_masked import dense_masked_attention

        return dense_masked_attention
    if name == "banded":
        from .banded import banded_attention

        return banded_attention
    if name == "flex":
        from .flex import flex_attention_backend

        return flex_attention_backend
    from .flash import flash_attention_backend

    return flash_attention_backend


def unavailable_reason(name: str, *, device=None, training: bool = False, dropout_p: float = 0.0) -> str | None:
    """Why backend ``name`` cannot run in this setting, or None when it can."""
    if name == "flex":
        from .flex import unavailable_reason as why
    elif name == "flash":
        from .flash import unavailable_reason as why
    else:
        return None
    return why(device=device, training=training, dropout_p=dropout_p)


def get_backend(
    name: str, *, device=None, training: bool = False, dropout_p: float = 0.0
) -> tuple[Callable[..., AttentionResult], str, str | None]:
    """Resolve a backend name to ``(fn, resolved_name, fallback_reason)``.

    Unknown names raise ConfigError naming the allowed values. ``flex`` and ``flash`` fall back
    to ``banded`` (with a warning) where they cannot run: the reason is the third element.
    """
    if name not in BACKENDS:
        raise ConfigError(f"attention_backend: unknown backend {name!r}; allowed values are {', '.join(BACKENDS)}")
    reason = unavailable_reason(name, device=device, training=training, dropout_p=dropout_p)
    if reason is not None:
        warnings.warn(
            f"attention backend {name!r} is unavailable here ({reason}); falling back to {FALLBACK!r}",
            RuntimeWarning,
            stacklevel=2,
        )
        return _load(FALLBACK), FALLBACK, f"{name}: {reason}"
    return _load(name), name, None
