"""Where things live in a run directory, and how user paths stay inside the folder they name.

Segment files are ``<run>/<table>/part-<session>-<seq>.parquet``. Anything whose name starts
with ``.`` or ``_`` is invisible to readers (pyarrow, pandas and DuckDB's ``*.parquet`` glob):
temporary files are ``.part-...parquet.tmp`` and quarantined segments ``_part-...parquet.corrupt``.

Model files: ``aah-viz train`` keeps ``<run>/checkpoints/step-XXXXXXXX.pt``, ``aah-viz retrofit``
``<run>/adapters/step-XXXXXXXX.safetensors`` with ``step-XXXXXXXX.optimizer.pt`` beside each
(XXXXXXXX: the step, eight digits). Every file here is written under a hidden temporary name and
renamed (``atomic_path``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from aah_viz.errors import RunLogError, UnsafePathError
from aah_viz.schema import ALL_TABLES, MANIFEST

SEGMENT_RE = re.compile(r"^part-(?P<session>[0-9A-Za-z]+)-(?P<seq>\d+)\.parquet$")
LOCK_NAME = ".writer.lock"  # the writer's lock (aah_viz.runlog.lock)
# Flags that keep a write from going through a symbolic link (0 where the system has none)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
TEMP_PREFIX = ".part-"
TEMP_SUFFIX = ".tmp"
QUARANTINE_SUFFIX = ".corrupt"


def manifest_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / MANIFEST


def is_run(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is a run directory: it holds a ``manifest.json`` file."""
    return manifest_path(folder).is_file()


def holds_manifest(folder: str | os.PathLike) -> bool:
    """Whether anything named ``manifest.json`` is in ``folder``: a run, or a broken or fake one (a folder,
    a FIFO), which a new run may not overwrite and validate reports rather than searches below."""
    return manifest_path(folder).exists()


# ---------------------------------------------------------------------------- the run's entries
# Every file or folder a command reads or writes inside a run, besides the table folders (segments:
# below), declared once: name -> "file" or "folder". Each is opened, listed, replaced and deleted
# through ``run_entry`` / ``entry_files``, which refuse a link leading out of the run and a
# hard-linked file; ``entry_problems`` lists the same for validate and every writer's lock.
CHECKPOINT_DIR = "checkpoints"  # aah-viz train: the model, optimizer and routing state of a step
ADAPTER_DIR = "adapters"  # aah-viz retrofit: the AAH parameters and routing state of a step
TENSORBOARD_DIR = "tensorboard"  # --report-to tensorboard: the event files
PROBE_PROGRESS_DIR = ".probe-progress"  # an interrupted aah-viz probe's saved state
LENS_PROGRESS_DIR = ".lens-progress"  # an interrupted aah-viz lens's finished documents
INPUTS_DIR = "inputs"  # aah-viz frontier: the split texts its adaptation runs read
SUMMARY = "summary.json"  # the run writer: what the Runs page shows of the run (runlog.run_summary)
RUN_ENTRIES: dict[str, str] = {
    MANIFEST: "file",
    LOCK_NAME: "file",
    CHECKPOINT_DIR: "folder",
    ADAPTER_DIR: "folder",
    TENSORBOARD_DIR: "folder",
    PROBE_PROGRESS_DIR: "folder",
    LENS_PROGRESS_DIR: "folder",
    INPUTS_DIR: "folder",
    SUMMARY: "file",
}


LINK_LOOP = "a loop of links that leads nowhere"  # where a link points when following it never ends


def _leads_out(path: Path, root: Path) -> str | None:
    try:
        target = path.resolve()
    except (RuntimeError, OSError):  # a loop of links (RuntimeError before Python 3.13)
        return LINK_LOOP
    root = root.resolve()
    return None if target == root or root in target.parents else str(target)


