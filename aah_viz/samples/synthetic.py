"""A plausible, complete, synthetic run written through ``RunWriter`` (no model, no torch).

Used by tests of the other parts and by the dashboard's scale benchmark. Everything is drawn
from ``numpy.random.RandomState(seed)`` and generated with vectorised numpy, so 24 layers x 16
heads x 10,000 steps (3.84M head rows) takes seconds. The routing it pretends to have done is
``aah_viz.samples.simulation``'s; its tables are ``aah_viz.samples.tables``'.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from aah_viz.method import SIM_THRESHOLD
from aah_viz.runlog.manifest import make_manifest
from aah_viz.runlog.writer import RunWriter
from aah_viz.samples.simulation import RunShape, simulate
from aah_viz.samples.tables import (
    branch_table,
    events_table,
    heads_table,
    scalars_table,
    tree_table,
    validity_table,
)


def make_synthetic_run(
    run_dir: str | os.PathLike,
    *,
    n_layer: int = 4,
    n_head: int = 12,
    steps: int = 300,
    windows=(32, 64, 128, 256),
    seq_len: int = 256,
    regime: str = "full_adaptive",
    seed: int = 0,
    control_interval: int = 5,
    warmup: int = 20,
    max_depth: int = 4,
    flush_every: int = 50,
    eval_interval: int | None = None,
    w_min: int = 0,
    detail: str = "full",
    status: str = "finished",
    overwrite: bool = False,
) -> Path:
    """Write a synthetic run to ``run_dir`` and return its path.

    ``flush_every`` steps go into one segment per table; ``status`` is what the manifest ends with
    (``"running"`` leaves the writer unclosed, as if the process were still training).
    """
    rng = np.random.RandomState(seed)
    windows = [int(w) for w in windows]
    routed = max_depth > 0 and regime != "full_attention"
    if not routed:  # every head attends the full context; nothing is routed
        warmup = steps
    shape = RunShape(n_layer, n_head, steps, tuple(windows), seq_len, control_interval, warmup, max_depth, w_min)
    sim = simulate(rng, shape, routed)
    eval_interval = eval_interval or max(1, steps // 10)
    # small whole-run tables first (their draws do not depend on the chunking), then the big ones per chunk
    scalars = scalars_table(rng, sim, eval_interval)
    events = events_table(sim, eval_interval)
    config = {
        "n_layer": n_layer,
        "n_head": n_head,
        "n_embd": 32 * n_head,
        "vocab_size": 256,
        "seq_len": seq_len,
        "windows": windows,
        "w_min": w_min,
        "control_interval": control_interval,
        "warmup_steps": warmup,
        "max_depth": max_depth,
        "regime": regime,
        "sim_threshold": SIM_THRESHOLD,
    }
    manifest = make_manifest(
        run_id=Path(run_dir).name,
        regime=regime,
        seed=seed,
        config=config,
        windows=windows,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        max_depth=max_depth,
        preset="synthetic",
        steps=steps,
        data="synthetic-run",
        backend={"requested": "none", "resolved": "none", "fallback_reason": None},
        synthetic=True,
        detail=detail,
    )
    writer = RunWriter.create(run_dir, manifest, overwrite=overwrite)
    writer.flush_rows = 1 << 62  # one segment per table per chunk, written by the loop below
    writer.durable = False  # regenerable data: atomic renames without fsync
    small = {"scalars": scalars, "events": events}
    small_steps = {name: table.column("step").to_numpy() for name, table in small.items()}
    chunk = max(1, int(flush_every))
    validity_rng = np.random.RandomState(seed + 7919)  # its own stream: the other tables stay as they were
    for start in range(0, steps, chunk):
        stop = min(steps, start + chunk)
        writer.append("heads", heads_table(sim, start, stop))
        if routed:
            b_lo, b_hi = -(-start // control_interval), -(-stop // control_interval)  # builds at steps in the chunk
            if b_hi > b_lo:
                tree = tree_table(rng, sim, detail == "full", b_lo, b_hi)
                writer.append("tree", tree)
                writer.append("cluster_validity", validity_table(validity_rng, tree, n_head))
        writer.append("branch", branch_table(sim, start, stop))
        for name, table in small.items():
            lo, hi = np.searchsorted(small_steps[name], [start, stop])
            if hi > lo:
                writer.append(name, table.slice(int(lo), int(hi - lo)))
        writer.flush()
    if status == "running":
        writer.flush()
    else:
        writer.close(status)
    return Path(run_dir)
