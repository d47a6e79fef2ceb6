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
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "aah_viz", "train", "--preset", "tiny", "--steps", "9", "--n-docs", "16", "--out", str(out),
           "--no-progress", "--threads", "1", "--eval-interval", "5", "--eval-batches", "1",
           "--checkpoint-interval", "5", *extra]
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


def test_routing_sync_patches_the_feature_functions_and_restores_them():
    import instrumentation.attention as attention
    from instrumentation.routing import features
    from instrumentation.train import routing_sync

    before = (attention.head_features, attention.pooled_group_features, features.head_features)
    with routing_sync(1):  # a single process: nothing to average, nothing patched
        assert attention.head_features is before[0]
    with routing_sync(2):
        assert attention.head_features is not before[0] and attention.head_features.__wrapped__ is before[0]
        assert features.pooled_group_features.__wrapped__ is before[1]
        # without a process group the wrapped functions return what the originals return
        q = torch.randn(1, 4, 8, 2)
        assert torch.equal(attention.head_features(q, q, q), before[0](q, q, q))
    assert (attention.head_features, attention.pooled_group_features, features.head_features) == before
