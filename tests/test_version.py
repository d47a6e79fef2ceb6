"""``aah-viz --version`` prints the version the package metadata carries (one source: aah_viz.__version__)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import aah_viz


def test_version_flag_prints_the_installed_metadata_version():
    res = subprocess.run(
        [sys.executable, "-m", "aah_viz", "--version"], capture_output=True, text=True, timeout=120, check=True
    )
    assert res.stdout.strip() == f"aah-viz {metadata.version('aah-viz')}"
    assert metadata.version("aah-viz") == aah_viz.__version__
