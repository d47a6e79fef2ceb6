"""Cluster validity on the dashboard: the banner where groups are shown, the Stability section, the
Hierarchy page's words for each level (AppTest on real run directories)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.analysis import cluster_validity as cv
from aah_viz.figures.payload import figure_data
from aah_viz.runlog.columns import rows_to_arrow
from aah_viz.runlog.segment_io import write_segment
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
N_LAYER, N_HEAD = 2, 8

pytestmark = pytest.mark.timeout(TEST_S)


def _write_validity(run: Path, origin: str, verdict: str, rng) -> pd.DataFrame:
    """Replace the run's validity rows: one per level-0 partition of its tree, all of one kind."""
    tree = pd.read_parquet(run / "tree", columns=["step", "layer", "level", "shadow"])
    parts = tree[tree["level"] == 0].drop_duplicates(["step", "layer"])[["step", "layer", "shadow"]]
    n = len(parts)
    rows = parts.assign(
        origin=origin,
        n_heads=N_HEAD,
        n_groups=2,
        threshold=0.72,
        sim_min=rng.uniform(0.9, 0.99, n),
        sim_median=rng.uniform(0.99, 0.995, n),
        sim_max=0.999,
        silhouette=rng.uniform(0.1, 0.2, n) if verdict == cv.CHANCE else rng.uniform(0.7, 0.8, n),
        null_mean=0.1,
        null_p95=0.3,
        null_p_value=0.5,
        refit_mean=0.3,
        refit_p95=0.5,
        refit_p_value=0.5,
        verdict=verdict,
    )
    shutil.rmtree(run / "cluster_validity")
    (run / "cluster_validity").mkdir()
    write_segment(run / "cluster_validity", "part-000001.parquet", rows_to_arrow("cluster_validity", rows))
    return rows.reset_index(drop=True)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    rng = np.random.default_rng(0)
    rows = {}
    for name, origin, verdict in (("forced", cv.FORCED, cv.CHANCE), ("real", "natural", cv.REAL)):
        path = make_synthetic_run(root / name, n_layer=N_LAYER, n_head=N_HEAD, steps=80, regime="full_adaptive")
        rows[name] = _write_validity(path, origin, verdict, rng)
    return root, rows


def _open(logs, monkeypatch, run: str, page: str) -> AppTest:
    root, _ = logs
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["run"] = run
    at.run()
    at.switch_page(f"aah_viz/dashboard/views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _banners(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "mostly not clusters" in w.value]


def test_the_banner_shows_on_every_page_of_the_run_and_only_when_its_groups_are_in_doubt(logs, monkeypatch):
    for page in ("hierarchy", "stability", "probes", "training", "windows"):
        assert len(_banners(_open(logs, monkeypatch, "forced", page))) == 1, page
        assert _banners(_open(logs, monkeypatch, "real", page)) == [], page


def test_pages_of_several_runs_name_the_runs_whose_groups_are_in_doubt(logs, monkeypatch):
    """One line saying how many of the runs shown; the runs, each with its reason, on demand."""
    n = len(logs[1]["forced"])
    for page in ("runs", "compare", "export"):
        at = _open(logs, monkeypatch, "real", page)
        (banner,) = _banners(at)
        assert "in 1 of the 2 runs shown" in banner and "forced" not in banner, page
        (details,) = [m.value for m in at.markdown if m.value.startswith("Runs whose head groups")]
        assert f"forced ({n} partitions: 100% forced, 0% beat their nulls)" in details, page
        assert "real (" not in details, page


def test_the_stability_section_tabulates_the_recorded_shares(logs, monkeypatch):
    at = _open(logs, monkeypatch, "forced", "stability")
    assert any("Are the head groups real?" in h.value for h in at.subheader)
    table = next(df.value for df in at.dataframe if "beats chance" in df.value.columns)
    rows = logs[1]["forced"]
    expected = rows.groupby("layer").agg(n=("step", "size"), sim=("sim_median", "median"))
    assert table["partitions"].tolist() == expected["n"].tolist()
    assert table["forced split"].tolist() == [1.0] * N_LAYER
    assert table["beats chance"].tolist() == [0.0] * N_LAYER
    assert np.allclose(table["median similarity"], expected["sim"], atol=1e-6)
    fig = next(
        figure_data(c.proto.spec)
        for c in at.get("plotly_chart")
        if "cluster validity" in figure_data(c.proto.spec)["layout"]["title"]["text"]
    )
    forced = next(t for t in fig["data"] if t.get("name") == "forced split")
    assert np.allclose(forced["y"], 1.0)
    colours = {t.get("name"): t["line"]["color"] for t in fig["data"] if t.get("line", {}).get("color")}
    assert colours["silhouette − chance"] != colours["real (beats both nulls)"], colours  # two meanings, two colours


def test_the_hierarchy_says_what_the_level_0_partition_is(logs, monkeypatch):
    at = _open(logs, monkeypatch, "forced", "hierarchy")
    notes = [c.value for c in at.caption if c.value.startswith("Level 0")]
    assert len(notes) == 1
    assert "forced split" in notes[0] and "(0.72)" in notes[0] and "not better than chance" in notes[0]
    # the levels above: their scores named by the run's upper metric (the default cosine_normdiff), defined
    upper = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("Level ") and c.value[6] != "0"]
    scored = [n for n in upper if "pairwise" in n]
    assert scored and all(
        "pairwise score of its items: " in n and "cosine_normdiff: cosine minus 16" in n for n in scored
    )
    at = _open(logs, monkeypatch, "real", "hierarchy")
    notes = [c.value for c in at.caption if c.value.startswith("Level 0")]
    assert len(notes) == 1 and "real: silhouette" in notes[0]


def test_the_brief_reason_leads_with_the_share_that_decided_it():
    from aah_viz.analysis.cluster_validity import doubt_in_brief

    # few forced splits but none beating its null: the nulls decided it, and come first
    assert (
        doubt_in_brief({"partitions": 228, "forced_share": 0.02, "real_share": 0.0}) == "0% beat their nulls, 2% forced"
    )
    assert doubt_in_brief({"partitions": 12, "forced_share": 1.0, "real_share": float("nan")}) == "100% forced"
    assert (
        doubt_in_brief({"partitions": 12, "forced_share": 0.75, "real_share": 0.5})
        == "75% forced, 50% beat their nulls"
    )
