"""One writer per run directory, enforced by the operating system.

A writer (``RunWriter``, a probe, ``aah-viz compact``) holds an exclusive ``flock`` on
``<run>/.writer.lock`` for as long as it writes. The kernel releases the lock when the process
dies, however it dies (SIGKILL included), so there is never a stale lock to clean up. The file
holds a line describing the holder (pid, host, command, start time) so a refused writer can say
who holds the run. The file itself is never deleted: deleting a lock file lets two processes
lock two different files of the same name. Readers never take the lock; ``holder`` only asks
whether a live writer holds it.

The lock is the one file written in place, so it is opened without following a symbolic link and
must be a plain file with no other name (a hard link); and a writer refuses a run whose files lead
outside it (``containment.escapes``) before it writes anything.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

from aah_viz.errors import RunLockedError, UnsafePathError
from aah_viz.runlog import containment
from aah_viz.runlog.manifest import utc_now
from aah_viz.runlog.paths import CLOEXEC, LOCK_NAME, NOFOLLOW

try:  # POSIX; elsewhere every writer is allowed (documented in docs/log-format.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

# a reader asking `holder` holds a shared lock for a few microseconds; a writer that meets it tries again
ACQUIRE_ATTEMPTS = 40
ACQUIRE_PAUSE_S = 0.025


def lock_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / LOCK_NAME


def _describe_self(purpose: str) -> str:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]
    return json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose, "command": command, "since": utc_now()}
    )


def _holder_text(raw: str) -> str:
    try:
        info = json.loads(raw)
        return f"pid {info['pid']} on {info['host']} ({info['purpose']}: {info['command']!r}, since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"


class WriterLock:
    """The exclusive lock of one run directory; ``release`` (or process death) frees it."""

    def __init__(self, fd: int, path: Path):
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, run_dir: str | os.PathLike, purpose: str) -> WriterLock:
        """Lock ``run_dir`` (created if needed) or raise :class:`RunLockedError` naming the holder."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = lock_path(run_dir)
        fd = _open_lock(run_dir, path)
        if fcntl is None:  # pragma: no cover
            return cls(fd, path)
        for attempt in range(ACQUIRE_ATTEMPTS):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == ACQUIRE_ATTEMPTS - 1:
                    text = _read(fd)
                    os.close(fd)
                    raise RunLockedError(
                        f"run {run_dir} is being written by {_holder_text(text)}; one writer per run: "
                        f"wait for it to finish or stop it, then try again"
                    ) from None
                time.sleep(ACQUIRE_PAUSE_S)
        escapes = containment.escapes(run_dir)
        if escapes:
            os.close(fd)
            more = f" (and {len(escapes) - 1} more: aah-viz validate lists them)" if len(escapes) > 1 else ""
            raise UnsafePathError(f"run {run_dir} is not written: {escapes[0]}{more}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_describe_self(purpose) + "\n").encode(), 0)
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock

    __del__ = release  # a writer dropped without closing frees the run as well

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _open_lock(run_dir: Path, path: Path) -> int:
    """The lock file's descriptor: never through a symbolic link, and only a plain file of its own."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | CLOEXEC | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError:
        if not path.is_symlink():
            raise
        raise UnsafePathError(f"run {run_dir} is not written: {containment.lock_link_note(run_dir)}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "has another name (a hard link)" if stat.S_ISREG(info.st_mode) else "is not a plain file"
        raise UnsafePathError(
            f"run {run_dir} is not written: {LOCK_NAME} {what}; writing the lock would change that file too: "
            f"remove {path}, then try again"
        )
    return fd


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def holder(run_dir: str | os.PathLike) -> str | None:
    """A description of the live writer of ``run_dir``, or None when no process holds the lock."""
    path = lock_path(run_dir)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if fcntl is None:  # pragma: no cover
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_text(_read(fd))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
