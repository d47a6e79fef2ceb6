"""Lazy access to the torch side and the other optional extras, with one clear message when one is missing."""

from __future__ import annotations

import contextlib
import os

from aah_viz.errors import ConfigError, MissingDependencyError

MAX_THREADS = 4096

INSTALL_HINT = (
    "install the model side with: pip install 'aah-viz[torch]' (in a checkout: pip install -e '.[torch]'); "
    "torch==2.13.0, the CPU build"
)
NO_TORCH = f"this command needs PyTorch, which is not installed; {INSTALL_HINT}"
# optional dependency -> the extra of pyproject.toml that installs it
EXTRAS = {
    "torch": "torch",
    "transformers": "hf",
    "accelerate": "hf",
    "lightning": "lightning",
    "kaleido": "export",
    "tensorboard": "report",
    "wandb": "wandb",
    "mlflow": "mlflow",
}


def require_torch():
    """Import and return torch, or raise MissingDependencyError saying how to install it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - exercised in the no-torch test
        raise MissingDependencyError(NO_TORCH) from err
    return torch


def missing_extra(err: ModuleNotFoundError) -> MissingDependencyError | None:
    """The one-line error for a missing optional dependency, or None when the missing module is none of
    them (a module of this project or a required dependency: a bug or a broken install, to be shown whole)."""
    name = (err.name or "").split(".")[0]
    if name == "torch":
        return MissingDependencyError(NO_TORCH)
    if name in EXTRAS:
        return MissingDependencyError(
            f"this command needs {name}, which is not installed; install it with: pip install 'aah-viz[{EXTRAS[name]}]'"
        )
    return None


def quiet_model_loading() -> None:
    """No progress bar from transformers while a model loads (where transformers is installed)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


def limit_threads(threads):
    """``--threads N``, the one way every command applies it: torch's pools (intra- and inter-op), the BLAS
    and OpenMP libraries loaded (threadpoolctl: numpy's scoring) and a fast tokenizer's (Rayon, read when
    its pool starts). None or 0 leaves their own choice; anything but 1..MAX_THREADS is one line. The limits
    hold from the call on; used as a context, the BLAS and OpenMP limits are put back at its end. Needs
    torch either way (a missing torch is its one-line error)."""
    torch = require_torch()
    if threads is None or threads == 0:
        return contextlib.nullcontext()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"--threads must be an integer from 1 to {MAX_THREADS}, got {threads!r}")
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # set once per process (an earlier command in this process did, or work began)
        pass
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    return threadpool_limits(limits=threads)


def threads_in_use() -> dict:
    """The threads torch and the BLAS may use now, as commands report them."""
    from threadpoolctl import threadpool_info

    blas = [int(p.get("num_threads", 0)) for p in threadpool_info()]
    return {"torch": int(require_torch().get_num_threads()), "blas": max(blas, default=None)}
