"""``aah-viz sweep`` for real: tiny designs trained on CPU, a worker killed mid-sweep and the sweep rerun
(nothing lost or doubled), and (slow) the same design through the local, Ray and submitit executors giving
the same run directories."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from waiting import run

from aah_viz.runlog import load_run
from aah_viz.sweep.design import load_design, run_name

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def sweep_cmd(design, logs, *extra):
    return [sys.executable, "-m", "aah_viz", "sweep", str(design), "--logs", str(logs), "--no-progress", *extra]


def steps_once(run_dir, steps: int) -> None:
    """Every step's rows exactly once: the loss per step, and every head of every layer per step."""
    r = load_run(run_dir)
    assert r.status == "finished"
    sc = r.table("scalars")
    loss = sc[(sc["name"] == "loss") & sc["layer"].isna()]
    assert sorted(loss["step"].tolist()) == list(range(steps))
    heads = r.table("heads")
    per_step = heads.groupby("step").size()
    assert per_step.index.tolist() == list(range(steps))
    assert per_step.nunique() == 1 and not heads.duplicated(["step", "layer", "head"]).any()


def rerun_finishes(design, logs, ran: int, run_dirs, steps: int) -> None:
    """The same sweep again: every trial done, ``ran`` of them run by this call, every step's rows once."""
    again = run(sweep_cmd(design, logs, "--json"), "the rerun of the sweep", capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["done"], summary["ran"], summary["unfinished"]) == (len(run_dirs), ran, [])
    for run_dir in run_dirs:
        steps_once(run_dir, steps)


def tiny_design(tmp_path, steps: int):
    """Two cells (feature EMA on, off) of the tiny preset, one seed, a checkpoint every 2 steps."""
    design = tmp_path / "design.toml"
    design.write_text(
        f"""
seeds = [0]
[fixed]
preset = "tiny"
steps = {steps}
checkpoint_interval = 2
eval_interval = {steps}
eval_batches = 1
detail = "minimal"
warmup_steps = 1
[factors]
feature_ema = ["on", "off"]
""",
        encoding="utf-8",
    )
    return design


# Put on PYTHONPATH as sitecustomize: the trial training into $SWEEP_VICTIM kills itself (SIGKILL) right after
# the rows of step 4 reach the disk, past the checkpoint of step 3, once (a marker file says it happened).
# The kill lands at the same point on any machine, as a lost worker's would.
KILL_ONCE = """
import os, sys
victim, mark = os.environ.get("SWEEP_VICTIM"), os.environ.get("SWEEP_VICTIM_MARK")
if victim and victim in sys.argv and not os.path.exists(mark):
    import signal
    from instrumentation.recorder import RoutingRecorder
    record_step = RoutingRecorder.step
    def record_step_then_die(self, step, **kw):
        record_step(self, step, **kw)
        if step == 4:
            self.flush(wait=True)
            open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    RoutingRecorder.step = record_step_then_die
"""