def entry_problem(path: Path, run_dir: str | os.PathLike, kind: str | None = None) -> str | None:
    """Why ``path`` (an entry of the run, or a file in one) must not be used: a symbolic link leading out
    of the run, a file with other names (a hard link: writing it writes them), or (``kind``: the declared
    entry's "file" or "folder") something else standing at its name, such as a file where a folder is kept
    or a FIFO, which would block its reader. None when it may."""
    root = Path(run_dir)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return f"{path} cannot be examined ({type(err).__name__})"
    try:
        shown = path.relative_to(root).as_posix()
    except ValueError:
        shown = str(path)
    if stat.S_ISLNK(st.st_mode):
        target = _leads_out(path, root)
        if target is not None:
            return (
                f"{root}/{shown} is a symbolic link to {target}, outside the run: the run is damaged (a run's "
                "files must stay inside it); nothing reads or writes through it: remove the link"
            )
    elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return (
            f"{root}/{shown} is a hard-linked file ({st.st_nlink} names): the run is damaged (writing it would "
            "change a file elsewhere); nothing reads or writes it: replace it by a copy"
        )
    elif kind is not None and not (stat.S_ISDIR if kind == "folder" else stat.S_ISREG)(st.st_mode):
        found = "a folder" if stat.S_ISDIR(st.st_mode) else "a file" if stat.S_ISREG(st.st_mode) else "a FIFO or device"
        return f"{root}/{shown} is not a {kind} ({found}): the run is damaged; nothing reads or writes it: move it away"
    return None


def run_entry(run_dir: str | os.PathLike, name: str, *inside: str) -> Path:
    """The path of the declared entry ``name`` of a run (``inside``: a file in that folder), refused with
    :class:`UnsafePathError` when the entry or the file is a link leading out of the run or hard-linked."""
    if name not in RUN_ENTRIES:
        raise ValueError(f"{name!r} is not a declared entry of a run (runlog.paths.RUN_ENTRIES)")
    path = Path(run_dir) / name
    for part, kind in (
        ((path, RUN_ENTRIES[name]), (path.joinpath(*inside), None)) if inside else ((path, RUN_ENTRIES[name]),)
    ):
        problem = entry_problem(part, run_dir, kind)
        if problem:
            raise UnsafePathError(problem)
    return path.joinpath(*inside)


