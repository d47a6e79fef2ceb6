"""The pages of a sweep's worth of runs through Streamlit's test runner: the Runs table in pages sorted
over every run, the settings diff of many runs as a list, and Export's table of many runs built when asked
(equal to the table built at once from the same runs)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S

from aah_viz.cli._many_runs import make_many_runs
from aah_viz.dashboard.app import PAGE_DIR, PAGE_FILES
from aah_viz.dashboard.views import export, runs
from aah_viz.export.formats import display_frame
from aah_viz.export.tables import build_table
from aah_viz.runlog import load_run

APP = str(PAGE_DIR / "app.py")
N_RUNS = runs.PAGE_ROWS + 7

pytestmark = pytest.mark.slow  # a minute: hundreds of runs through every page drawn


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("many")
    make_many_runs(root, N_RUNS, steps=20, flush_every=10)
    return root


def test_the_runs_table_holds_one_page_sorted_over_every_run(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception
    names = sorted(p.name for p in logs.iterdir())
    first = at.dataframe[0].value
    assert len(first) == runs.PAGE_ROWS and list(first["run"]) == names[: runs.PAGE_ROWS]
    at.number_input(key="runs_page").set_value(2).run()
    assert list(at.dataframe[0].value["run"]) == names[runs.PAGE_ROWS :]
    # sorted over every run, not within the page: the largest seeds first, on page 1
    at.number_input(key="runs_page").set_value(1).run()
    at.selectbox(key="runs_sort").set_value("seed").run()
    at.toggle(key="runs_sort_desc").set_value(True).run()
    seeds = {name: load_run(logs / name).seed for name in names}
    want = sorted(names, key=lambda n: -seeds[n])[: runs.PAGE_ROWS]  # a stable sort, as the page's
    assert list(at.dataframe[0].value["run"]) == want
    # every run selected: the settings that differ are named, not drawn as a table of hundreds of columns
    caption = next(c.value for c in at.caption if "fields differ between the" in c.value)
    assert f"between the {N_RUNS} selected runs" in caption and "seed" in caption
    assert len(at.dataframe) == 1


def test_exports_table_of_many_runs_is_built_when_asked_and_equals_the_table(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["export"]).run()
    assert not at.exception
    assert not at.dataframe  # the table is not built yet
    assert export.BUILD_AT_ONCE < N_RUNS
    at.button(key="exp_table_build").click().run()
    table = at.dataframe[0].value
    assert len(table) == N_RUNS  # the generated runs share one configuration
    want = build_table(at.selectbox(key="exp_table").value, [load_run(p) for p in sorted(logs.iterdir())], by="run")
    shown = display_frame(want)  # the preview as the downloaded text prints it
    assert table.sort_values("run").reset_index(drop=True).equals(shown.sort_values("run").reset_index(drop=True))
    at.run()  # built once: kept on the next draw
    assert at.dataframe[0].value.equals(table)