def hooked_env(tmp_path, hook_text: str, victim):
    """The environment that puts ``hook_text`` on the path as sitecustomize for the trial training into
    ``victim``, and the marker file it leaves when it has acted."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(hook_text, encoding="utf-8")
    mark = tmp_path / "hook-acted"
    return dict(os.environ, PYTHONPATH=str(hook), SWEEP_VICTIM=str(victim.resolve()), SWEEP_VICTIM_MARK=str(mark)), mark


def test_a_worker_killed_mid_sweep_loses_only_its_trial_and_the_rerun_resumes_it(tmp_path):
    steps = 8
    design = tiny_design(tmp_path, steps)
    logs = tmp_path / "logs"
    d = load_design(design)
    victim = logs / run_name(d.cells[0], 0)
    other = logs / run_name(d.cells[1], 0)
    env, mark = hooked_env(tmp_path, KILL_ONCE, victim)
    cmd = sweep_cmd(design, logs, "--workers", "2", "--threads", "1")
    first = run(cmd, "the sweep whose worker is killed", capture_output=True, text=True, cwd=ROOT, env=env)
    assert mark.exists(), first.stderr  # the victim died at step 4
    assert first.returncode == 2, first.stderr
    lines = first.stderr.strip().splitlines()
    assert len(lines) == 1 and "1 of 2 trials did not finish" in lines[0] and victim.name in lines[0]
    assert load_run(victim).status != "finished"
    steps_once(other, steps)  # the other trial went on and finished

    rerun_finishes(design, logs, 1, (victim, other), steps)
    resumed = load_run(victim).events("resume")
    assert len(resumed) == 1 and len(load_run(other).events("resume")) == 0
    assert sorted(p.name for p in logs.iterdir() if not p.name.startswith(".")) == sorted([victim.name, other.name])


# The trial training into $SWEEP_VICTIM sends SIGTERM to the sweep (its parent) once step 4's rows are on disk,
# as `kill` of the sweep from a shell or a scheduler would.
TERM_THE_SWEEP = KILL_ONCE.replace("os.kill(os.getpid(), signal.SIGKILL)", "os.kill(os.getppid(), signal.SIGTERM)")


def test_a_sweep_stopped_by_sigterm_stops_its_trials_and_starts_no_more(tmp_path):
    """A kill of the sweep alone reaches its running trial (closed as stopped, not left running unowned) and
    starts no other; the next call resumes the stopped one and runs the rest, every step once."""
    steps = 8
    design = tiny_design(tmp_path, steps)
    logs = tmp_path / "logs"
    d = load_design(design)
    victim, later = (logs / run_name(cell, 0) for cell in d.cells)
    env, mark = hooked_env(tmp_path, TERM_THE_SWEEP, victim)
    first = run(
        sweep_cmd(design, logs, "--workers", "1", "--threads", "1"), "the sweep that is sent SIGTERM",
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert mark.exists(), first.stderr
    assert first.returncode == 2, first.stderr
    stopped = load_run(victim)
    assert stopped.status == "stopped" and 4 <= stopped.manifest["last_step"] < steps - 1
    assert not later.exists()  # not started once the sweep was asked to stop

    rerun_finishes(design, logs, 2, (victim, later), steps)


# --- the same design through every executor (slow: three sweeps of eight trials) ----------------------

TIMING = {"step_time_s", "tokens_per_s", "peak_mem_mb", "peak_reserved_mb"}
VOLATILE_MANIFEST = {"started_at", "finished_at", "host", "run_uid"}


def manifest_without_host_and_times(run_dir) -> dict:
    m = json.loads((Path(run_dir) / "manifest.json").read_text())
    return {k: v for k, v in m.items() if k not in VOLATILE_MANIFEST}


def tables_of(run_dir) -> dict[str, pd.DataFrame]:
    r = load_run(run_dir)
    out = {}
    for name in ("heads", "scalars", "branch", "tree"):
        df = r.table(name)
        if name == "scalars":
            df = df[~df["name"].isin(TIMING)]
        out[name] = df.sort_values(list(df.columns[:3])).reset_index(drop=True)
    return out


def sweep_through_every_executor(design: Path, tmp_path: Path, workers: int) -> dict[str, Path]:
    """The design swept by the local, Ray and submitit executors, each into its own logs root; every
    root holds the design's trials, with the same manifests (but for host and times) and tables."""
    roots = {}
    for executor, extra in (("local", []), ("ray", []), ("slurm", ["--submitit-cluster", "local"])):
        logs = tmp_path / executor
        cmd = sweep_cmd(design, logs, "--executor", executor, "--workers", str(workers), "--threads", "1", *extra)
        proc = run(cmd, f"the sweep through {executor}", capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        roots[executor] = logs
    names = {ex: sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) for ex, root in roots.items()}
    expected = sorted(run_name(c, s) for c, s in load_design(design).trials())
    assert names == {ex: expected for ex in roots}
    for name in expected:
        ref_manifest = manifest_without_host_and_times(roots["local"] / name)
        ref_tables = tables_of(roots["local"] / name)
        for ex in ("ray", "slurm"):
            assert manifest_without_host_and_times(roots[ex] / name) == ref_manifest, (ex, name)
            for table, df in tables_of(roots[ex] / name).items():
                pd.testing.assert_frame_equal(df, ref_tables[table], obj=f"{ex} {name} {table}")
    return roots


@pytest.mark.slow
def test_every_executor_writes_the_same_run_directories(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("submitit")
    design = tmp_path / "design.toml"
    design.write_text(
        """
seeds = [0, 1]
[fixed]
preset = "tiny"
steps = 3
eval_interval = 3
warmup_steps = 1
[factors]
grouping = ["feature", "random"]
feature_ema = ["on", "off"]
""",
        encoding="utf-8",
    )
    roots = sweep_through_every_executor(design, tmp_path, workers=2)
    effects = [
        run([sys.executable, "-m", "aah_viz", "effects", str(root), "--design", str(design), "--format", "csv"],
            "aah-viz effects", capture_output=True, text=True).stdout
        for root in roots.values()
    ]  # fmt: skip
    assert effects[0] == effects[1] == effects[2] and "random vs feature" in effects[0]


def test_ray_and_submitit_run_a_trial_as_the_local_executor_does(tmp_path):
    """The default run exercises both cluster executors (a local Ray runtime, submitit's local
    executor) on the smallest design: the same run directories as the local executor's."""
    pytest.importorskip("ray")
    pytest.importorskip("submitit")
    design = tmp_path / "design.toml"
    design.write_text(
        'seeds = [0]\n[fixed]\npreset = "tiny"\nsteps = 2\neval_interval = 2\nwarmup_steps = 1\n'
        '[factors]\ngrouping = ["feature", "random"]\n',
        encoding="utf-8",
    )
    sweep_through_every_executor(design, tmp_path, workers=1)
