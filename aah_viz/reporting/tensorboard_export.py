"""``aah-viz export tensorboard RUN... --out DIR``: finished runs as TensorBoard event files, one folder a run.

Ours, retrofits and imported paper results alike: the ``aah/`` scalars at every recorded step (the
same function as the live callbacks, on the run's tables: ``from_run``), the training and evaluation
scalars beside them (``train/loss``, ``eval/val_loss``, ``run/NAME``). ``tensorboard --logdir DIR``
then overlays old runs. Every run is checked first: a damaged one is refused with its reasons and
nothing is written; each run's folder appears whole (written aside, then renamed into place).
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np

from aah_viz.analysis.curves import cumulative
from aah_viz.errors import ConfigError, RunLogError
from aah_viz.reporting import from_run
from aah_viz.reporting.scalars import routing_scalars, scalars_at
from aah_viz.reporting.sinks import TensorBoardSink
from aah_viz.runlog import load_run, run_dirs
from aah_viz.runlog.containment import refuse_escapes
from aah_viz.runlog.validate import damage

PARTIAL = ".partial-"


def folder_names(runs: list[Path]) -> list[str]:
    """One folder name per run: its run id, made safe for a path, numbered where two agree."""
    names, seen = [], {}
    for run_dir in runs:
        try:
            run_id = load_run(run_dir).run_id
        except RunLogError:
            run_id = run_dir.name
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._") or "run"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def refuse_damaged(runs: list[Path]) -> None:
    """One line naming the first damaged run and its first problem (the CLI's errors are one line)."""
    damaged = [(run_dir, problems) for run_dir in runs if (problems := damage(run_dir))]
    if damaged:
        run_dir, problems = damaged[0]
        more = len(problems) - 1 + sum(len(p) for _, p in damaged[1:])
        also = f" (and {more} more problems: aah-viz validate lists them)" if more else ""
        raise RunLogError(f"run {run_dir} is damaged, nothing written: {problems[0]}{also}")


def wall_clock(manifest: dict, scalars: dict):
    """step -> the Unix time the run reached it: its ``started_at`` plus the step times logged up to the
    step (each logged value standing for the steps since the previous one; evaluation not counted), so
    TensorBoard's relative and wall axes show the run's own time, not the export's. None without a start."""
    try:
        start = datetime.fromisoformat(str(manifest.get("started_at")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    steps, secs = scalars.get("step_time_s", (np.empty(0), np.empty(0)))
    if len(steps) == 0:
        return lambda step: start
    elapsed = cumulative(steps, secs)
    return lambda step: start + float(np.interp(step, steps, elapsed, left=0.0))


def write_run(run_dir: Path, logdir: Path, *, per_layer: bool = False, bar=None) -> int:
    """Every step of one run into an event file under ``logdir``; returns the steps written."""
    run = load_run(run_dir)
    scalars = from_run.model_scalars(run)
    clock = wall_clock(run.manifest, scalars) or (lambda step: None)
    sink = TensorBoardSink(logdir)
    n = 0
    try:
        for rows in from_run.routing_blocks(run, scalars=scalars):
            series = routing_scalars(rows, per_layer=per_layer)
            for i, step in enumerate(rows.steps):
                sink.scalars(int(step), scalars_at(series, i), wall_time=clock(int(step)))
            n += len(rows.steps)
            if bar is not None:
                bar.update(len(rows.steps))
        extra = {**from_run.window_fractions(scalars), **from_run.other_series(run, scalars)}
        for tag, (steps, values) in extra.items():
            for step, value in zip(steps, values):
                if np.isfinite(value):
                    sink.scalars(int(step), {tag: float(value)}, wall_time=clock(int(step)))
    finally:
        sink.close()
    return n


def export_tensorboard(paths, out, *, overwrite: bool = False, per_layer: bool = False, progress: bool = True):
    """Write ``out/<run id>/`` event files for every run of ``paths``; returns the folders written."""
    from tqdm.auto import tqdm

    runs = run_dirs(paths)
    for run in runs:  # a link out of a run: its tables are not read through it
        refuse_escapes(run, "exported")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    names = folder_names(runs)
    # the run's folder and the hidden one it is written in first: neither may be a link (the events would go
    # through it, and --overwrite would empty the folder it leads to) or a file
    used = [out / m for n in names for m in (n, f"{PARTIAL}{n}")]
    linked = [p for p in used if p.is_symlink() or p.exists() and not p.is_dir()]
    if linked:
        raise ConfigError(
            f"{linked[0]} is a link or not a folder; --overwrite replaces only export folders: remove it, "
            "or give another --out"
        )
    taken = [out / n for n in names if (out / n).exists()]
    if taken and not overwrite:
        raise ConfigError(
            f"{', '.join(map(str, taken))} already exist{'s' if len(taken) == 1 else ''}: TensorBoard would show "
            "both exports as one run; pass --overwrite to replace them, or another --out"
        )
    refuse_damaged(runs)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run_dir, name in zip(runs, names):
        total = len(load_run(run_dir).steps())
        partial = out / f"{PARTIAL}{name}"
        shutil.rmtree(partial, ignore_errors=True)
        with tqdm(total=total, desc=name, unit="step", disable=not progress, dynamic_ncols=True) as bar:
            try:
                write_run(run_dir, partial, per_layer=per_layer, bar=bar)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
        final = out / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
        written.append(final)
    return written
