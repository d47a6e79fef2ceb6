"""Which folders are runs: every run under a folder, a few to tell that a folder holds runs, and the runs
a command is given (each path a run or a folder of runs)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from aah_viz.errors import RunLogError
from aah_viz.runlog.paths import is_run, is_within, manifest_path


def run_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The run directories named: each path a run, or a folder holding runs; each run once (by its resolved
    path), in the order named. Refuses a path that is neither, naming it."""
    found: dict[Path, Path] = {}
    for p in map(Path, paths):
        if is_run(p):
            runs = [p]
        elif p.is_dir():
            runs = discover_runs(p)
            if not runs:
                raise RunLogError(
                    f"{p} holds no run directories (no manifest.json below it); give a run or a folder of runs"
                )
        else:
            raise RunLogError(f"{p} does not exist; give a run directory or a folder of runs")
        for run_dir in runs:
            found.setdefault(run_dir.resolve(), run_dir)
    return list(found.values())


def discover_runs(root: str | os.PathLike, folders: list[Path] | None = None) -> list[Path]:
    """Every run directory (a folder holding ``manifest.json``) under ``root``, sorted.

    Symbolic links are followed only while they stay inside ``root``; a run's own folders are not
    searched for further runs. ``root`` itself counts when it is a run. ``folders``, when given, receives
    every folder searched that is not a run: a new run changes one of their modification times.
    """
    root = Path(root)
    if not root.is_dir():
        raise RunLogError(f"{root} is not a folder; give the folder that holds run directories")
    root_resolved = root.resolve()
    found: list[Path] = []
    seen: set[Path] = set()
    stack = [(root, root_resolved)]  # (folder, its resolved path: a folder reached by no link needs no resolve)
    while stack:
        current, real = stack.pop()
        if real in seen or not is_within(real, root_resolved):
            continue
        seen.add(real)
        if is_run(current) and _manifest_inside(current, root_resolved):
            found.append(current)
            continue
        if folders is not None:
            folders.append(current)
        try:
            children = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in children:
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            try:
                if entry.is_dir(follow_symlinks=True):
                    child = current / entry.name
                    stack.append((child, child.resolve() if entry.is_symlink() else real / entry.name))
            except OSError:
                continue
    return sorted(found)


def _manifest_inside(run_dir: Path, root_resolved: Path) -> bool:
    """Whether the run's manifest is inside ``root``: a plain file in a folder already inside it is (no
    resolve: a thousand runs' manifests are a thousand path walks), a link is resolved."""
    manifest = manifest_path(run_dir)
    return not manifest.is_symlink() or is_within(manifest.resolve(), root_resolved)


def runs_below(folder: str | os.PathLike, *, depth: int = 3, limit: int = 6) -> list[Path]:
    """Run directories inside ``folder`` (not ``folder`` itself), at most ``depth`` levels down and at most
    ``limit`` of them: enough to tell that a folder holds runs without walking a whole disk."""
    found: list[Path] = []
    level = [Path(folder)]
    for _ in range(depth):
        below = []
        for current in level:
            try:
                entries = sorted(os.scandir(current), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                path = current / entry.name
                if is_run(path):
                    found.append(path)
                    if len(found) >= limit:
                        return found
                else:
                    below.append(path)
        level = below
    return found
