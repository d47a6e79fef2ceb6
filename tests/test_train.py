"""``aah-viz train``: the loop, checkpoints with routing state, SIGKILL and exact resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from waiting import PATIENCE_S

torch = pytest.importorskip("torch")

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, read_manifest, validate_run  # noqa: E402
from instrumentation import data as data_mod  # noqa: E402
from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402
from instrumentation.training import checkpoint as ckpt  # noqa: E402
from instrumentation.training.schedule import lr_multiplier  # noqa: E402

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[1]
COMMON = [
    "--preset",
    "tiny",
    "--n-docs",
    "24",
    "--no-progress",
    "--threads",
    "1",
    "--eval-interval",
    "5",
    "--eval-batches",
    "2",
    "--flush-every",
    "1",
]


def train_cli(out, *extra):
    return main(["train", "--out", str(out), *COMMON, *extra])


def test_lr_schedule_is_the_reference_one():
    assert lr_multiplier(0, 10, 100) == 0.0
    assert lr_multiplier(5, 10, 100) == pytest.approx(0.5)
    assert lr_multiplier(10, 10, 100) == pytest.approx(1.0)
    assert lr_multiplier(55, 10, 100) == pytest.approx(0.5)
    assert lr_multiplier(100, 10, 100) == pytest.approx(0.0)


def test_blocks_are_consecutive_and_batches_deterministic():
    tokens = np.arange(1000) % 256
    blocks = data_mod.cut_blocks(tokens, 64)
    assert blocks.shape == ((1000 - 1) // 64, 65)
    assert (blocks[1, 0] == tokens[64]) and (blocks[0, -1] == tokens[64])
    splits = data_mod.split_blocks(tokens, 64, val_fraction=0.2)
    assert splits.n_train + splits.n_val == blocks.shape[0] and splits.n_val == 3
    a = data_mod.batch_indices(splits.n_train, 7, 4, seed=3)
    assert (a == data_mod.batch_indices(splits.n_train, 7, 4, seed=3)).all()
    # two ranks split each global batch without overlap
    r0 = data_mod.batch_indices(splits.n_train, 2, 2, seed=1, rank=0, world_size=2)
    r1 = data_mod.batch_indices(splits.n_train, 2, 2, seed=1, rank=1, world_size=2)
    assert not set(r0) & set(r1)
    # every block once per epoch
    epoch = np.concatenate([data_mod.batch_indices(splits.n_train, s, 1, seed=0) for s in range(splits.n_train)])
    assert sorted(epoch) == list(range(splits.n_train))


def test_plain_text_data_and_bad_input(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("The cat sat on the mat. " * 400, encoding="utf-8")
    tokens = data_mod.load_token_stream(text)
    assert tokens.dtype == np.int64 and tokens.max() < 256 and tokens.size == len(text.read_bytes())
    from aah_viz.errors import InputFormatError

    with pytest.raises(InputFormatError, match="not a file"):
        data_mod.load_token_stream(tmp_path / "missing.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputFormatError, match="UTF-8"):
        data_mod.load_token_stream(tmp_path / "bin.txt")
    out = tmp_path / "text-run"
    assert (
        main(
            [
                "train",
                "--out",
                str(out),
                "--data",
                str(text),
                "--steps",
                "3",
                "--no-progress",
                "--keep-checkpoints",
                "0",
                "--eval-batches",
                "1",
            ]
        )
        == 0
    )
    assert validate_run(out) == []
    assert read_manifest(out)["data"]["source"] == str(text)
    (tmp_path / "short.txt").write_text("tiny", encoding="utf-8")
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "r"),
                "--data",
                str(tmp_path / "short.txt"),
                "--steps",
                "2",
                "--no-progress",
            ]
        )
        == 2
    )
    assert not (tmp_path / "r" / "manifest.json").exists()


def test_train_writes_a_valid_run_with_checkpoints(tmp_path, capsys):
    out = tmp_path / "run"
    assert train_cli(out, "--steps", "12", "--checkpoint-interval", "5", "--keep-checkpoints", "5", "--json") == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["last_step"] == 11
    assert validate_run(out) == []
    run = load_run(out)
    assert run.manifest["status"] == "finished"
    assert run.manifest["train"]["lr_warmup_steps"] == 1
    kinds = run.table("events")["kind"]
    assert (kinds == "eval").sum() == 3  # steps 4, 9 and the last
    assert (kinds == "checkpoint").sum() == 3  # steps 4, 9 and the last
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [4, 9, 11]
    payload = torch.load(ckpt.checkpoint_path(out, 11), weights_only=True)
    assert payload["step"] == 11 and set(payload["rng"]) >= {"torch"}
    assert any(k.endswith("_extra_state") for k in payload["model"])  # routing state is model state
    # the checkpoint reproduces the routing of the run's last step
    model = AAHTransformer(AAHConfig.from_dict(payload["config"]))
    model.load_state_dict(payload["model"])
    heads = run.table("heads")
    last = heads[heads["step"] == 11].sort_values(["layer", "head"])["window"].to_numpy().reshape(2, 12)
    assert (model.current_windows().numpy() == last).all()
    # an existing run is never overwritten by accident
    assert train_cli(out, "--steps", "2") == 2
    assert read_manifest(out)["status"] == "finished"


def test_keep_checkpoints_zero_saves_none(tmp_path):
    out = tmp_path / "nock"
    assert train_cli(out, "--steps", "3", "--keep-checkpoints", "0") == 0
    assert ckpt.list_checkpoints(out) == []
    assert validate_run(out) == []


def _rows(run_dir):
    run = load_run(run_dir)
    heads = run.table("heads").sort_values(["step", "layer", "head"]).reset_index(drop=True)
    sc = run.table("scalars")
    loss = sc[(sc["name"] == "loss")].sort_values("step")[["step", "value"]].reset_index(drop=True)
    return run, heads, loss


# Runs the CLI in a child process that SIGKILLs itself right after the rows of one step reach the disk:
# the kill lands at the same point on any machine, past a checkpoint and before the next.
KILL_AFTER_STEP = """
import os, signal, sys
from instrumentation.recorder import RoutingRecorder
record_step = RoutingRecorder.step
def record_step_then_die(self, step, **kw):
    record_step(self, step, **kw)
    if step == int(sys.argv[1]):
        self.flush(wait=True)
        os.kill(os.getpid(), signal.SIGKILL)
