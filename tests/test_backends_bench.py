"""The attention and step benchmarks: real (tiny) runs through the CLI, JSON checked."""

from __future__ import annotations

import json
import statistics

import pytest

torch = pytest.importorskip("torch")

from aah_viz.cli import main  # noqa: E402
from instrumentation.backends import causal_coverage  # noqa: E402
from instrumentation.bench.attention import paper_mix, parse_mix  # noqa: E402

pytestmark = pytest.mark.torch


def test_paper_mix_is_table_1_at_the_paper_shape_and_scales_with_t():
    assert paper_mix(4096, 16) == [512] * 10 + [1024] * 2 + [2048] * 2 + [4096] * 2
    assert paper_mix(1024, 16) == [128] * 10 + [256] * 2 + [512] * 2 + [1024] * 2
    assert len(paper_mix(512, 12)) == 12


def test_parse_mix_forms_and_errors():
    from aah_viz.errors import ConfigError

    assert parse_mix("uniform:7", 100, 3) == [7, 7, 7]
    assert parse_mix("1,2,300", 100, 3) == [1, 2, 300]
    for bad in ("1,2", "uniform:x", "banana", "0,1,2"):
        with pytest.raises(ConfigError, match="--mix"):
            parse_mix(bad, 100, 3)


def test_bench_attention_prints_paired_ratios_with_intervals_and_coverage(capsys):
    code = main(
        [
            "bench",
            "attention",
            "--seq-len",
            "96",
            "--heads",
            "4",
            "--head-dim",
            "8",
            "--mix",
            "8,16,96,200",
            "--pairs",
            "3",
            "--backends",
            "full,dense_masked,banded,flash",
            "--stats",
            "--json",
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["clock"] == "cpu" and doc["config"]["pairs"] == 3
    assert doc["windows"] == [8, 16, 96, 200]
    assert doc["causal_coverage"] == pytest.approx(causal_coverage([8, 16, 96, 200], 96))
    for name in ("full", "dense_masked", "banded", "banded_stats"):
        assert doc["medians_s"][name]["fwdbwd"] > 0
    ratios = doc["ratios"]
    for key in ("banded_vs_full_fwd", "banded_vs_full_fwdbwd", "banded_vs_dense_fwdbwd", "dense_vs_full_fwdbwd"):
        fig = ratios[key]
        assert fig["n_pairs"] == 3 and fig["ci95"][0] <= fig["median"] <= fig["ci95"][1]
        assert fig["warning"]  # fewer than the recommended pairs
    for clock in ("cpu", "wall"):  # each figure is the median of its own per-round ratios, kept raw
        times = doc["raw_s"]["banded_vs_full_fwdbwd"][clock]
        per_pair = [a / b for a, b in zip(times["banded:fwdbwd"], times["full:fwdbwd"])]
        assert len(per_pair) == 3
        assert doc["ratios_by_clock"][clock]["banded_vs_full_fwdbwd"]["median"] == pytest.approx(
            statistics.median(per_pair), abs=1e-4
        )
    assert doc["realised_work"]["dense_masked"] == pytest.approx(2 * 96 / 97)
    assert doc["realised_work"]["banded"] < doc["realised_work"]["dense_masked"]
    if "flash" not in doc["medians_s"]:
        assert "flash" in doc["notes"]


def test_bench_attention_refuses_too_few_pairs_with_exit_2(capsys):
    code = main(["bench", "attention", "--seq-len", "32", "--heads", "2", "--pairs", "1"])
    assert code == 2
    assert "--pairs" in capsys.readouterr().err


def test_bench_attention_rejects_a_bad_mix_with_exit_2(capsys):
    code = main(["bench", "attention", "--seq-len", "32", "--heads", "2", "--mix", "1,2,3", "--pairs", "2"])
    assert code == 2
    assert "--mix" in capsys.readouterr().err


def test_bench_step_reports_the_step_ratio_and_executed_windows(capsys):
    pytest.importorskip("instrumentation.model")
    code = main(["bench", "step", "--preset", "tiny", "--seq-len", "64", "--batch", "1", "--pairs", "2", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    times = doc["raw_s"]["aah_vs_full_step"]["cpu"]
    per_pair = [a / b for a, b in zip(times["full_adaptive"], times["full_attention"])]
    assert len(per_pair) == 2
    assert doc["ratios"]["aah_vs_full_step"]["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
    lean = doc["raw_s"]["aah_stats_on_update_only_vs_aah_step"]["cpu"]
    assert lean["full_adaptive"] == times["full_adaptive"]  # the same rounds, paired with each other
    per_pair = [a / b for a, b in zip(lean["full_adaptive_stats_on_update_only"], lean["full_adaptive"])]
    assert doc["ratios"]["aah_stats_on_update_only_vs_aah_step"]["median"] == pytest.approx(
        statistics.median(per_pair), abs=1e-4
    )
    assert doc["config"]["attention_backend"] == "banded"
    assert doc["config"]["candidate_windows"] == [8, 16, 32, 64]
    windows = doc["executed_windows"]
    assert len(windows) == doc["config"]["n_layer"] and all(len(row) == doc["config"]["n_head"] for row in windows)
    assert set(w for row in windows for w in row) <= {8, 16, 32, 64}
    assert doc["backends_seen"] == ["banded"]


def test_bench_hooks_reports_ratios_of_its_own_medians_and_the_bytes_of_a_valid_run(tmp_path, capsys):
    from aah_viz.runlog import validate_run

    out = tmp_path / "run"
    code = main(["bench", "hooks", "--preset", "tiny", "--steps", "4", "--skip", "1", "--out", str(out), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["steps"] == 4 and data["skipped"] == 1
    times = data["raw_s"]["recorded_vs_plain_step"]["cpu"]
    per_pair = [a / b for a, b in zip(times["recorded"], times["plain"])]
    assert len(per_pair) == 3 and data["clock"] == "cpu"
    assert data["ratios"]["recorded_vs_plain_step"]["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
    assert data["step_time_ratio"] == pytest.approx(
        data["median_step_s_recorded"] / data["median_step_s_plain"], rel=1e-2
    )
    written = sum(f.stat().st_size for f in out.rglob("*.parquet") if not f.name.startswith((".", "_")))
    assert data["bytes_total"] == written > 0
    assert data["bytes_per_step"] == pytest.approx(written / 4, abs=0.1)
    assert validate_run(out) == []
