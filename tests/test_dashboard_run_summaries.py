"""The Runs and Compare pages read each run's ``summary.json`` and show exactly what they show from the tables
(runs recorded before it), through Streamlit's test runner, on runs including a damaged and a live one."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.runlog import run_summary
from aah_viz.samples import make_synthetic_run

APP = str(Path(__file__).resolve().parents[1] / "app.py")
pytestmark = pytest.mark.timeout(TEST_S)


def drawn(root, monkeypatch, tmp_path) -> dict:
    """What Runs and Compare show of the runs under ``root``, every cache cleared first."""
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["runs"]).run()
    assert not at.exception, [e.value for e in at.exception]
    out = {
        "runs": at.dataframe[0].value,
        "boxes": sorted(w.value for w in at.warning) + sorted(e.value for e in at.error),
    }
    at.switch_page(PAGE_FILES["compare"]).run()
    assert not at.exception, [e.value for e in at.exception]
    out["compare"] = [d.value for d in at.dataframe]
    out["compare_boxes"] = sorted(w.value for w in at.warning)
    return out


def test_pages_from_summaries_equal_pages_from_tables(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    shape = dict(n_layer=2, n_head=4, steps=40, flush_every=10)
    make_synthetic_run(root / "a0", regime="full_adaptive", seed=0, **shape)
    make_synthetic_run(root / "f1", regime="full_attention", seed=1, **shape)
    make_synthetic_run(root / "live", regime="full_adaptive", seed=2, status="running", **shape)
    damaged = make_synthetic_run(root / "damaged", regime="grouping_off", seed=3, **shape)
    sorted((damaged / "heads").glob("*.parquet"))[1].unlink()  # steps 10-19 lost: its summary is stale
    assert run_summary.read(root / "a0") is not None and run_summary.read(damaged) is None
    with_summaries = drawn(root, monkeypatch, tmp_path)
    for run in ("a0", "f1", "live"):
        (root / run / "summary.json").unlink()
    from_tables = drawn(root, monkeypatch, tmp_path)
    assert with_summaries["runs"].equals(from_tables["runs"])
    assert with_summaries["runs"]["last-batch train loss"].notna().all()  # figures to compare, not blanks
    assert len(with_summaries["runs"]) == 4 and set(with_summaries["runs"]["status"]) == {"finished", "running"}
    assert with_summaries["boxes"] == from_tables["boxes"]
    assert any("missing (10-19)" in b for b in with_summaries["boxes"])
    assert len(with_summaries["compare"]) == len(from_tables["compare"]) > 0
    for a, b in zip(with_summaries["compare"], from_tables["compare"]):
        assert a.equals(b)
    assert with_summaries["compare_boxes"] == from_tables["compare_boxes"]