RoutingRecorder.step = record_step_then_die
from aah_viz.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_sigkill_mid_run_leaves_a_valid_run_that_resumes_exactly(tmp_path):
    steps = "24"
    ref = tmp_path / "ref"
    assert train_cli(ref, "--steps", steps, "--checkpoint-interval", "4") == 0

    out = tmp_path / "killed"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    args = ["train", "--out", str(out), *COMMON, "--steps", steps, "--checkpoint-interval", "4"]
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_STEP, "9", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    # the killed run's rows are sound; the only report is that no writer holds it any more
    assert [p.split(":")[0] for p in validate_run(out)] == ["interrupted"]
    assert read_manifest(out)["status"] == "running"
    ck_step = ckpt.latest_checkpoint(out)[0]
    assert ck_step == 7
    on_disk = load_run(out).table("heads")["step"]
    assert on_disk.max() == 9  # rows past the checkpoint exist and must be dropped

    assert train_cli(out, "--steps", steps, "--resume") == 0
    assert validate_run(out) == []
    run, heads, loss = _rows(out)
    _, ref_heads, ref_loss = _rows(ref)
    assert run.manifest["status"] == "finished"
    assert run.manifest["resumes"][-1]["keep_through_step"] == ck_step
    # no duplicated or missing steps, and the same run as without the kill
    assert not heads.duplicated(["step", "layer", "head"]).any()
    assert list(loss["step"]) == list(range(24))
    cols = ["step", "layer", "head", "window_idx", "window", "group_l0"]
    assert heads[cols].equals(ref_heads[cols])
    assert np.allclose(loss["value"], ref_loss["value"], rtol=1e-5, atol=1e-6)
    events = run.table("events")
    assert (events["kind"] == "resume").sum() == 1
    assert (events[events["kind"] == "warmup_end"]).shape[0] == 1


def test_resume_without_a_run_is_a_clear_error(tmp_path, capsys):
    assert train_cli(tmp_path / "none", "--steps", "2", "--resume") == 2
    assert "no run" in capsys.readouterr().err


def _kill_after(step: int, out, *args) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-c", KILL_AFTER_STEP, str(step), "train", "--out", str(out), *COMMON, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


