"""Lazy access to the torch side, with one clear message when it is not installed."""

from __future__ import annotations

from aah_viz.errors import MissingDependencyError

INSTALL_HINT = (
    "install the model side with: pip install 'aah-viz[torch]' (in a checkout: pip install -e '.[torch]'); "
    "torch==2.13.0, the CPU build"
)


def require_torch():
    """Import and return torch, or raise MissingDependencyError saying how to install it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - exercised in the no-torch test
        raise MissingDependencyError(f"this command needs PyTorch, which is not installed; {INSTALL_HINT}") from err
    return torch