def entry_files(run_dir: str | os.PathLike, name: str) -> list[Path]:
    """The names in the declared folder ``name`` of a run (none when it is absent), each through the gate."""
    folder = run_entry(run_dir, name)
    try:
        names = sorted(e.name for e in os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [run_entry(run_dir, name, n) for n in names]


def entry_problems(run_dir: str | os.PathLike) -> list[str]:
    """One line per declared entry of a run, or file in a declared folder, that the gate refuses."""
    found = []
    for name, kind in RUN_ENTRIES.items():
        path = Path(run_dir) / name
        problem = entry_problem(path, run_dir, kind)
        if problem:
            found.append(problem)
            continue
        if kind == "folder" and path.is_dir():
            with contextlib.suppress(OSError):
                for e in sorted(os.scandir(path), key=lambda e: e.name):
                    if problem := entry_problem(path / e.name, run_dir):
                        found.append(problem)
    return found


def check_table_name(name: str) -> str:
    """Table names become folder names: lower-case identifiers only, nothing path-like."""
    if not isinstance(name, str) or not TABLE_NAME_RE.match(name):
        raise RunLogError(f"invalid table name {name!r}: use a lower-case identifier such as 'heads' or 'probe_heads'")
    return name


def table_dir(run_dir: str | os.PathLike, table: str) -> Path:
    return Path(run_dir) / check_table_name(table)


def segment_name(session: str, seq: int) -> str:
    return f"part-{session}-{seq:06d}.parquet"


def temp_name(final_name: str) -> str:
    """A hidden temporary name for ``final_name`` that no other process or thread will pick."""
    return f".{final_name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}"


def quarantine_name(final_name: str) -> str:
    return f"_{final_name}{QUARANTINE_SUFFIX}"


def is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def segment_entries(directory: str | os.PathLike, others: set[str] | None = None) -> list[os.DirEntry]:
    """The directory entries of ``list_segments``, in the same order (a caller that needs only names and
    sizes builds no paths: a dashboard of a thousand runs lists tens of thousands of segments). ``others``:
    a set that gets the names of every other entry of the same listing."""
    entries = []
    try:
        with os.scandir(directory) as listing:
            for e in listing:
                if e.name.endswith(".parquet") and not is_hidden(e.name) and e.is_file():
                    entries.append(e)
                elif others is not None:
                    others.add(e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(entries, key=lambda e: _segment_order(e.name))


def list_segments(directory: str | os.PathLike) -> list[Path]:
    """Visible ``*.parquet`` files of one table folder, in write order (session, then sequence)."""
    directory = Path(directory)
    return [directory / e.name for e in segment_entries(directory)]


def list_stray_files(directory: str | os.PathLike) -> list[Path]:
    """Visible files that are not ``*.parquet``: they would break ``pd.read_parquet(folder)``."""
    try:
        return sorted(
            Path(directory) / e.name
            for e in os.scandir(directory)
            if not is_hidden(e.name) and not e.name.endswith(".parquet")
        )
    except (FileNotFoundError, NotADirectoryError):
        return []


def list_temp_files(directory: str | os.PathLike, prefix: str = TEMP_PREFIX) -> list[Path]:
    """Temporary files a writer left behind (``.part-*.tmp``; ``prefix`` picks others, e.g. the manifest's)."""
    try:
        return sorted(
            Path(directory) / e.name
            for e in os.scandir(directory)
            if e.name.startswith(prefix) and e.name.endswith(TEMP_SUFFIX)
        )
    except (FileNotFoundError, NotADirectoryError):
        return []


def list_table_dirs(run_dir: str | os.PathLike) -> list[str]:
    """Names of the table folders of a run, sorted: sub-folders named like a table that are a
    contract table or hold segment files (so ``checkpoints/`` and the like are not tables)."""
    try:
        entries = list(os.scandir(run_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = []
    for e in entries:
        if not (e.is_dir(follow_symlinks=False) and TABLE_NAME_RE.match(e.name)) or e.name in RUN_ENTRIES:
            continue  # a declared entry is never a table (a killed writer's .tmp in checkpoints/ made it one)
        if e.name in ALL_TABLES or _holds_segments(Path(run_dir) / e.name):
            names.append(e.name)
    return sorted(names)


def _holds_segments(directory: Path) -> bool:
    try:
        return any(
            e.name.endswith(".parquet") or e.name.endswith(TEMP_SUFFIX) or e.name.endswith(QUARANTINE_SUFFIX)
            for e in os.scandir(directory)
        )
    except OSError:
        return False


def _segment_order(name: str):
    match = SEGMENT_RE.match(name)
    if match is None:
        return (1, name, 0)
    return (0, match["session"], int(match["seq"]))


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename durable. Some file systems refuse to open directories: then there is nothing to do."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def create_exclusive(path: str | os.PathLike) -> int:
    """A descriptor for writing a new file at ``path``. ``O_EXCL`` fails when anything is there already,
    a symbolic link included (and ``O_NOFOLLOW`` says so twice), so nothing is ever written through a
    link planted under the name."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o644)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = True) -> Iterator[Path]:
    """A hidden temporary name to write ``path`` under: renamed to ``path`` when the block ends (the
    file fsynced first, the folder after, when ``durable``), removed when it raises. A reader sees
    the old file or the new one, never a partial one."""
    path = Path(path)
    tmp = path.with_name(temp_name(path.name))
    os.close(create_exclusive(tmp))  # ours, a plain file: the caller writes into it, the rename replaces
    try:
        yield tmp
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> None:
    """Write ``path`` so that a reader sees either the old or the new content, never a partial file."""
    with atomic_path(path, durable=durable) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | NOFOLLOW | CLOEXEC)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)


def is_within(path: Path, root: Path) -> bool:
    """Whether the resolved ``path`` is ``root`` or inside it."""
    return path == root or root in path.parents


def resolve_under(root: str | os.PathLike, user_path: str | os.PathLike) -> Path:
    """Resolve a user-supplied relative path (or run id) inside ``root``.

    Raises :class:`UnsafePathError` for an absolute path, or one that leaves ``root`` through
    ``..`` or a symbolic link. The result is the resolved path; it need not exist.
    """
    root_resolved = Path(root).resolve()
    text = os.fspath(user_path)
    if "\x00" in text:
        raise UnsafePathError(f"path {text!r} contains a NUL byte; give a path relative to {root_resolved}")
    candidate = Path(text)
    if candidate.is_absolute() or text.startswith(("/", "\\")) or candidate.drive:
        raise UnsafePathError(
            f"path {text!r} is absolute; give a path relative to {root_resolved} (for example a run id)"
        )
    resolved = (root_resolved / candidate).resolve()
    if not is_within(resolved, root_resolved):
        raise UnsafePathError(
            f"path {text!r} leaves {root_resolved} (through '..' or a symbolic link); give a path inside that folder"
        )
    return resolved


# ---------------------------------------------------------------------------- model files
CHECKPOINT_SUFFIX = ".pt"
ADAPTER_SUFFIX = ".safetensors"
OPTIMIZER_SUFFIX = ".optimizer.pt"  # beside each adapter: its optimizer and RNG state
STEP_FILE_RE = re.compile(r"^step-(?P<step>\d{8})(?P<suffix>\..+)$")


def step_file_name(step: int, suffix: str) -> str:
    """``step-XXXXXXXX<suffix>``: the step (the last completed one) in eight digits."""
    return f"step-{int(step):08d}{suffix}"


def step_of(name: str, suffix: str) -> int | None:
    """The step a file name ``step-XXXXXXXX<suffix>`` carries; None for any other name."""
    match = STEP_FILE_RE.match(name)
    return int(match["step"]) if match and match["suffix"] == suffix else None


def checkpoint_path(run_dir: str | os.PathLike, step: int) -> Path:
    """``<run>/checkpoints/step-XXXXXXXX.pt`` (``run_dir`` "" gives the path inside the run)."""
    if str(run_dir) == "":
        return Path(CHECKPOINT_DIR) / step_file_name(step, CHECKPOINT_SUFFIX)
    return run_entry(run_dir, CHECKPOINT_DIR, step_file_name(step, CHECKPOINT_SUFFIX))


def adapter_path(run_dir: str | os.PathLike, step: int) -> Path:
    """``<run>/adapters/step-XXXXXXXX.safetensors``."""
    return run_entry(run_dir, ADAPTER_DIR, step_file_name(step, ADAPTER_SUFFIX))


def adapter_optimizer_path(run_dir: str | os.PathLike, step: int) -> Path:
    """``<run>/adapters/step-XXXXXXXX.optimizer.pt``: the optimizer and RNG state of an adapter's step."""
    return run_entry(run_dir, ADAPTER_DIR, step_file_name(step, OPTIMIZER_SUFFIX))


def _list_steps(run_dir: str | os.PathLike, name: str, suffix: str) -> list[tuple[int, Path]]:
    found = [(step, p) for p in entry_files(run_dir, name) if (step := step_of(p.name, suffix)) is not None]
    return sorted((step, p) for step, p in found if p.is_file())


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint of a run, in step order (temporary files are hidden)."""
    return _list_steps(run_dir, CHECKPOINT_DIR, CHECKPOINT_SUFFIX)


def list_adapters(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every adapter of a retrofit run, in step order."""
    return _list_steps(run_dir, ADAPTER_DIR, ADAPTER_SUFFIX)


def prune_checkpoints(run_dir: str | os.PathLike, keep_last: int) -> None:
    """Remove all but the newest ``keep_last`` checkpoints (keep_last <= 0 keeps everything)."""
    if keep_last <= 0:
        return
    for _, path in list_checkpoints(run_dir)[:-keep_last]:
        path.unlink(missing_ok=True)


def remove_adapters(run_dir: str | os.PathLike) -> None:
    """Remove every adapter of a run with its optimizer file (a run replaced by --overwrite)."""
    for step, path in list_adapters(run_dir):
        path.unlink(missing_ok=True)
        adapter_optimizer_path(run_dir, step).unlink(missing_ok=True)


def prune_adapters(run_dir: str | os.PathLike, keep_last: int) -> None:
    """Remove all but the newest ``keep_last`` adapters with their optimizer files (<= 0 keeps everything)."""
    if keep_last <= 0:
        return
    for step, path in list_adapters(run_dir)[:-keep_last]:
        path.unlink(missing_ok=True)
        adapter_optimizer_path(run_dir, step).unlink(missing_ok=True)