# Settings off every default, so that a resume built from command-line defaults could not match.
OWN = ["--steps", "16", "--seed", "3", "--batch-size", "3", "--lr", "1e-3", "--checkpoint-interval", "4"]
OWN += ["--set", "warmup_steps=2"]


def test_bare_resume_of_a_killed_run_continues_it_with_its_own_settings(tmp_path):
    ref = tmp_path / "ref"
    assert train_cli(ref, *OWN) == 0
    out = tmp_path / "killed"
    _kill_after(9, out, *OWN)
    # the form the README shows: no training argument at all
    assert main(["train", "--out", str(out), "--resume", "--no-progress", "--threads", "1"]) == 0
    assert validate_run(out) == []
    run, heads, loss = _rows(out)
    _, ref_heads, ref_loss = _rows(ref)
    assert run.manifest["seed"] == 3 and run.manifest["steps"] == 16
    assert run.manifest["train"]["batch_size"] == 3 and run.manifest["config"]["warmup_steps"] == 2
    assert list(loss["step"]) == list(range(16))
    cols = ["step", "layer", "head", "window_idx", "window", "group_l0"]
    assert heads[cols].equals(ref_heads[cols])
    assert np.allclose(loss["value"], ref_loss["value"], rtol=1e-5, atol=1e-6)


