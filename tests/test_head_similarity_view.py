"""The head-similarity view: figure data from the table, and the Stability page's section (AppTest on a
real run directory with the table written by the command)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import head_similarity as hs
from aah_viz.cli import main
from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.figures import head_similarity as hfig
from aah_viz.runlog import load_run

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
SAMPLE = REPO / "sample_logs" / "full_adaptive_seed0"

pytestmark = pytest.mark.timeout(TEST_S)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    shutil.copytree(SAMPLE, root / "run")
    args = ["head-similarity", str(root / "run"), "--no-progress", "--agreement-samples", "99", "--null-samples", "50"]
    assert main(args) == 0
    shutil.copytree(SAMPLE, root / "bare", ignore=shutil.ignore_patterns("head_similarity"))  # no table
    return root


def _table(logs):
    return load_run(logs / "run").table("head_similarity")


def test_the_grid_classes_are_the_rows_verdicts(logs):
    table = _table(logs)
    grid = hfig.verdict_grid(table, "method")
    rows = hs.groupings(table)
    rows = rows[rows["procedure"] == "method"]
    assert len(grid) == len(rows)
    for _, r in rows.iterrows():
        cell = grid[(grid["similarity"] == r["similarity"]) & (grid["layer"] == r["layer"])].iloc[0]
        if r["verdict"] == cv.UNDEFINED:
            assert cell["cls"] == 0
        else:  # no halves in a table-only run: real only or chance
            assert cell["cls"] == (3 if r["verdict"] == cv.REAL else 1)
    assert [
        hfig.cell_class(v, s) for v, s in [(cv.REAL, hs.STABLE), (cv.CHANCE, hs.STABLE), (cv.REAL, hs.UNSTABLE)]
    ] == [
        4,
        2,
        3,
    ]


def test_the_agreement_grid_is_the_agreement_rows(logs):
    table = _table(logs)
    grid = hfig.agreement_grid(table, "probe", "method")
    pairs = hs.agreements(table)
    pairs = pairs[(pairs["procedure"] == "method") & (pairs["other"] == "probe")]
    assert len(grid) == len(pairs) and set(grid["similarity"]) == {"attention"}
    assert np.allclose(grid.sort_values("layer")["ari"], pairs.sort_values("layer")["ari"], equal_nan=True)
    fig = hfig.agreement_figure(table)
    assert len(fig.data) == 1  # no span grouping in a run that was not profiled: the probe panel only
    titles = [a.text for a in fig.layout.annotations]
    assert "agreement with the probe grouping (ARI)" in titles and not any("span grouping (ARI)" in t for t in titles)
    assert "no span grouping in this run's head_similarity table" in titles  # said once, no empty panel
    assert "xaxis2" not in fig.layout.to_plotly_json()  # one panel, full width
    assert hfig.verdict_figure(table.iloc[0:0]).layout.annotations[0].text.startswith("no head_similarity table")


def _stability_page(logs, monkeypatch, run: str, **params) -> AppTest:
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["run"] = run
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    at.switch_page(PAGE_FILES["stability"]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_stability_page_shows_the_section_and_the_banner_points_to_it(logs, monkeypatch):
    at = _stability_page(logs, monkeypatch, "run")
    assert any(s.value == "Do head groups mean anything?" for s in at.subheader)
    summary = next(df.value for df in at.dataframe if "real and stable" in df.value.columns)
    assert set(summary["similarity"]) == {"attention", "probe"}
    # the answer in one sentence, counted here from the table's own rows
    rows = hs.groupings(load_run(logs / "run").table("head_similarity"))
    rows = rows[rows["procedure"] == "method"]
    both = rows[(rows["verdict"] == cv.REAL) & (rows["stability"] == hs.STABLE)]
    real = rows[rows["verdict"] == cv.REAL]
    sentence = next(m.value for m in at.markdown if "head groups" in m.value and m.value.startswith("**"))
    if len(both):
        for name, n in both.groupby("similarity").size().items():
            total = int((rows["similarity"] == name).sum())
            assert f"{name} in {n} of {total} layers" in sentence, sentence
    elif len(real):
        assert sentence.startswith("**No similarity gives real and stable head groups.**"), sentence
        for name, n in real.groupby("similarity").size().items():
            assert f"{name} in {n} of {int((rows['similarity'] == name).sum())} layers" in sentence, sentence
    else:
        assert "No similarity gives real head groups in any layer" in sentence
    banners = [w.value for w in at.warning if "mostly not clusters" in w.value]
    assert banners and "see Stability" in banners[0]  # one line; its details name the section
    (details,) = [m.value for m in at.markdown if "are the head groups real?" in m.value]
    assert "do head groups mean anything?" in details
    # a table from the run's own tables says what it leaves out: the similarities a model measures, halves
    absent = sorted(set(hs.SIMILARITIES) - set(rows["similarity"]))
    assert absent == ["method", "span", "zscore"]
    (said,) = [c.value for c in at.caption if c.value.startswith("Similarities here:")]
    assert f"Not measured: {', '.join(a for a in hs.SIMILARITIES if a in absent)}" in said, said
    assert "Stability is not measured" in said
    assert "training does not keep" in said and "Are the head groups real?" in said  # why, and where they are judged
    next(r for r in at.radio if r.key == "hsim_procedure").set_value("complete").run()
    assert not at.exception
    assert at.query_params["procedure"] == "complete"  # the view travels in the address
    verdicts = [c for c in at.get("plotly_chart") if "hsim_verdicts" in (c.proto.id or "")]
    assert len(verdicts) == 1
    linked = _stability_page(logs, monkeypatch, "run", procedure="complete")
    assert next(r for r in linked.radio if r.key == "hsim_procedure").value == "complete"
    assert [c.proto.spec for c in linked.get("plotly_chart") if "hsim_verdicts" in (c.proto.id or "")] == [
        c.proto.spec for c in verdicts
    ]
    odd = _stability_page(logs, monkeypatch, "run", procedure="<b>nonsense</b>")  # not an option: the default
    assert next(r for r in odd.radio if r.key == "hsim_procedure").value == "method"
    said = [t.value for t in odd.toast]  # and the page says the address was not followed, its text as text
    assert len(said) == 1 and "procedure=\\<b\\>nonsense\\</b\\>" in said[0].replace("&lt;", "<"), said
    bare = _stability_page(logs, monkeypatch, "bare")
    assert any("aah-viz head-similarity RUN" in i.value for i in bare.info)


def _selection_banner(at: AppTest) -> list[str]:
    """The box about several runs: its one line, then its details (the runs named, where to read more)."""
    lines = [w.value.replace("\\", "") for w in at.warning if "mostly not clusters**" in w.value]
    details = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith("Runs whose head groups")]
    assert len(lines) == len(details) <= 1, (lines, details)
    return [f"{line} {text}" for line, text in zip(lines, details)]


def test_the_banner_of_several_runs_points_to_the_similarity_section_only_for_runs_that_have_one(logs, monkeypatch):
    """Runs page, both copies selected: each named as in doubt; the head-similarity section offered for
    "run" (its table written above) and not for "bare", whose section would be empty."""
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (banner,) = _selection_banner(at)
    assert "in 2 of the 2 runs shown" in banner and "bare (" in banner and "run (" in banner, banner
    pointer = banner.split("do head groups mean anything?", 1)
    assert len(pointer) == 2, banner
    assert "for run (the runs with a head-similarity table)" in pointer[1], banner
    assert "bare" not in pointer[1], banner
    # a filter that hides "run": the box speaks of the runs the table shows
    at.text_input(key="runs_filter").set_value("=bare").run()
    at.selectbox(key="runs_filter_field").set_value("run").run()
    (banner,) = _selection_banner(at)
    assert "in 1 of the 1 runs shown" in banner and "bare (" in banner and "run (" not in banner, banner
    # "bare" alone on Compare: the banner sends nobody to a section that would be empty
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["sel"] = "bare"
    at.run()
    at.switch_page(PAGE_FILES["compare"]).run()
    assert not at.exception, [e.value for e in at.exception]
    (banner,) = _selection_banner(at)
    assert "in 1 of the 1 runs shown" in banner and "mean anything" not in banner, banner
    assert banner.endswith("See Stability → are the head groups real?."), banner
    # every run named has a table (the trained samples): the pointer says so in a word, not a second list
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["sel"] = "run"
    at.run()
    at.switch_page(PAGE_FILES["compare"]).run()
    (banner,) = _selection_banner(at)
    assert banner.endswith("do head groups mean anything? shows which similarities do give real groups, for each."), (
        banner
    )
