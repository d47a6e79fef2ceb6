"""Where the dashboard reads from: the logs root and the reference folder.

Given on the command line after ``--`` (``streamlit run app.py -- --logs DIR``), or through the
environment (``AAH_VIZ_LOGS``, ``AAH_VIZ_REFERENCE``), which ``aah-viz dashboard`` sets. The default
logs root is ``./runs`` when it exists, else, in a checkout of the repository, its ``sample_logs/``;
the default reference is the paper's published numbers that ship with the package.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from aah_viz import bundled
from aah_viz.errors import RunLogError

LOGS_ENV = "AAH_VIZ_LOGS"
REFERENCE_ENV = "AAH_VIZ_REFERENCE"
RUNS_DIR = "runs"  # where `aah-viz train --out runs/NAME` puts runs, as in the README


def _parse_argv(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--logs")
    parser.add_argument("--reference")
    args, _ = parser.parse_known_args(argv)
    return args


def checkout_root() -> Path | None:
    """The repository root when the package is imported from a checkout (not from an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "aah_viz").is_dir() else None


def default_logs_root() -> Path:
    """``./runs`` when it exists, else the checkout's ``sample_logs/``; else an error naming ``--logs``."""
    if (Path.cwd() / RUNS_DIR).is_dir():
        return (Path.cwd() / RUNS_DIR).resolve()
    root = checkout_root()
    if root is not None and (root / "sample_logs").is_dir():
        return (root / "sample_logs").resolve()
    raise RunLogError(
        f"no logs root: {Path.cwd() / RUNS_DIR} does not exist; give --logs DIR, a folder holding run directories"
    )


def default_reference_dir() -> Path:
    return bundled.reference_paper_dir()


def logs_root(argv: list[str] | None = None) -> Path:
    args = _parse_argv(list(argv or []))
    text = args.logs or os.environ.get(LOGS_ENV)
    return Path(text).expanduser().resolve() if text else default_logs_root()


def reference_dir(argv: list[str] | None = None) -> Path | None:
    args = _parse_argv(list(argv or []))
    text = args.reference or os.environ.get(REFERENCE_ENV)
    if text:
        path = Path(text).expanduser().resolve()
        return path if path.is_dir() else None
    return default_reference_dir()
