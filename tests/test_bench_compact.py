"""``aah-viz bench compact`` reports paired figures from the shared harness (no torch needed)."""

import json
import statistics

import pytest

from aah_viz.cli import main


def test_bench_compact_prints_the_paired_read_ratio_its_raw_times_and_same_rows(capsys):
    assert main(["bench", "compact", "--segments", "12", "--pairs", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["segments_before"] == 12 and doc["files_after"] < 12 and doc["same_rows"] is True
    fig = doc["ratios"]["after_vs_before_read"]
    times = doc["raw_s"]["after_vs_before_read"][doc["clock"]]
    per_pair = [a / b for a, b in zip(times["after"], times["before"])]
    assert fig["n_pairs"] == len(per_pair) == 3
    assert fig["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
    assert doc["read_heads_seconds_after"] == pytest.approx(statistics.median(times["after"]), abs=1e-4)


def test_bench_compact_refuses_too_few_pairs(capsys):
    assert main(["bench", "compact", "--segments", "3", "--pairs", "1"]) == 2
    assert "--pairs" in capsys.readouterr().err
