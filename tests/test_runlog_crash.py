"""A writer in another process: read while it appends, SIGKILL it, validate, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
from waiting import PATIENCE_S

from aah_viz.runlog import RunWriter, load_run, validate_run

REPO = Path(__file__).resolve().parents[1]
L, H, T = 2, 4, 16

WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from aah_viz.runlog import RunWriter, make_manifest
    L, H, T = 2, 4, 16
    windows = np.array([4, 8, 16])
    m = make_manifest(run_id="live", regime="full_adaptive", seed=0, config={"w_min": 0}, windows=windows.tolist(),
                      seq_len=T, n_layer=L, n_head=H, max_depth=1)
    w = RunWriter.create(sys.argv[1], m)
    step = 0
    while True:  # until killed
        idx = np.random.RandomState(step).randint(0, 3, L * H)
        w.append("heads", {"step": step, "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                           "window_idx": idx, "window": windows[idx], "group_l0": 0})
        per_layer = [np.minimum(T, windows[idx[l * H:(l + 1) * H]]).sum() / (H * T) for l in range(L)]
        w.append("scalars", {"step": step, "layer": [None, 0, 1], "name": "acr",
                             "value": [float(np.mean(per_layer))] + per_layer})
        if step % 3 == 2:
            w.flush()
            print(step, flush=True)
        step += 1
    """
)


def test_reader_follows_a_live_writer_process_and_resume_after_sigkill(tmp_path):
    run_dir = tmp_path / "live"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert child.stdout.readline().strip() == "2"  # first flush done
        run = load_run(run_dir)
        seen = []
        deadline = time.monotonic() + PATIENCE_S  # normally seconds; a loaded machine may need minutes
        while len(set(seen)) < 4 and time.monotonic() < deadline:
            heads = run.refresh().table("heads")
            steps = np.sort(heads["step"].unique())
            # only whole flushes are visible: steps 0..k with every (layer, head) present
            assert len(heads) == len(steps) * L * H
            assert list(steps) == list(range(len(steps))) and len(steps) % 3 == 0
            seen.append(len(steps))
            time.sleep(0.05)
        assert len(set(seen)) >= 2 and run.warnings == []
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=PATIENCE_S)
        child.stdout.close()
    run = load_run(run_dir)
    assert run.status == "running"
    # valid as it stands, and reported as interrupted: no process holds the run any more
    assert validate_run(run_dir) == [
        f"interrupted: status is 'running' but no process is writing the run (it stopped after step "
        f"{run.steps()[-1]}); resume it (aah-viz train --out {run_dir} --resume)"
    ]
    steps = list(run.steps())
    last = steps[-1]
    assert steps == list(range(last + 1))
    # the manifest's progress lags the segments (rewritten at most once a second)
    assert run.manifest["last_step"] is None or run.manifest["last_step"] <= last
    keep = last - 2
    before = run.table("heads")
    w = RunWriter.resume(run_dir, keep_through_step=keep)
    after = load_run(run_dir).table("heads")
    assert after.equals(before[before["step"] <= keep].reset_index(drop=True))
    for step in range(keep + 1, keep + 6):
        w.append(
            "heads",
            {
                "step": step,
                "layer": np.repeat(np.arange(L), H),
                "head": np.tile(np.arange(H), L),
                "window_idx": 0,
                "window": 4,
                "group_l0": 0,
            },
        )
    w.close()
    final = load_run(run_dir)
    assert final.status == "finished"
    assert list(final.steps()) == list(range(keep + 6))
    assert validate_run(run_dir) == []
