"""``aah-viz bench dashboard --pages --runs N``: many runs made cheaply, each a run of its own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import waiting

from aah_viz.cli import main
from aah_viz.cli._many_runs import LIVE_EVERY, PROTOTYPES, make_many_runs
from aah_viz.runlog import discover_runs, load_run, validate_run

REPO = Path(__file__).resolve().parents[1]


def test_many_runs_are_distinct_runs_sharing_their_segment_files(tmp_path):
    made = make_many_runs(tmp_path, 8, steps=40, flush_every=10)
    runs = [load_run(p) for p in discover_runs(tmp_path)]
    assert len(runs) == made["n_runs"] == 8
    assert len({r.run_id for r in runs}) == 8 and {r.run_id for r in runs} == {f"run-{i:04d}" for i in range(8)}
    assert {r.regime for r in runs} == {regime for regime, _, status in PROTOTYPES if status == "finished"}
    live = [r for r in runs if r.status == "running"]
    assert len(live) == made["live_runs"] == 1 and LIVE_EVERY > 1
    # a live run stopped half-way through its planned steps
    assert live[0].manifest["steps"] == 40 and int(live[0].steps()[-1]) == 19
    finished = [r for r in runs if r.status == "finished"]
    for r in finished:
        assert validate_run(r.path) == [], r.path
        assert int(r.steps()[-1]) == 39
    # two copies of one distinct run: the same rows, from the same files (hard links), apart manifests
    a, b = (r for r in runs if r.run_id in ("run-0000", "run-0005"))
    pd.testing.assert_frame_equal(a.table("scalars"), b.table("scalars"))
    seg_a, seg_b = a.segments("heads")[0], b.segments("heads")[0]
    assert seg_a != seg_b and os.stat(seg_a).st_ino == os.stat(seg_b).st_ino
    assert (a.seed, b.seed) == (0, 1)


def test_bench_dashboard_pages_on_many_runs_reports_the_runs_page():
    cmd = [sys.executable, "-m", "aah_viz", "bench", "dashboard", "--pages", "--runs", "6", "--steps", "30"]
    cmd += ["--page", "runs", "--repeats", "1", "--flush-every", "10", "--json", "--quiet"]
    res = waiting.run(cmd, "aah-viz bench dashboard --runs", capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["pages"]) == set(out["without_summaries"]) == {"runs"}
    assert out["pages"]["runs"]["problems"] == out["without_summaries"]["runs"]["problems"] == []
    assert out["run"]["n_runs"] == 6 and out["run"]["steps"] == 30 and out["run"]["live_runs"] == 1
    assert out["run"]["summaries_dropped"] == 6  # every run had its summary for the first side
    for clock in ("cold_cpu_s", "warm_cpu_s"):
        want = out["without_summaries"]["runs"][clock] / out["pages"]["runs"][clock]
        assert out["ratios_without_over_with"]["runs"][clock] == pytest.approx(want, abs=0.01)
    assert out["peak_rss_mb"] > 0
    idle, new = out["live_refresh"]["idle"], out["live_refresh"]["new_run"]
    assert idle["runs"] == 6 and idle["idle_cpu_s_per_30s"] == pytest.approx(
        idle["check_cpu_s"] * 30 / idle["interval_s"], abs=0.01
    )
    assert new["found"] and new["problems"] == []  # the new run became a row of the Runs page
    assert new["latency_s_at_most"] == pytest.approx(idle["interval_s"] + new["rerun_wall_s"], abs=0.01)


def test_runs_needs_pages_and_at_least_one_run(capsys):
    assert main(["bench", "dashboard", "--runs", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aah-viz: error:") and "--pages" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as stopped:  # argparse's own one line: the option and the value
        main(["bench", "dashboard", "--pages", "--runs", "0"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --runs" in err and "got 0" in err
