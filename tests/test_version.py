"""``aah-viz --version`` prints the version the package metadata carries (one source: aah_viz.__version__)."""

from __future__ import annotations

import sys
from importlib import metadata

import waiting

import aah_viz


def test_version_flag_prints_the_installed_metadata_version():
    res = waiting.run(
        [sys.executable, "-m", "aah_viz", "--version"], "aah-viz --version", capture_output=True, text=True, check=True
    )
    assert res.stdout.strip() == f"aah-viz {metadata.version('aah-viz')}"
    assert metadata.version("aah-viz") == aah_viz.__version__
