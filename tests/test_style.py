"""House style: ruff's lint and format rules (configured in pyproject.toml) hold for the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed; it comes with the dev extra: pip install -e '.[dev]'")
    return [found]


@pytest.mark.parametrize("args", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]])
def test_ruff_passes(args):
    proc = subprocess.run(_ruff() + args, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
