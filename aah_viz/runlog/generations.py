"""Replacing some segments of a table by others so that a reader sees the old set or the new one.

Compaction (many segments merged into a few) and re-probing (a step's probe rows replaced) swap
one set of segment files for another. Renames and deletions of several files are not atomic as
a group, so each swap is a **generation**, recorded in the table folder's hidden
``_generations.json`` before any new segment becomes visible:

1. the new segments are written under hidden temporary names and fsynced;
2. the record gains ``{"added": [new names], "replaces": [old names]}`` (atomic rewrite);
3. the new segments are renamed to their real names;
4. the replaced segments are deleted.

A reader lists the folder once, *then* reads the record, and for each generation: if every
``added`` segment is in its listing, the ``replaces`` segments are hidden (the swap happened,
possibly with old files not yet deleted); otherwise the ``added`` ones are hidden (the swap had
not happened when the folder was listed). Reading the record after the listing makes this safe:
a new segment in the listing implies step 2 was done before the record was read. A writer that
dies mid-swap leaves a state that ``finish`` completes (all renames done: delete the old files)
or rolls back (delete the new ones); every writer calls it under the run's lock before writing.

pandas, pyarrow and DuckDB reading a folder directly do not know the record: during step 4 of a
swap (or after a writer died there) they may see both sets. ``aah-viz validate`` reports such a
folder and ``aah-viz compact`` finishes the swap.

New segments are named by :func:`new_session`, whose ids sort after every name on disk or in the
record, so no swap ever reuses a name a reader may still hold.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aah_viz.runlog import bounded_json, paths
from aah_viz.runlog.segment_io import write_temp

RECORD = "_generations.json"
KEEP = 8  # generations remembered: a reader whose listing is older than 8 swaps could see duplicates


def _load(directory: Path) -> tuple[list[dict], str | None]:
    """The record's generations as written (names unchecked), or ([], why it cannot be used)."""
    try:
        data = bounded_json.loads(bounded_json.read_regular(directory / RECORD))
    except FileNotFoundError:
        return [], None
    except (OSError, ValueError) as err:
        return [], f"{directory.name}/{RECORD} cannot be read ({type(err).__name__}); segments may repeat"
    gens = data.get("generations") if isinstance(data, dict) else None
    if not isinstance(gens, list) or not all(_well_formed(g) for g in gens):
        return [], f"{directory.name}/{RECORD} is not a generation record; segments may repeat"
    return gens, None


def _well_formed(gen) -> bool:
    return isinstance(gen, dict) and all(
        isinstance(gen.get(k), list) and all(isinstance(n, str) for n in gen[k]) for k in ("added", "replaces")
    )


def _foreign(gens: list[dict]) -> list[str]:
    return [n for gen in gens for key in ("added", "replaces") for n in gen[key] if not paths.SEGMENT_RE.fullmatch(n)]


def foreign_names(directory: str | os.PathLike) -> list[str]:
    """Names in the folder's record that are not segment files of that folder (``../../x``, ``a/b``)."""
    return _foreign(_load(Path(directory))[0])


