"""Files that ship inside the package (``aah_viz/data/``): the synthetic probe set, the reader
fixtures, and the paper's published numbers. Installed commands read these, never the source tree."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(*parts: str) -> Path:
    """A file or folder under ``aah_viz/data/`` of the installed package."""
    return Path(str(resources.files("aah_viz").joinpath("data", *parts)))


def reference_paper_dir() -> Path:
    """The paper's published tables and Qwen3-4B heatmaps (``aah_viz/data/reference/paper/``)."""
    return data_path("reference", "paper")
