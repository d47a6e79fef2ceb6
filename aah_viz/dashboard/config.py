"""Where the dashboard reads from: the logs root and the reference folder.

Given on the command line after ``--`` (``streamlit run app.py -- --logs DIR``), or through the
environment (``AAH_VIZ_LOGS``, ``AAH_VIZ_REFERENCE``), which ``aah-viz dashboard`` sets. The default
logs root is ``sample_logs/`` of the repository (or of the current folder).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

LOGS_ENV = "AAH_VIZ_LOGS"
REFERENCE_ENV = "AAH_VIZ_REFERENCE"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _parse_argv(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--logs")
    parser.add_argument("--reference")
    args, _ = parser.parse_known_args(argv)
    return args


def default_logs_root() -> Path:
    for base in (Path.cwd(), REPO_ROOT):
        if (base / "sample_logs").is_dir():
            return (base / "sample_logs").resolve()
    return (REPO_ROOT / "sample_logs").resolve()


def default_reference_dir() -> Path | None:
    candidate = (REPO_ROOT.parent / "shared" / "reference" / "paper").resolve()
    return candidate if candidate.is_dir() else None


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