def foreign_message(directory: str | os.PathLike, names: list[str]) -> str:
    folder = Path(directory).name
    shown = ", ".join(repr(n)[:80] for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{folder}/{RECORD} names {shown}, not a segment file of {folder}/: the run is damaged (a run's files "
        "must stay inside it); readers ignore the record and writers refuse the run"
    )


def read_record(directory: str | os.PathLike) -> tuple[list[dict], str | None]:
    """(generations, warning): the folder's swaps, oldest first; a damaged record gives a warning.

    A record that names anything but segment files of its own folder is ignored whole: no such name
    is ever hidden, renamed or deleted."""
    gens, warning = _load(Path(directory))
    foreign = _foreign(gens)
    if foreign:
        return [], foreign_message(directory, foreign)
    return gens, warning


def hidden_names(listed: set[str], generations: list[dict]) -> set[str]:
    """Names a reader must skip, given the segment names of one listing (see the module docstring)."""
    hidden: set[str] = set()
    for gen in generations:
        if all(name in listed for name in gen["added"]):
            hidden.update(gen["replaces"])
        else:
            hidden.update(gen["added"])
    return hidden


def visible_segments(directory: str | os.PathLike) -> tuple[list[Path], str | None]:
    """The table's segments in write order, as one consistent set; (segments, warning or None)."""
    listed = paths.list_segments(directory)  # the listing first, then the record
    generations, warning = read_record(directory)
    if not generations:
        return listed, warning
    hidden = hidden_names({p.name for p in listed}, generations)
    return [p for p in listed if p.name not in hidden], warning


def visible_sizes(directory: str | os.PathLike) -> list[tuple[str, int]]:
    """(name, size) of ``visible_segments``, in the same order: a listing and a ``stat`` each, no paths built.
    The record is read only when the listing holds one (most folders never swapped segments: a dashboard of a
    thousand runs saves four failed opens a run). A first swap's record written while the folder is listed may
    be missed; a caller comparing against names it keeps (``run_summary.read``) then sees a difference."""
    others: set[str] = set()
    listed = paths.segment_entries(directory, others)
    generations = read_record(directory)[0] if RECORD in others else []
    hidden = hidden_names({e.name for e in listed}, generations) if generations else set()
    out = []
    for entry in listed:
        if entry.name in hidden:
            continue
        try:
            out.append((entry.name, entry.stat(follow_symlinks=True).st_size))
        except FileNotFoundError:
            continue  # removed since the listing
    return out


def _write_record(directory: Path, generations: list[dict], durable: bool) -> None:
    data = json.dumps({"generations": generations[-KEEP:]}, indent=1).encode() + b"\n"
    paths.atomic_write_bytes(directory / RECORD, data, durable=durable)


def replace_segments(
    directory: str | os.PathLike,
    new: list[tuple[str, list[pa.Table]]],
    replaces: list[str],
    *,
    durable: bool = True,
    row_group_rows: int | None = None,
) -> list[Path]:
    """Swap the segments named ``replaces`` for ``new`` ((name, tables) pairs) as one generation.

    The caller holds the run's writer lock. A reader sees the old set or the new set, never both
    or neither; a crash at any point leaves a state that :func:`finish` completes or undoes."""
    directory = Path(directory)
    temps = []
    try:
        for name, tables in new:
            temps.append((write_temp(directory, name, tables, durable=durable, row_group_rows=row_group_rows), name))
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    generations, _ = read_record(directory)
    generations.append({"added": [name for name, _ in new], "replaces": list(replaces)})
    _write_record(directory, generations, durable)
    for tmp, name in temps:
        os.replace(tmp, directory / name)
    if durable:
        paths.fsync_dir(directory)
    for name in replaces:
        (directory / name).unlink(missing_ok=True)
    if durable:
        paths.fsync_dir(directory)
    return [directory / name for name, _ in new]


def _rows(path: Path) -> int | None:
    try:
        return int(pq.read_metadata(path).num_rows)
    except Exception:  # noqa: BLE001 - unreadable: its rows cannot be accounted for
        return None


def _accounted(directory: Path, gen: dict, present: list[str]) -> bool:
    """Whether the swap's new segments can hold the rows of the old ones still there: true of every swap
    this package makes (compaction keeps every row; a re-probe replaces a step's rows by as many), not of a
    record written to hide segments. Only such old segments may be deleted."""
    old = [_rows(directory / n) for n in present]
    new = [_rows(directory / n) for n in gen["added"]]
    return None not in old and None not in new and sum(old) <= sum(new)


def _swaps(directory: Path) -> tuple[list[str], list[str], list[str]]:
    listed = {p.name for p in paths.list_segments(directory)}
    generations, _ = read_record(directory)
    stale, orphans, hidden = [], [], []
    for gen in generations:
        if all(name in listed for name in gen["added"]):
            present = [n for n in gen["replaces"] if n in listed]
            if present:
                (stale if _accounted(directory, gen, present) else hidden).extend(present)
        else:
            orphans += [n for n in gen["added"] if n in listed]
    hidden = sorted(set(hidden))
    return sorted(set(stale) - set(hidden)), sorted(set(orphans)), hidden


def unfinished(directory: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(old segments a finished swap has not deleted yet, new segments of a swap that never finished).
    Old segments whose rows the swap's new ones cannot hold are not among them (``unaccounted``)."""
    stale, orphans, _ = _swaps(Path(directory))
    return stale, orphans


def unaccounted(directory: str | os.PathLike) -> list[str]:
    """Segments the record hides whose rows its new segments cannot hold: never deleted (validate reports them)."""
    return _swaps(Path(directory))[2]


def finish(directory: str | os.PathLike, durable: bool = True) -> tuple[list[str], list[str]]:
    """Complete or undo a swap that a dead writer left half done (caller holds the lock).

    Swaps happen one at a time under the lock, so only the newest generation can be unfinished:
    if not all its new segments were renamed, they are deleted and the generation forgotten;
    old segments of finished swaps that are still there are deleted.
    Returns (deleted old segments, deleted new segments of an undone swap)."""
    directory = Path(directory)
    generations, _ = read_record(directory)
    orphans: list[str] = []
    if generations and not all((directory / n).exists() for n in generations[-1]["added"]):
        orphans = [n for n in generations.pop()["added"] if (directory / n).exists()]
        for name in orphans:
            (directory / name).unlink()
        _write_record(directory, generations, durable)
    stale, _ = unfinished(directory)
    for name in stale:
        (directory / name).unlink(missing_ok=True)
    if (stale or orphans) and durable:
        paths.fsync_dir(directory)
    return stale, orphans


def recorded_names(directory: str | os.PathLike) -> set[str]:
    """Every segment name the record mentions: a new segment must not reuse one."""
    generations, _ = read_record(directory)
    return {name for gen in generations for key in ("added", "replaces") for name in gen[key]}


def new_session(run_dir: Path) -> str:
    """A session id that sorts after every earlier one of this run (time in ns, bumped past every
    segment name on disk or in a generation record, so no name is ever reused)."""
    session = time.time_ns()
    existing = 0
    for table in paths.list_table_dirs(run_dir):
        names = [seg.name for seg in paths.list_segments(run_dir / table)]
        for name in names + sorted(recorded_names(run_dir / table)):
            match = paths.SEGMENT_RE.match(name)
            if match and match["session"].isdigit():
                existing = max(existing, int(match["session"]))
    return f"{max(session, existing + 1):020d}"
