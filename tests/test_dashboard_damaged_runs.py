"""Damaged and unfinished runs on every dashboard page (``streamlit.testing.v1.AppTest``, real run folders).

A damaged run must never take a page down, and what ``validate`` says about it the pages say too.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.cli import main
from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.runlog import paths, validate_run
from aah_viz.samples import make_synthetic_run

APP = str(Path(__file__).resolve().parents[1] / "app.py")

pytestmark = pytest.mark.timeout(TEST_S)


def open_every_page(root: Path, monkeypatch, tmp_path) -> AppTest:
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for page, file in PAGE_FILES.items():
        at.switch_page(file).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    return at


def make_scalars_nan(run: Path) -> int:
    """Every value of the scalars table becomes NaN, in place (as a damaged copy would hold); returns the rows."""
    rows = 0
    for seg in paths.list_segments(run / "scalars"):
        table = pq.read_table(seg)
        column = table.schema.get_field_index("value")
        table = table.set_column(column, "value", pa.array([float("nan")] * table.num_rows, pa.float64()))
        pq.write_table(table, seg)
        rows += table.num_rows
    return rows


def test_a_run_whose_scalars_are_all_nan_is_damaged_and_every_page_still_opens(tmp_path, monkeypatch, capsys):
    root = tmp_path / "logs"
    run = make_synthetic_run(root / "nan", n_layer=2, n_head=4, steps=20, flush_every=5)
    assert make_scalars_nan(run) > 0
    problems = validate_run(run)
    assert any(p.startswith("scalars: 12 model-wide scalars hold no finite value") for p in problems), problems
    assert any("model-wide acr disagrees with the heads table at 20 of 20 points" in p for p in problems), problems
    assert main(["validate", str(run)]) == 2
    capsys.readouterr()
    open_every_page(root, monkeypatch, tmp_path)


def test_duplicated_rows_that_validate_flags_are_named_on_the_runs_page(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    run = make_synthetic_run(root / "dup", n_layer=2, n_head=4, steps=20, flush_every=5)
    seg = paths.list_segments(run / "heads")[1]  # steps 5-9
    (run / "heads" / "part-99999999999999999999-000000.parquet").write_bytes(seg.read_bytes())
    assert any("rows share a (step, layer, head) key" in p for p in validate_run(run))
    at = open_every_page(root, monkeypatch, tmp_path)
    at.switch_page(PAGE_FILES["runs"]).run()
    shown = [w.value.replace("\\", "") for w in at.warning]
    assert any(w.startswith("Run dup: heads: 5 steps recorded more than once (5-9)") for w in shown), shown
