"""``aah-viz retrofit`` runs ``aah-viz train``'s loop: it stops cleanly on SIGTERM and refuses a non-finite loss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from aah_viz.runlog.paths import list_adapters  # noqa: E402
from instrumentation.retrofit import read_adapter  # noqa: E402

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[1]
TEXT = "Colourless green ideas sleep furiously. " * 60 + "A stitch in time saves nine. " * 60
OPTIONS = ["--windows", "8,16,32", "--eval-interval", "3", "--eval-batches", "1", "--no-progress", "--threads", "1"]

# Runs the CLI in a child process that sends itself SIGTERM while the recorder closes one step: the
# signal lands at the same point on any machine, between two checkpoints.
TERMINATE_AT_STEP = """
import os, signal, sys
from instrumentation.recorder import RoutingRecorder
record_step = RoutingRecorder.step
def record_step_then_terminate(self, step, **kw):
    record_step(self, step, **kw)
    if step == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGTERM)
RoutingRecorder.step = record_step_then_terminate
from aah_viz.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_causal_lm):
    """A tiny random Llama saved as a Hugging Face folder, and a text to adapt it on."""
    root = tmp_path_factory.mktemp("retrofit-loop")
    tiny_causal_lm(root / "llama")
    (root / "text.txt").write_text(TEXT)
    return root


def retrofit_args(base, out, *extra) -> list[str]:
    return ["retrofit", str(base / "llama"), "--data", str(base / "text.txt"), "--out", str(out), *OPTIONS, *extra]


def test_sigterm_stops_at_a_step_boundary_and_a_resume_matches_the_uninterrupted_run(base, tmp_path):
    run_args = ["--steps", "8", "--checkpoint-interval", "3"]
    straight = tmp_path / "straight"
    assert main(retrofit_args(base, straight, *run_args)) == 0

    out = tmp_path / "terminated"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-c", TERMINATE_AT_STEP, "4", *retrofit_args(base, out, *run_args)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=600)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err[-2000:]
    assert "stopped by SIGTERM after step 4" in err and "--resume" in err and "Traceback" not in err
    run = load_run(out)
    assert run.manifest["status"] == "stopped"
    # closed, nothing missing: not an interrupted run; validate says where it stopped and how to go on
    assert validate_run(out) == [
        "stopped at step 4 by a signal (SIGTERM); resume with the same aah-viz retrofit command with --resume"
    ]
    assert [s for s, _ in list_adapters(out)] == [2, 4]  # no work lost: the stop step has its adapter
    assert run.table("events").query("kind == 'terminated'")["step"].tolist() == [4]
    assert sorted(set(run.table("heads")["step"])) == [0, 1, 2, 3, 4]

    assert main(retrofit_args(base, out, *run_args, "--resume")) == 0
    assert validate_run(out) == []
    run = load_run(out)
    assert run.manifest["status"] == "finished"
    assert run.manifest["resumes"][-1]["keep_through_step"] == 4
    _, a, _, _ = read_adapter(straight / "adapters" / "step-00000007.safetensors")
    _, b, _, _ = read_adapter(out / "adapters" / "step-00000007.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    cols = ["step", "layer", "head", "window"]
    ha, hb = (load_run(r).table("heads").sort_values(cols[:3]).reset_index(drop=True) for r in (straight, out))
    assert ha[cols].equals(hb[cols])


def test_a_non_finite_loss_is_refused_naming_the_step_and_no_adapter_is_written_from_it(base, tmp_path, capsys):
    out = tmp_path / "nan"
    # an absurd learning rate is finite at the door but drives the AAH parameters, then the loss, to nan
    assert main(retrofit_args(base, out, "--steps", "12", "--lr", "1e30", "--checkpoint-interval", "1")) == 2
    err = capsys.readouterr().err.strip()
    said = err.splitlines()[-1]  # the lines before it: transformers' loading bar
    assert "Traceback" not in err and "the loss is" in said and "failed" in said
    run = load_run(out)
    assert run.manifest["status"] == "failed"
    ev = run.table("events").query("kind == 'non_finite_loss'")
    assert len(ev) == 1
    bad_step = int(ev["step"].iloc[0])
    assert f"at step {bad_step}" in said
    scalars = run.table("scalars").query("name == 'loss'")
    assert scalars["step"].max() == bad_step - 1 and np.isfinite(scalars["value"]).all()
    adapters = list_adapters(out)
    assert adapters and all(step < bad_step for step, _ in adapters)  # nothing saved from the refused step on
    for _, path in adapters:
        _, tensors, _, _ = read_adapter(path)
        assert all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())
