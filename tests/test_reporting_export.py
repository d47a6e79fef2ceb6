"""``aah-viz export tensorboard``: finished runs as TensorBoard event files, read back with TensorBoard's own
reader, values and steps equal to the run directory's; imported results; damaged runs refused, nothing
written; no torch needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard", reason="the report extra (tensorboard) is not installed")

from routing_expect import check_against_run, read_tensorboard  # noqa: E402
from test_cli_modules import aah_viz_without  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "full_adaptive_seed0"
REFERENCE = ROOT / "aah_viz" / "data" / "reference" / "paper"


def export(*args) -> int:
    return main(["export", "tensorboard", *map(str, args), "--no-progress"])


def test_a_recorded_run_exports_every_step_equal_to_the_run_directory(tmp_path):
    assert export(SAMPLE, "--out", tmp_path / "tb", "--layers") == 0
    run = load_run(SAMPLE)
    logged = read_tensorboard(tmp_path / "tb" / run.run_id)
    checked = check_against_run(logged, SAMPLE, step_of=lambda s: s, per_layer=True)
    assert checked == set(int(s) for s in run.steps())  # every recorded step
    for name, tag in (("loss", "train/loss"), ("val_loss", "eval/val_loss"), ("tokens_per_s", "run/tokens_per_s")):
        want = run.scalar(name).dropna(subset=["value"]).set_index("step")["value"]
        assert set(logged[tag]) == set(want.index)
        assert np.allclose([logged[tag][s] for s in want.index], want.to_numpy(), rtol=1e-6)
    # wall times are the run's own: its start plus the step times up to each step (not the export's clock)
    from datetime import datetime

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / run.run_id), size_guidance={"scalars": 0})
    acc.Reload()
    events = {e.step: e.wall_time for e in acc.Scalars("train/loss")}
    start = datetime.fromisoformat(run.manifest["started_at"].replace("Z", "+00:00")).timestamp()
    times = run.scalar("step_time_s").dropna(subset=["value"]).sort_values("step")
    steps, secs = times["step"].to_numpy(), times["value"].to_numpy()
    spent = np.cumsum(np.diff(steps, prepend=-1) * secs)  # each value for the steps since the one before
    for step in steps[:: max(1, len(steps) // 20)]:
        assert events[int(step)] == pytest.approx(start + spent[list(steps).index(step)], abs=1e-3)


def test_folders_of_runs_export_one_folder_a_run_and_refuse_to_mix_with_an_earlier_export(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("full_adaptive_seed0", "full_attention_seed0"):
        shutil.copytree(ROOT / "sample_logs" / name, runs / name)
    out = tmp_path / "tb"
    assert export(runs, "--out", out) == 0
    ids = sorted(load_run(runs / n).run_id for n in ("full_adaptive_seed0", "full_attention_seed0"))
    assert sorted(p.name for p in out.iterdir()) == ids
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert export(runs, "--out", out) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    assert export(runs, "--out", out, "--overwrite") == 0
    assert sorted(p.name for p in out.iterdir()) == ids  # replaced, not added beside
    assert all(len(list((out / i).iterdir())) == 1 for i in ids)


def test_imported_paper_results_export_their_recorded_scalars(tmp_path):
    assert main(["import-reference", str(REFERENCE), "--out", str(tmp_path / "imported")]) == 0
    run_dir = tmp_path / "imported" / "paper-4096-full-adaptive-seed0"
    assert export(run_dir, "--out", tmp_path / "tb") == 0
    run = load_run(run_dir)
    logged = read_tensorboard(tmp_path / "tb" / run.run_id)
    acr = run.scalar("acr").iloc[-1]
    assert logged["aah/acr"] == {int(acr["step"]): pytest.approx(acr["value"], rel=1e-6)}
    for w in (512, 1024, 2048, 4096):
        frac = run.scalar(f"window_frac_{w}").iloc[-1]
        assert logged[f"aah/window_share/w{w}"][int(frac["step"])] == pytest.approx(frac["value"], rel=1e-6)
    assert "eval/val_loss" in logged


def test_a_damaged_run_is_refused_with_its_reasons_and_nothing_is_written(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(SAMPLE, good)
    shutil.copytree(SAMPLE, bad)
    segment = sorted((bad / "heads").glob("*.parquet"))[0]
    segment.write_bytes(b"not parquet at all")
    out = tmp_path / "tb"
    assert export(good, bad, "--out", out) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and str(bad) in err and segment.name in err
    assert len(err.strip().splitlines()) == 1, err  # before: a header line, then the run and its reasons below
    assert not out.exists() or not any(out.iterdir())


def test_export_tensorboard_needs_no_torch(tmp_path):
    proc = aah_viz_without(
        "torch", "export", "tensorboard", str(SAMPLE), "--out", str(tmp_path / "tb"), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    logged = read_tensorboard(tmp_path / "tb" / load_run(SAMPLE).run_id)
    assert len(logged["aah/acr"]) == len(load_run(SAMPLE).steps())


def test_export_without_table_or_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(SAMPLE), "--out", str(tmp_path / "x")]) == 2
    assert "--table is required" in capsys.readouterr().err
    assert main(["export", "tensorboard", "--out", str(tmp_path / "x")]) == 2
