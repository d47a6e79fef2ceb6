"""Many runs under one logs root, made cheaply, for ``aah-viz bench dashboard --pages --runs N``.

A few distinct synthetic runs of the sample runs' shape (4 layers x 12 heads, T = 128, windows
16-128; varied regimes and seeds, one still running) are generated once; every one of the N run
directories then holds hard links to one of them's segment files and a manifest of its own (run
id, seed). The dashboard opens each run directory on its own (its manifest, its segments, its
caches), so its cost of many runs is measured as it would be on N distinct runs, without
generating N of them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from aah_viz.runlog.manifest import read_manifest, write_manifest
from aah_viz.runlog.paths import SUMMARY
from aah_viz.samples import make_synthetic_run

# (regime, seed, status) of the distinct runs; the copies cycle through the finished ones
PROTOTYPES = [
    ("full_adaptive", 0, "finished"),
    ("full_attention", 0, "finished"),
    ("grouping_off", 0, "finished"),
    ("fixed_window", 0, "finished"),
    ("shallow_freeze", 0, "finished"),
    ("full_adaptive", 1, "running"),
]
LIVE_EVERY = 50  # one run in this many is marked running (stopped half-way, as a live one looks)
SHAPE = {"n_layer": 4, "n_head": 12, "seq_len": 128, "windows": (16, 32, 64, 128)}


def make_prototypes(folder: Path, steps: int, flush_every: int) -> list[Path]:
    """The distinct runs; a running one is written half-way and keeps its planned ``steps``."""
    out = []
    for regime, seed, status in PROTOTYPES:
        run_dir = folder / f"{regime}-seed{seed}-{status}"
        written = steps if status == "finished" else max(1, steps // 2)
        make_synthetic_run(
            run_dir,
            **SHAPE,
            steps=written,
            regime=regime,
            seed=seed,
            flush_every=min(flush_every, written),
            status=status,
            max_depth=1 if regime in ("fixed_window", "shallow_freeze") else 4,
        )
        if status != "finished":
            manifest = read_manifest(run_dir)
            manifest["steps"] = steps
            write_manifest(run_dir, manifest)
        out.append(run_dir)
    return out


def copy_run(source: Path, target: Path, run_id: str, seed: int) -> None:
    """``target`` as a run of its own: hard links to ``source``'s segments, its own manifest."""
    target.mkdir(parents=True)
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                (target / entry.name).mkdir()
                with os.scandir(entry.path) as files:
                    for f in files:
                        if f.is_file(follow_symlinks=False):
                            os.link(f.path, target / entry.name / f.name)
    if (source / SUMMARY).is_file():  # a copy of its own (the run-entry gate refuses a hard-linked file)
        shutil.copyfile(source / SUMMARY, target / SUMMARY)
    manifest = read_manifest(source)
    manifest.update(run_id=run_id, seed=seed)
    write_manifest(target, manifest)


def drop_summaries(root: Path) -> int:
    """Delete every run's ``summary.json`` under ``root``: the runs then read as runs recorded before it."""
    gone = 0
    for run_dir in sorted(Path(root).iterdir()):
        if (run_dir / SUMMARY).is_file():
            (run_dir / SUMMARY).unlink()
            gone += 1
    return gone


def make_many_runs(root: Path, n: int, steps: int, flush_every: int = 250, progress=None) -> dict:
    """``n`` run directories ``root/run-NNNN``; what was made (prototypes, live runs)."""
    root = Path(root)
    protos = make_prototypes(root / ".prototypes", steps, flush_every)
    finished = [p for p, (_, _, status) in zip(protos, PROTOTYPES) if status == "finished"]
    live = [p for p, (_, _, status) in zip(protos, PROTOTYPES) if status != "finished"]
    n_live = 0
    for i in range(n):
        is_live = live and i % LIVE_EVERY == 1
        source = live[0] if is_live else finished[i % len(finished)]
        n_live += bool(is_live)
        copy_run(source, root / f"run-{i:04d}", f"run-{i:04d}", seed=i // len(finished))
        if progress is not None:
            progress.update(1)
    # the prototypes themselves are not runs of the logs root (discovery skips hidden folders; remove anyway)
    shutil.rmtree(root / ".prototypes")
    return {"n_runs": n, "live_runs": n_live, "steps": steps, "distinct_runs": len(PROTOTYPES), **_shape()}


def _shape() -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in SHAPE.items()}