def _snapshot(run_dir: Path) -> dict:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert train_cli(out, "--steps", "6", "--seed", "3", "--checkpoint-interval", "2", "--set", "warmup_steps=2") == 0
    return out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--seed", "4"], ["--seed 4", "recorded 3"]),
        (["--batch-size", "5"], ["--batch-size 5", "recorded 2"]),
        (["--set", "warmup_steps=5"], ["warmup_steps=5", "warmup_steps=2"]),
        (["--steps", "5"], ["--steps 5", "never shortened"]),
        (["--steps", "3"], ["--steps 3", "checkpoint", "never shortened"]),
    ],
)
def test_resume_refuses_an_argument_that_contradicts_the_run(finished_run, args, said, capsys):
    before = _snapshot(finished_run)
    assert main(["train", "--out", str(finished_run), "--resume", "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for words in said:
        assert words in err
    assert _snapshot(finished_run) == before


def test_resuming_a_finished_run_says_so_and_changes_nothing(finished_run, capsys):
    before = _snapshot(finished_run)
    assert main(["train", "--out", str(finished_run), "--resume", "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "finished run" in said.err and "run written" not in said.out  # nothing trained, nothing claimed
    assert _snapshot(finished_run) == before


def test_train_says_where_the_run_is_and_what_to_open_next(tmp_path, capsys):
    from aah_viz.runlog import discover_runs

    out = tmp_path / "runs" / "fa0"
    assert train_cli(out, "--steps", "3") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"run written to {out} (steps 0-2, ") and "validation loss" in lines[0]
    assert lines[1].startswith(f"next: aah-viz dashboard --logs {out.parent} ")
    assert f"aah-viz validate {out}" in lines[1]
    # the folder it names is one the dashboard finds the run in
    assert out in [Path(p) for p in discover_runs(out.parent)]


def test_extending_a_finished_run_is_explicit_and_recorded(tmp_path):
    out = tmp_path / "run"
    assert train_cli(out, "--steps", "6", "--seed", "3") == 0
    assert main(["train", "--out", str(out), "--resume", "--steps", "9", "--no-progress"]) == 0
    assert validate_run(out) == []
    run, heads, loss = _rows(out)
    assert list(loss["step"]) == list(range(9))
    assert run.manifest["steps"] == 9 and run.manifest["train"]["steps"] == 9 and run.manifest["seed"] == 3
    ext = run.table("events").query("kind == 'extend'")
    assert len(ext) == 1 and int(ext["step"].iloc[0]) == 6


def test_a_non_finite_loss_ends_the_run_as_failed_naming_the_step(tmp_path, capsys):
    out = tmp_path / "nan"
    # an absurd learning rate is finite at the door but drives the weights, then the loss, to inf/nan
    assert train_cli(out, "--steps", "30", "--lr", "1e30", "--set", "warmup_steps=1") == 2
    err = capsys.readouterr().err
    assert "the loss is" in err and "failed" in err
    run = load_run(out)
    assert run.manifest["status"] == "failed"
    ev = run.table("events").query("kind == 'non_finite_loss'")
    assert len(ev) == 1
    bad_step = int(ev["step"].iloc[0])
    assert f"at step {bad_step}" in err
    scalars = run.table("scalars").query("name == 'loss'")
    assert scalars["step"].max() == bad_step - 1 and np.isfinite(scalars["value"]).all()


BAD_VALUES = [
    (["--lr", "-1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--weight-decay", "-0.5"], "--weight-decay"),
    (["--batch-size", "-2"], "--batch-size"),
    (["--threads", "-1"], "--threads"),
    (["--steps", "0"], "--steps"),
    (["--flush-every", "0"], "--flush-every"),
    (["--eval-interval", "0"], "--eval-interval"),
    (["--checkpoint-interval", "-3"], "--checkpoint-interval"),
    (["--seed", "-1"], "--seed"),
    (["--set", "vocab_size=10"], "vocab_size"),
    (["--set", 'n_layer="two"'], "n_layer"),
    (["--set", "sim_threshold=NaN"], "sim_threshold"),
    (["--set", "ema_alpha=2"], "ema_alpha"),
    (["--set", "nonsense=1"], "nonsense"),
    (["--overwrite", "--resume"], "--resume"),
]


@pytest.mark.parametrize(("args", "key"), BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_bad_values_are_one_line_naming_the_key_and_create_nothing(tmp_path, capsys, args, key):
    out = tmp_path / "bad"
    assert main(["train", "--out", str(out), "--steps", "2", "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert key in err
    assert not out.exists() or args == ["--overwrite", "--resume"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_line(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "r"), "--steps", "2", "--device", "cuda", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CUDA is not available" in err


def runs_page_warnings(logs: Path, monkeypatch) -> str:
    """The text of the warning boxes on the dashboard's Runs page (streamlit's AppTest) over ``logs``."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(logs / "no-reference"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return "\n".join(w.value.replace("\\", "") for w in at.warning)  # Markdown escapes off: the text shown


def test_sigterm_closes_the_run_cleanly_and_a_bare_resume_matches_the_uninterrupted_run(tmp_path, monkeypatch):
    ref = tmp_path / "ref"
    assert train_cli(ref, *OWN) == 0
    out = tmp_path / "terminated"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    script = KILL_AFTER_STEP.replace("signal.SIGKILL", "signal.SIGTERM")
    cmd = [sys.executable, "-c", script, "9", "train", "--out", str(out), *COMMON, *OWN]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=600)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err[-2000:]
    assert "stopped by SIGTERM after step 9" in err and "Traceback" not in err
    run = load_run(out)
    assert run.manifest["status"] == "stopped"
    # closed, nothing missing: not an interrupted run, but not a finished one either; validate and the Runs page
    # say where it stopped and how to go on
    said = f"stopped at step 9 by a signal (SIGTERM); resume with aah-viz train --out {out} --resume"
    assert validate_run(out) == [said]
    assert f"Run terminated: {said}" in runs_page_warnings(tmp_path, monkeypatch)
    assert ckpt.latest_checkpoint(out)[0] == 9  # no work lost: the stop step has its checkpoint
    assert run.table("events").query("kind == 'terminated'")["step"].tolist() == [9]
    assert main(["train", "--out", str(out), "--resume", "--no-progress", "--threads", "1"]) == 0
    run, heads, loss = _rows(out)
    _, ref_heads, ref_loss = _rows(ref)
    assert run.manifest["status"] == "finished" and list(loss["step"]) == list(range(16))
    cols = ["step", "layer", "head", "window_idx", "window", "group_l0"]
    assert heads[cols].equals(ref_heads[cols])
    assert np.allclose(loss["value"], ref_loss["value"], rtol=1e-5, atol=1e-6)


def test_a_run_killed_before_its_first_checkpoint_starts_again_from_step_0_on_resume(tmp_path):
    """Default --checkpoint-interval 0: the only checkpoint is the last step's, so a kill before it leaves none."""
    ref = tmp_path / "ref"
    assert train_cli(ref, "--steps", "8") == 0
    out = tmp_path / "killed"
    _kill_after(3, out, "--steps", "8")
    assert ckpt.list_checkpoints(out) == []
    assert validate_run(out) == [
        "interrupted: status is 'running' but no process is writing the run (it stopped after step 3, before its "
        f"first checkpoint); aah-viz train --out {out} --resume starts it again from step 0, dropping the rows "
        "recorded so far"
    ]
    # exactly the command validate names, twice: the second says the run is finished and changes nothing
    for _ in range(2):
        assert main(["train", "--out", str(out), "--resume", "--no-progress", "--threads", "1"]) == 0
        assert validate_run(out) == []
    run, heads, loss = _rows(out)
    _, ref_heads, ref_loss = _rows(ref)
    assert run.manifest["status"] == "finished" and run.manifest["resumes"][-1]["keep_through_step"] == -1
    assert run.manifest["resumes"][-1]["dropped_rows"]["heads"] == 4 * 24  # steps 0-3 of 2 layers x 12 heads
    assert list(loss["step"]) == list(range(8))
    cols = ["step", "layer", "head", "window_idx", "window", "group_l0"]
    assert heads[cols].equals(ref_heads[cols])
    assert np.allclose(loss["value"], ref_loss["value"], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- a resume trusts only the run's own files
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished 6-step runs of one config, seeds 3 and 4, with checkpoints of steps 1, 3 and 5."""
    root = tmp_path_factory.mktemp("two")
    for seed in ("3", "4"):
        args = ["--steps", "6", "--seed", seed, "--checkpoint-interval", "2", "--keep-checkpoints", "5"]
        assert train_cli(root / f"s{seed}", *args) == 0
    return root / "s3", root / "s4"


def _extend_is_refused(run, capsys, *said) -> None:
    """Extending ``run`` (which resumes from its newest checkpoint) exits 2 with one line and changes nothing."""
    before = _snapshot(run)
    assert main(["train", "--out", str(run), "--resume", "--steps", "8", "--no-progress", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for words in said:
        assert words in err, err
    assert _snapshot(run) == before


def test_a_checkpoint_of_another_run_or_step_or_config_is_refused_with_the_reason(two_runs, tmp_path, capsys):
    import shutil

    mine, other = two_runs
    run = tmp_path / "run"
    newest = ckpt.checkpoint_path(run, 5)
    cases = {
        "another run": lambda: shutil.copy(ckpt.checkpoint_path(other, 5), newest),
        "another step": lambda: shutil.copy(ckpt.checkpoint_path(mine, 3), newest),
    }
    uid = read_manifest(mine)["run_uid"]
    said = {
        "another run": [f"belongs to another run (run {read_manifest(other)['run_uid']}; this run is {uid})"],
        "another step": ["holds step 3, not step 5 as its name says", "remove it"],
    }
    for case, plant in cases.items():
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(mine, run)
        plant()
        _extend_is_refused(run, capsys, str(newest), *said[case])
    # a checkpoint from before run ids (none recorded) is still checked against the run's config
    payload = torch.load(ckpt.checkpoint_path(mine, 5), weights_only=True)
    del payload["run_uid"]
    payload["config"] = dict(payload["config"], warmup_steps=payload["config"]["warmup_steps"] + 7)
    torch.save(payload, newest)
    warm = read_manifest(mine)["config"]["warmup_steps"]
    _extend_is_refused(run, capsys, f"written with config warmup_steps={warm + 7}, but the run records "
                       f"warmup_steps={warm}")  # fmt: skip
    # without a run id, while the run has one: refused, whatever else agrees
    payload = torch.load(ckpt.checkpoint_path(mine, 5), weights_only=True)
    del payload["run_uid"]
    torch.save(payload, newest)
    _extend_is_refused(run, capsys, f"records no run id while this run is {uid}")
    # another seed's checkpoint given this run's id: the seed tells it apart
    payload = torch.load(ckpt.checkpoint_path(other, 5), weights_only=True)
    payload["run_uid"] = uid
    torch.save(payload, newest)
    _extend_is_refused(run, capsys, "written with seed 4, but the run records 3")
    # the run's own checkpoint: the extension goes ahead
    shutil.copy(ckpt.checkpoint_path(mine, 5), newest)
    assert main(["train", "--out", str(run), "--resume", "--steps", "8", "--no-progress", "--threads", "1"]) == 0
    assert validate_run(run) == [] and read_manifest(run)["last_step"] == 7


def test_a_changed_text_or_a_relative_data_path_that_resolves_elsewhere_is_refused(tmp_path, monkeypatch, capsys):
    started, elsewhere = tmp_path / "started", tmp_path / "elsewhere"
    started.mkdir()
    elsewhere.mkdir()
    text = "The cat sat on the mat and looked at the dog. " * 200
    (started / "corpus.txt").write_text(text, encoding="utf-8")
    (elsewhere / "corpus.txt").write_text(text.upper(), encoding="utf-8")  # same name and size, other text
    run = tmp_path / "run"
    monkeypatch.chdir(started)
    assert train_cli(run, "--steps", "4", "--data", "corpus.txt", "--checkpoint-interval", "2") == 0
    data = read_manifest(run)["data"]
    raw = (started / "corpus.txt").read_bytes()
    import hashlib

    assert data["path"] == str(started / "corpus.txt") and data["bytes"] == len(raw)
    assert data["sha256"] == hashlib.sha256(raw).hexdigest()
    monkeypatch.chdir(elsewhere)
    _extend_is_refused(run, capsys, f"'corpus.txt' now resolves to {elsewhere / 'corpus.txt'}, another file",
                       f"the run started with {started / 'corpus.txt'} ({len(raw)} bytes")  # fmt: skip
    monkeypatch.chdir(started)
    (started / "corpus.txt").write_text(text + "An edit.", encoding="utf-8")
    _extend_is_refused(run, capsys, f"the training data {started / 'corpus.txt'} changed since the run started")
    (started / "corpus.txt").write_bytes(raw)
    assert main(["train", "--out", str(run), "--resume", "--steps", "6", "--no-progress", "--threads", "1"]) == 0
    assert validate_run(run) == []


def test_train_out_on_a_folder_of_runs_is_refused_naming_them(tmp_path, capsys):
    from aah_viz.runlog import discover_runs
    from aah_viz.samples import make_synthetic_run

    logs = tmp_path / "logs"
    make_synthetic_run(logs / "a", n_layer=2, n_head=4, steps=2)
    make_synthetic_run(logs / "group" / "b", n_layer=2, n_head=4, steps=2)
    before = _snapshot(logs)
    assert train_cli(logs, "--steps", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"aah-viz: error: {logs} holds runs (a, group/b); a run written there would hide them from every tool: "
        f"give the new run a folder of its own, e.g. --out {logs / 'NAME'}"
    )
    assert _snapshot(logs) == before and not (logs / ".writer.lock").exists()
    assert discover_runs(logs) == [logs / "a", logs / "group" / "b"]


def test_an_unknown_device_is_named_as_such_by_train_and_evaluate(finished_run, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat. " * 100, encoding="utf-8")
    before = _snapshot(finished_run)
    commands = [
        ["train", "--out", str(tmp_path / "new"), "--steps", "2", "--no-progress"],
        ["evaluate", str(finished_run), "--data", str(text), "--out", str(tmp_path / "ev"), "--no-progress"],
        ["evaluate", str(finished_run), "--data", str(text), "--out", str(finished_run), "--no-progress"],
    ]
    for argv in commands:
        assert main([*argv, "--device", "xyz"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "aah-viz: error: --device 'xyz' is not a device torch knows; allowed here: cpu" + (
            ", cuda" * torch.cuda.is_available()
        ), err
    assert _snapshot(finished_run) == before  # the good checkpoint is not called unreadable, nor touched
    assert not (tmp_path / "new").exists() and not (tmp_path / "ev").exists()


def test_evaluating_an_interrupted_run_into_itself_leaves_it_interrupted_and_resumable(tmp_path):
    out = tmp_path / "killed"
    _kill_after(9, out, "--steps", "16", "--checkpoint-interval", "4")
    text = tmp_path / "eval.txt"
    text.write_text("the evaluation text of the interrupted run, long enough for a block or two. " * 20)
    assert main(["evaluate", str(out), "--data", str(text), "--out", str(out), "--no-progress"]) == 0
    assert read_manifest(out)["status"] == "running"  # still interrupted: evaluating it finished nothing
    assert [p.split(":")[0] for p in validate_run(out)] == ["interrupted"]
    assert (load_run(out).events("inference")["step"] == 7).all()  # at the checkpoint it evaluated
    assert main(["train", "--out", str(out), "--resume", "--no-progress", "--threads", "1"]) == 0
    assert validate_run(out) == [] and read_manifest(out)["status"] == "finished"
