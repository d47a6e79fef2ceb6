"""A two-process CPU run under torchrun (gloo): one consistent run directory, identical routing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from aah_viz.runlog import load_run, validate_run  # noqa: E402
from aah_viz.runlog.paths import SEGMENT_RE, list_segments, list_table_dirs  # noqa: E402

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[1]


def torchrun(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "aah_viz",
        "train",
        "--preset",
        "tiny",
        "--steps",
        "9",
        "--n-docs",
        "16",
        "--out",
        str(out),
        "--no-progress",
        "--threads",
        "1",
        "--eval-interval",
        "5",
        "--eval-batches",
        "1",
        "--checkpoint-interval",
        "5",
        *extra,
    ]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)


def test_two_ranks_one_run_identical_windows(tmp_path):
    out = tmp_path / "ddp"
    proc = torchrun(out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validate_run(out) == []
    run = load_run(out)
    assert run.manifest["world_size"] == 2 and run.manifest["status"] == "finished"
    dist = run.manifest["distributed"]
    assert dist["routing_sync"] == "mean"
    assert dist["ranks_consistent"] is True and dist["divergent_steps"] == []
    assert "rank_divergence" not in set(run.table("events")["kind"])
    heads = run.table("heads")
    assert sorted(heads["step"].unique()) == list(range(9))
    assert not heads.duplicated(["step", "layer", "head"]).any()
    # routing was really applied (windows below T exist after warm-up), so agreement means something
    assert (heads[heads["step"] >= 3]["window"] < 64).any()
    # only rank 0 wrote: one writer session for every segment
    sessions = {SEGMENT_RE.match(seg.name)["session"] for t in list_table_dirs(out) for seg in list_segments(out / t)}
    assert len(sessions) == 1
    # global batch = 2 ranks x per-rank batch
    sc = run.table("scalars")
    assert run.manifest["train"]["world_size"] == 2
    assert len(sc[sc["name"] == "loss"]) == 9


@pytest.mark.slow
def test_without_routing_sync_ranks_drift_apart(tmp_path):
    """The negative control: each rank routing on its own batch takes different decisions."""
    out = tmp_path / "nosync"
    proc = torchrun(out, "--routing-sync", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    dist = load_run(out).manifest["distributed"]
    assert dist["routing_sync"] == "off" and dist["ranks_consistent"] is False


def test_routing_sync_sets_the_models_feature_reducer_and_removes_it():
    from instrumentation import AAHConfig, AAHTransformer
    from instrumentation.training.distributed import routing_sync

    model = AAHTransformer(AAHConfig.from_preset("tiny", regime="full_adaptive"))
    with routing_sync(model, 1):  # a single process: nothing to average, no reducer
        assert all(a.feature_reducer is None for a in model.aah_layers())
    with routing_sync(model, 2) as sync:
        assert all(a.feature_reducer == sync.reduce for a in model.aah_layers())
        feats = torch.randn(12, 9)
        assert torch.equal(sync.reduce(feats), feats)  # without a process group: unchanged
    assert all(a.feature_reducer is None for a in model.aah_layers())


def test_feature_reducer_feeds_the_routing_inputs():
    from instrumentation import AAHConfig, AAHTransformer

    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny", regime="full_adaptive", warmup_steps=0, control_interval=1))
    seen = []
    model.set_feature_reducer(lambda f: (seen.append(f.shape), f * 0 + 1.0)[1])
    x = torch.randint(0, 256, (2, 64))
    model.prepare_step(0)
    model(x)
    assert seen and all(shape[-1] == 9 for shape in seen)
    # identical features for every head: level 0 collapses and is force-split, as the reducer dictated
    assert all(a.state.ema is not None and torch.all(a.state.ema == 1.0) for a in model.aah_layers())
