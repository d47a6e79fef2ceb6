"""A run's files stay inside the run: no link among them leads out, no name in its records climbs out.

aah-viz never creates a symbolic link in a run, and every name a generation record holds is a
plain segment file name of its folder. A run where that is not so was assembled by hand or
tampered with: a writer that followed a link, or deleted a recorded ``../../x``, would change a
file outside the run. :func:`escapes` lists such places; every writer refuses the run
(``WriterLock.acquire``) and ``aah-viz validate`` reports it as damaged.
"""

from __future__ import annotations

import os
from pathlib import Path

from aah_viz.errors import UnsafePathError
from aah_viz.runlog import generations, paths
from aah_viz.schema import ALL_TABLES, MANIFEST


def _outside(link: Path, root: Path) -> str | None:
    """Where ``link`` (a symbolic link) leads when that is outside ``root``; None when it stays inside."""
    try:
        target = link.resolve()  # a dangling link resolves to where a write through it would create a file
    except (RuntimeError, OSError):  # a loop of links (RuntimeError before Python 3.13)
        return paths.LINK_LOOP
    if target == root or root in target.parents:
        return None
    return str(target)


def link_note(name: str, target: str, rule: str = "outside the run") -> str:
    return (
        f"{name} is a symbolic link to {target}, {rule}: the run is damaged (a run's files must stay inside it); "
        "writers refuse the run: remove the link"
    )


def lock_link_note(run_dir: Path) -> str:
    """The lock is written in place: a link to any file at all would overwrite that file."""
    return link_note(paths.LOCK_NAME, str((run_dir / paths.LOCK_NAME).resolve()), "and a run's lock is never a link")


def _is_table_link(entry: os.DirEntry, run_dir: Path) -> bool:
    """A link in the run folder that stands where a table folder would be."""
    if not paths.TABLE_NAME_RE.match(entry.name) or entry.name in (paths.CHECKPOINT_DIR, paths.ADAPTER_DIR):
        return False
    return entry.name in ALL_TABLES or bool(paths.list_segments(run_dir / entry.name))


def escapes(run_dir: str | os.PathLike) -> list[str]:
    """One line per file of ``run_dir`` that leads outside it: the manifest, the lock, a table folder or a
    file in one that is a symbolic link to somewhere else, every declared entry (``paths.RUN_ENTRIES``) or
    file in one that the gate refuses (a link out, a hard link), and generation records naming other files."""
    run_dir = Path(run_dir)
    root = run_dir.resolve()
    found = []
    try:
        entries = sorted(os.scandir(run_dir), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        if not entry.is_symlink():
            continue
        if entry.name == paths.LOCK_NAME:
            found.append(lock_link_note(run_dir))
        elif entry.name == MANIFEST or _is_table_link(entry, run_dir):
            target = _outside(run_dir / entry.name, root)
            if target is not None:
                found.append(link_note(entry.name, target))
    covered = {MANIFEST, paths.LOCK_NAME}  # their links are named above
    for problem in paths.entry_problems(run_dir):
        if not any(problem.startswith(f"{run_dir}/{name} is a symbolic link") for name in covered):
            found.append(problem)
    for table in paths.list_table_dirs(run_dir):
        directory = run_dir / table
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.is_symlink() and (target := _outside(directory / entry.name, root)) is not None:
                found.append(link_note(f"{table}/{entry.name}", target))
        foreign = generations.foreign_names(directory)
        if foreign:
            found.append(generations.foreign_message(directory, foreign))
    return found


def refuse_escapes(run_dir: str | os.PathLike, doing: str = "read") -> None:
    """Raise :class:`UnsafePathError` naming the first of :func:`escapes` (a reader's gate: the writers'
    is their lock), so that a command neither reads nor writes through a link out of the run."""
    found = escapes(run_dir)
    if found:
        more = f" (and {len(found) - 1} more: aah-viz validate lists them)" if len(found) > 1 else ""
        raise UnsafePathError(f"run {run_dir} is not {doing}: {found[0]}{more}")
