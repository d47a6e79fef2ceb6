"""A sweep's trials on disk: one run directory per cell and seed under the logs root, and what each needs.

A trial is ``done`` when its run's manifest says ``finished``; ``resume`` when a run is there but did not
finish (killed, stopped, failed): ``aah-viz train --out RUN --resume`` continues it from its newest
checkpoint (``retrofit ... --resume`` from its newest adapter; a frontier, run again, from its last row);
``new`` when no run is there. The design a logs root was started with is recorded in ``.sweep/design.json``;
a different design is refused unless the caller allows it, so two designs never
mix silently under one root.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from aah_viz.errors import AAHVizError
from aah_viz.runlog import bounded_json
from aah_viz.runlog.manifest import read_manifest
from aah_viz.sweep.commands import resume_argv, trial_argv
from aah_viz.sweep.design import Cell, Design, DesignError, parse_design, run_name

STATE_DIR = ".sweep"  # under the logs root: the recorded design and each trial's console output
DESIGN_RECORD = "design.json"
STATES = ("done", "resume", "new")


@dataclass(frozen=True)
class Trial:
    cell: Cell
    seed: int
    run_dir: Path  # absolute: executors on other machines see the same path on shared storage
    state: str  # done, resume or new
    argv: tuple[str, ...]  # after the program name; empty when done

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def log_path(self) -> Path:
        return self.run_dir.parent / STATE_DIR / "logs" / f"{self.name}.log"


def run_status(run_dir: Path) -> str | None:
    """The status the run's manifest records (finished, running, stopped, failed), or None without a
    readable one."""
    try:
        manifest = read_manifest(run_dir)
    except AAHVizError:
        return None
    status = manifest.get("status")
    return status if isinstance(status, str) else None


def trial_state(run_dir: Path) -> str:
    if not run_dir.exists():
        return "new"
    status = run_status(run_dir)
    if status == "finished":
        return "done"
    return "resume" if status is not None else "new"


def plan_trials(design: Design, logs: Path, *, threads: int | None = None) -> list[Trial]:
    """Every cell x seed of the design, in the design's order, with its state and its command."""
    logs = Path(os.path.abspath(logs))
    out = []
    for cell, seed in design.trials():
        run_dir = logs / run_name(cell, seed)
        state = trial_state(run_dir)
        if state == "done":
            argv: list[str] = []
        elif state == "resume":
            argv = resume_argv(design, cell, seed, str(run_dir))
        else:
            argv = trial_argv(design, cell, seed, str(run_dir))
            if run_dir.exists():  # a folder with no readable manifest: a trial killed before its run began
                argv.append("--overwrite")
        if argv:
            argv += ["--no-progress"] + (["--threads", str(threads)] if threads else [])
        out.append(Trial(cell, seed, run_dir, state, tuple(argv)))
    return out


def check_design_record(design: Design, logs: Path, *, allow_changed: bool) -> None:
    """Refuse a design other than the one this logs root was started with (unless allowed)."""
    path = Path(logs) / STATE_DIR / DESIGN_RECORD
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise DesignError(f"{path} cannot be read; remove it to start the sweep's record afresh") from None
    before = recorded.get("design", {}) if isinstance(recorded, dict) else {}
    now = design.canonical()
    if before == now or allow_changed:
        return
    changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    raise DesignError(
        f"the design differs from the one {logs} was started with (changed: {', '.join(changed)}); pass "
        "--allow-changed-design to run this design there (finished runs of cells it keeps are kept), "
        "or choose another --logs"
    )


def write_design_record(design: Design, logs: Path) -> None:
    folder = Path(logs) / STATE_DIR
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    record = {"name": design.name, "fingerprint": design.fingerprint(), "design": design.canonical()}
    tmp = folder / (DESIGN_RECORD + ".tmp")
    # not sorted: the order of factors and levels is part of the design (the first level is the reference)
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, folder / DESIGN_RECORD)


def recorded_design(logs: Path) -> Design:
    """The design a logs root was swept with, from its record (what ``aah-viz effects`` reads without --design)."""
    path = Path(logs) / STATE_DIR / DESIGN_RECORD
    try:
        record = bounded_json.loads(bounded_json.read_regular(path))  # a FIFO or a deep nest: refused, no hang
        data = {k: v for k, v in record["design"].items() if k != "cells"}
        name = str(record.get("name", Path(logs).name))
    except FileNotFoundError:
        raise DesignError(f"{logs} holds no sweep record ({STATE_DIR}/{DESIGN_RECORD}); give --design") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise DesignError(f"{path} cannot be read; give --design") from None
    design = parse_design({**data, "name": name})
    if [c.name for c in design.cells] != record["design"].get("cells"):
        raise DesignError(f"{path} does not expand to the cells it records; give --design")
    return design
