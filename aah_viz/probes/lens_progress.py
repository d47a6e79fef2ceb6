"""What an interrupted ``aah-viz lens`` finished, kept in the run so that the same command continues it.

The lens records documents one after another and its rows of a document depend on that document
alone, so the rows of the first ``done`` documents are the whole of what it finished.
:class:`LensProgress` keeps them in the run's hidden ``.lens-progress`` folder (one Parquet file per
table and a JSON file naming the count and a digest of everything that decides the rows) when the
lens is stopped (SIGINT, SIGTERM) and every few minutes. A second lens with the same documents,
options, model and step starts after them; one with anything else refuses in one line, saying how
to continue or to start over (``--restart``). The folder is removed once the lens is written.

Parquet and JSON only: a crafted file in a run can give wrong rows at worst, never run code.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from pathlib import Path

from aah_viz.errors import AAHVizError, InputFormatError
from aah_viz.probes.progress import fingerprint
from aah_viz.runlog.paths import LENS_PROGRESS_DIR, atomic_write_bytes, entry_files, run_entry
from aah_viz.stop import StopRequest

FOLDER = LENS_PROGRESS_DIR  # declared with every entry of a run in runlog.paths
META = "meta.json"
TABLES = ("lens_tokens", "lens_links", "attention_samples")
SAVE_EVERY_S = 300.0  # a killed lens loses at most this much work
RESTART = "pass --restart to discard it and start over"


class LensInterrupted(AAHVizError):
    """The lens was asked to stop; the documents it finished are saved."""


def lens_digest(*, model: str, kind: str, step: int, docs, max_tokens: int, top_k: int) -> str:
    """A digest of everything that decides the lens's rows: the model, its step, the documents
    (ids, texts, words and links) and the options."""
    return fingerprint(
        model=model,
        kind=kind,
        step=int(step),
        docs=[dataclasses.asdict(d) for d in docs],
        max_tokens=int(max_tokens),
        top_k=int(top_k),
    )


class LensProgress:
    """The finished documents of one lens in ``run_dir/.lens-progress``."""

    def __init__(self, run_dir: str | Path, digest: str, *, total: int = 0, every_s: float = SAVE_EVERY_S):
        self.run_dir = Path(run_dir)
        self.folder = run_entry(run_dir, FOLDER)  # refused when a link leads out of the run
        self.digest = digest
        self.total = total
        self.every_s = every_s
        self._saved_at = time.monotonic()
        if self.folder.exists() and not self.folder.is_dir():
            raise InputFormatError(
                f"{self.folder} is not a folder; it is where a lens keeps its progress: move it out of the run"
            )

    def _file(self, name: str) -> Path:
        path = run_entry(self.run_dir, FOLDER, name)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputFormatError(f"{path} is not a plain file: {RESTART}")
        return path

    def saved(self) -> int:
        """Documents an interrupted lens of these settings finished (0: none saved); another lens's
        progress is refused."""
        path = self._file(META)
        if not path.is_file():
            return 0
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
            done, digest = int(meta["done"]), str(meta["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            raise InputFormatError(f"{self.folder} holds an unreadable interrupted lens: {RESTART}") from None
        if digest != self.digest:
            raise InputFormatError(
                f"{self.run_dir} holds an interrupted lens of other documents, options, model or step ({done} "
                f"document(s) done); run that same command again to continue it, or {RESTART} with these"
            )
        return done

    def restore(self) -> tuple[int, dict[str, dict[str, list]]]:
        """(documents done, their rows {table: columns}); (0, empty tables) without a saved lens."""
        done = self.saved()
        tables: dict[str, dict[str, list]] = {t: {} for t in TABLES}
        if done == 0:
            return 0, tables
        import pyarrow.parquet as pq

        try:
            for table in TABLES:
                path = self._file(f"{table}.parquet")
                tables[table] = pq.read_table(path).to_pydict() if path.is_file() else {}
        except (OSError, ValueError):
            raise InputFormatError(f"{self.folder} holds an unreadable interrupted lens: {RESTART}") from None
        return done, tables

    def save(self, done: int, tables: dict[str, dict[str, list]]) -> None:
        """Keep the rows of the first ``done`` documents (the meta last: it names a whole state)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.folder.mkdir(exist_ok=True)
        for table in TABLES:
            path = self._file(f"{table}.parquet")
            if not tables.get(table):
                path.unlink(missing_ok=True)
                continue
            buf = io.BytesIO()
            pq.write_table(pa.table(tables[table]), buf)
            atomic_write_bytes(path, buf.getvalue())
        meta = {"digest": self.digest, "done": int(done), "total": int(self.total)}
        atomic_write_bytes(self._file(META), json.dumps(meta).encode("utf-8"))
        self._saved_at = time.monotonic()

    def checkpoint(self, done: int, tables: dict[str, dict[str, list]], stop: StopRequest) -> None:
        """Between documents: save when due, and stop when asked to (:class:`LensInterrupted`, after saving)."""
        if (reason := stop.requested) is not None:
            self.save(done, tables)
            raise LensInterrupted(
                f"lens stopped by {reason} after {done} of {self.total} documents; the finished ones are saved "
                f"in {self.folder}: run the same command again to continue"
            )
        if time.monotonic() - self._saved_at >= self.every_s:
            self.save(done, tables)

    def clear(self) -> None:
        for path in entry_files(self.run_dir, FOLDER):
            path.unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass
