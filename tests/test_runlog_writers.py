"""One writer per run directory: the operating system's lock, atomic creation, unique temporary names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pandas as pd
import pytest
from waiting import PATIENCE_S

from aah_viz.cli import main
from aah_viz.errors import RunLockedError, RunLogError
from aah_viz.runlog import RunWriter, load_run, make_manifest, read_manifest, validate_run
from aah_viz.runlog import lock as run_lock
from aah_viz.runlog.manifest import write_manifest
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]


def manifest(run_id="r"):
    return make_manifest(
        run_id=run_id, regime="full_adaptive", seed=0, config={}, windows=[4, 8], seq_len=8, n_layer=1, n_head=2,
        max_depth=1,
    )  # fmt: skip


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    run = make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=6, flush_every=2)
    first = RunWriter.resume(run)
    try:
        for attempt in (
            lambda: RunWriter.resume(run, keep_through_step=2),
            lambda: RunWriter.create(run, manifest(), overwrite=True),
        ):
            with pytest.raises(RunLockedError, match=rf"being written by pid {os.getpid()} on .*resuming the run"):
                attempt()
        # the refused writers changed nothing: the live writer's rows and manifest are intact
        assert sorted(load_run(run).table("heads")["step"].unique()) == list(range(6))
        assert read_manifest(run)["status"] == "running"
        assert run_lock.holder(run) is not None
    finally:
        first.close()
    assert run_lock.holder(run) is None
    RunWriter.resume(run).close()  # free again


def test_the_lock_dies_with_its_process(tmp_path):
    """SIGKILL leaves no stale lock: the next writer gets the run at once; validate calls it interrupted."""
    run = tmp_path / "r"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                from aah_viz.runlog import RunWriter, make_manifest
                m = make_manifest(run_id="r", regime="full_adaptive", seed=0, config={}, windows=[4, 8],
                                  seq_len=8, n_layer=1, n_head=2, max_depth=1)
                w = RunWriter.create(sys.argv[1], m)
                w.append("heads", {"step": [0, 0], "layer": [0, 0], "head": [0, 1], "window_idx": 0, "window": 4})
                w.flush()
                print("ready", flush=True)
                time.sleep(600)
                """
            ),
            str(run),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        assert f"pid {child.pid}" in run_lock.holder(run)
        assert validate_run(run) == []  # running, and someone is writing it: nothing wrong
        with pytest.raises(RunLockedError, match=f"pid {child.pid}"):
            RunWriter.resume(run)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=PATIENCE_S)
        child.stdout.close()
    assert run_lock.holder(run) is None
    assert validate_run(run) == [
        "interrupted: status is 'running' but no process is writing the run (it stopped after step 0); "
        f"resume it (aah-viz train --out {run} --resume)"
    ]
    RunWriter.resume(run).close()
    assert validate_run(run) == []


def test_concurrent_creates_one_wins_the_others_get_one_clear_error(tmp_path):
    run = tmp_path / "race"
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list = [None] * n

    def create(i):
        barrier.wait()
        try:
            w = RunWriter.create(run, manifest(f"w{i}"))
            w.append("heads", {"step": [0, 0], "layer": [0, 0], "head": [0, 1], "window_idx": 0, "window": 4})
            w.close()
            outcomes[i] = "ok"
        except RunLogError as err:
            outcomes[i] = err
        except BaseException as err:  # noqa: BLE001 - any other error is the bug under test
            outcomes[i] = f"raw {type(err).__name__}: {err}"

    threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1, outcomes
    for err in outcomes:
        if err != "ok":
            assert isinstance(err, RunLogError), err
            assert "being written by" in str(err) or "already holds a run" in str(err)
    winner = f"w{outcomes.index('ok')}"
    assert read_manifest(run)["run_id"] == winner
    assert validate_run(run) == []


def test_temporary_names_are_unique_so_concurrent_manifest_writes_never_collide(tmp_path):
    (tmp_path / "m").mkdir()
    errors = []

    def rewrite(i):
        try:
            for k in range(40):
                write_manifest(tmp_path / "m", {"writer": i, "k": k})
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=rewrite, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_manifest(tmp_path / "m")["k"] == 39
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["manifest.json"]  # no temporary file left


def test_probe_tables_are_refused_while_the_run_is_written(tmp_path):
    from aah_viz.probes.store import write_probe_tables

    run = make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=4, flush_every=2)
    frame = pd.DataFrame(
        {"step": [3], "layer": [0], "head": [0], "probe": ["syntax"], "metric": ["uas"], "value": [0.5], "window": [4]}
    )
    with RunWriter.resume(run):
        with pytest.raises(RunLockedError, match="being written by"):
            write_probe_tables(run, {"probe_heads": frame}, 3)
        assert not (run / "probe_heads").exists() or not list((run / "probe_heads").glob("*.parquet"))
    write_probe_tables(run, {"probe_heads": frame}, 3)
    assert len(load_run(run).table("probe_heads")) == 1


def test_cli_names_the_holder_on_one_line(tmp_path, capsys):
    run = make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=4, flush_every=2)
    with RunWriter.resume(run):
        assert main(["compact", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "being written by pid" in err[0] and str(os.getpid()) in err[0]
