"""``aah-viz bench hooks --report-every N``: the reporting model timed beside the recorded and plain ones, its
figures from its own medians, and what it reported on the disk (no figure depends on the machine's speed)."""

from __future__ import annotations

import json
import statistics

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard", reason="the report extra (tensorboard) is not installed")

from routing_expect import check_against_run, read_tensorboard  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import validate_run  # noqa: E402

pytestmark = pytest.mark.torch


def test_bench_hooks_times_the_reporting_path_beside_the_recorder(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["bench", "hooks", "--preset", "tiny", "--steps", "6", "--skip", "1", "--out", str(out)]
    assert main([*args, "--report-every", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rep = data["reported"]
    assert rep["reports"] == 3 and rep["report_every"] == 2 and rep["report_to"] == "tensorboard"
    times = data["raw_s"]["reported_vs_plain_step"]["cpu"]
    per_pair = [a / b for a, b in zip(times["reported"], times["plain"])]
    assert len(per_pair) == 5
    assert data["ratios"]["reported_vs_plain_step"]["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
    assert rep["step_time_ratio"] == pytest.approx(
        rep["median_step_s_reported"] / data["median_step_s_plain"], rel=1e-2
    )
    change = rep["overhead_change"]
    assert change["step_time_ratio"] == pytest.approx(rep["step_time_ratio"] - data["step_time_ratio"], abs=2e-4)
    assert change["cost_fraction"] == pytest.approx(
        rep["recorder_cost_fraction"] - data["recorder_cost_fraction"], abs=2e-5
    )
    assert 0 < rep["reporting_cost_fraction"] <= rep["recorder_cost_fraction"]
    # the reporting model wrote a valid run of its own, and its reports are that run's values
    reported = tmp_path / "run-reported"
    assert validate_run(out) == [] and validate_run(reported) == []
    logged = read_tensorboard(reported / "tensorboard")
    assert check_against_run(logged, reported, step_of=lambda s: s) == {1, 3, 5}


def test_bench_hooks_without_reporting_has_no_reported_figures(tmp_path, capsys):
    assert main(["bench", "hooks", "--preset", "tiny", "--steps", "3", "--skip", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "reported" not in data and set(data["ratios"]) == {"recorded_vs_plain_step"}
