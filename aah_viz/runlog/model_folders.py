"""What ``checkpoints/`` and ``adapters/`` of a run may hold: plain ``step-XXXXXXXX`` files of their kinds only.

aah-viz writes nothing else there (``runlog.paths``: every model file is written under a hidden temporary
name and renamed), so anything else was put there by hand: a symbolic link (even one that stays inside the
run: the folder's files are loaded, replaced and pruned as the run's own), a folder, FIFO or other non-file,
or a name that is not a step file. ``validate`` reports each as damage with its path; links out of the run
and hard-linked files are the gate's (``paths.entry_problems``) and said there once.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from aah_viz.runlog import paths

SUFFIXES = {
    paths.CHECKPOINT_DIR: (paths.CHECKPOINT_SUFFIX,),
    paths.ADAPTER_DIR: (paths.ADAPTER_SUFFIX, paths.OPTIMIZER_SUFFIX),
}


def _is_step_file(name: str, suffixes: tuple[str, ...]) -> bool:
    return any(paths.step_of(name, suffix) is not None for suffix in suffixes)


def _is_leftover_temp(name: str) -> bool:
    """A temporary file a killed writer left (``atomic_path``): hidden from every listing, harmless."""
    return name.startswith(".") and name.endswith(paths.TEMP_SUFFIX)


def _entry_problem(path: Path, shown: str, suffixes: tuple[str, ...], run_dir: Path) -> str | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if paths.entry_problem(path, run_dir):
        return None  # a link out or a hard link: the gate's line says it
    wanted = " or ".join(f"step-XXXXXXXX{s}" for s in suffixes)
    if stat.S_ISLNK(st.st_mode):
        return (
            f"{shown} is a symbolic link (to {os.readlink(path)}): the run is damaged (aah-viz writes only plain "
            f"{wanted} files there, and loads, replaces and prunes them as the run's own): remove the link"
        )
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file: the run is damaged (aah-viz writes only plain {wanted} files there)"
    if not _is_step_file(path.name, suffixes):
        return (
            f"{shown} is not a {wanted} file: the run is damaged (aah-viz writes nothing else there): "
            "move it out of the run"
        )
    return None


def problems(run_dir: str | os.PathLike) -> list[str]:
    """One line per entry of ``checkpoints/`` or ``adapters/`` that aah-viz would not have written there."""
    run_dir = Path(run_dir)
    found = []
    for name, suffixes in SUFFIXES.items():
        folder = run_dir / name
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if paths.entry_problem(folder, run_dir, paths.RUN_ENTRIES[name]):
            continue  # a link out of the run, or a file or FIFO at its name: the gate's line says it
        if stat.S_ISLNK(st.st_mode):
            found.append(
                f"{run_dir}/{name} is a symbolic link (to {os.readlink(folder)}): the run is damaged (aah-viz "
                "makes it a folder of its own): remove the link"
            )
            continue
        if not stat.S_ISDIR(st.st_mode):
            found.append(f"{run_dir}/{name} is not a folder: the run is damaged (aah-viz keeps its {name} there)")
            continue
        try:
            names = sorted(e.name for e in os.scandir(folder))
        except OSError as err:
            found.append(f"{run_dir}/{name} cannot be listed ({type(err).__name__})")
            continue
        for entry in names:
            if not _is_leftover_temp(entry):
                problem = _entry_problem(folder / entry, f"{run_dir}/{name}/{entry}", suffixes, run_dir)
                if problem:
                    found.append(problem)
    return found
