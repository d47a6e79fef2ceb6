"""What a long probe has finished, kept on disk so that an interrupted probe continues where it stopped.

``aah-viz probe`` over thousands of inputs runs for an hour or more. Its scorers only accumulate
(counts, hit arrays, sums), so their state after the first ``done`` inputs (in the order the probe
feeds them) is the whole of what it finished. :class:`ProbeProgress` saves that state into the
run's hidden ``.probe-progress`` folder every few minutes and when the probe is stopped (SIGINT,
SIGTERM), and a second run with the same inputs, options, model and step starts after it. A second
run with anything else refuses in one line, saying how to continue or to start over
(``--restart``). The folder is removed when the probe's tables are written.

The state is arrays in an ``.npz`` read with ``allow_pickle=False`` and a JSON file: no pickle, so a
crafted file in a run can give wrong numbers at worst, never run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from pathlib import Path

import numpy as np

from aah_viz.errors import AAHVizError, InputFormatError
from aah_viz.runlog.paths import PROBE_PROGRESS_DIR, run_entry
from aah_viz.stop import StopRequest

FOLDER = PROBE_PROGRESS_DIR  # declared with every entry of a run in runlog.paths
STATE, META = "state.npz", "meta.json"
NUMBERS = (int, float, np.integer, np.floating)
SAVE_EVERY_S = 300.0  # a killed probe loses at most this much work


class ProbeInterrupted(AAHVizError):
    """The probe was asked to stop; what it finished is saved."""


def fingerprint(**parts) -> str:
    """A digest of everything that decides the probe's numbers (inputs, options, model, step, windows)."""
    h = hashlib.sha256()
    for key in sorted(parts):
        value = parts[key]
        h.update(key.encode())
        if isinstance(value, np.ndarray):
            h.update(str(value.dtype).encode() + str(value.shape).encode() + np.ascontiguousarray(value).tobytes())
        else:
            h.update(json.dumps(value, sort_keys=True, default=str).encode())
    return h.hexdigest()


def documents_digest(docs) -> str:
    """The documents as the probe reads them: ids, texts and words (a changed file is another probe)."""
    h = hashlib.sha256()
    for doc in docs:
        h.update(str(doc.id).encode() + b"\0" + doc.text.encode() + b"\0")
        h.update(str(sum(len(s.words) for s in doc.sentences)).encode())
    return h.hexdigest()


def _state_of(objects: dict[str, object]) -> tuple[dict[str, np.ndarray], dict]:
    """The accumulating attributes of ``objects`` as arrays and JSON (strings and tuples are the
    constructor's and are left as built)."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {}
    for name, obj in objects.items():
        for attr, value in vars(obj).items():
            key = f"{name}.{attr}"
            if isinstance(value, np.ndarray):
                arrays[key] = _plain(value)
                meta[key] = "array"
            elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value) and value:
                for i, v in enumerate(value):
                    arrays[f"{key}.{i}"] = _plain(v)
                meta[key] = ["arrays", len(value)]
            elif isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
                for k, v in value.items():
                    arrays[f"{key}.{k}"] = _plain(v)
                meta[key] = ["dict", list(value)]
            elif isinstance(value, list) and all(isinstance(v, NUMBERS) and not isinstance(v, bool) for v in value):
                meta[key] = ["list", [v.item() if isinstance(v, np.generic) else v for v in value]]
            elif value is None or (isinstance(value, NUMBERS) and not isinstance(value, bool)):
                meta[key] = [
                    "scalar",
                    None if value is None else value.item() if isinstance(value, np.generic) else value,
                ]
    return arrays, meta


def _plain(a: np.ndarray) -> np.ndarray:
    return a.astype(str) if a.dtype == object else a  # labels: strings, never pickled objects


def _restore(objects: dict[str, object], arrays, meta: dict) -> None:
    for name, obj in objects.items():
        for attr in list(vars(obj)):
            key = f"{name}.{attr}"
            kind = meta.get(key)
            if kind is None:
                continue
            if kind == "array":
                setattr(obj, attr, arrays[key])
            elif kind[0] == "arrays":
                setattr(obj, attr, [arrays[f"{key}.{i}"] for i in range(int(kind[1]))])
            elif kind[0] == "dict":
                setattr(obj, attr, {k: arrays[f"{key}.{k}"] for k in kind[1]})
            elif kind[0] in ("list", "scalar"):
                setattr(obj, attr, list(kind[1]) if kind[0] == "list" else kind[1])


def _regular(path: Path) -> Path:
    """``path`` when it is a plain file (a FIFO or a device would block the read): else refused."""
    run_entry(path.parent.parent, FOLDER, path.name)
    if path.is_symlink() or not path.is_file():
        raise InputFormatError(f"{path} is not a plain file: pass --restart to discard the interrupted probe")
    return path


class ProbeProgress:
    """The saved state of one probe in ``run_dir/.probe-progress``; the probe stops, saved, once ``stop``
    (a :class:`aah_viz.stop.StopRequest`, entered by the caller) has been requested."""

    def __init__(
        self,
        run_dir: str | Path,
        digest: str,
        *,
        total: int = 0,
        every_s: float = SAVE_EVERY_S,
        stop: StopRequest | None = None,
    ):
        self.folder = run_entry(run_dir, FOLDER)  # refused when a link leads out of the run
        self.digest = digest
        self.total = total
        self.every_s = every_s
        self.stop = stop if stop is not None else StopRequest(enabled=False)
        self._saved_at = time.monotonic()
        if self.folder.is_symlink():
            raise InputFormatError(f"{self.folder} is a link; a run's files must lie inside it: remove it")
        if self.folder.exists() and not self.folder.is_dir():
            raise InputFormatError(
                f"{self.folder} is not a folder; it is where a probe keeps its progress: move it out of the run"
            )

    def saved(self) -> dict | None:
        """The saved meta of this probe, None when there is none; another probe's is refused."""
        meta_path = run_entry(self.folder.parent, FOLDER, META)  # a link out or a hard link: refused
        if meta_path.is_symlink() or (meta_path.exists() and not meta_path.is_file()):
            raise InputFormatError(
                f"{meta_path} is not a plain file: pass --restart to discard the interrupted probe and start over"
            )
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            done, digest = int(meta["done"]), str(meta["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            raise InputFormatError(
                f"{self.folder} is unreadable: pass --restart to discard the interrupted probe and start over"
            ) from None
        if digest != self.digest:
            raise InputFormatError(
                f"{self.folder.parent} holds an interrupted probe of other inputs, options, model or step "
                f"({done} input(s) done); run that same command again to continue it, or pass --restart to "
                "discard it and probe these"
            )
        return meta

    def restore(self, objects: dict[str, object]) -> int:
        """Inputs already done (0 without a saved state); ``objects`` get their saved state."""
        meta = self.saved()
        if meta is None:
            return 0
        try:
            with np.load(_regular(self.folder / STATE), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            _restore(objects, arrays, meta["state"])
        except (OSError, ValueError, KeyError, TypeError):
            raise InputFormatError(
                f"{self.folder} is unreadable: pass --restart to discard the interrupted probe and start over"
            ) from None
        return int(meta["done"])

    def save(self, done: int, objects: dict[str, object]) -> None:
        from aah_viz.runlog.paths import atomic_write_bytes

        arrays, state = _state_of(objects)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.folder / STATE, buf.getvalue())
        meta = {"digest": self.digest, "done": int(done), "total": int(self.total), "state": state}
        atomic_write_bytes(self.folder / META, json.dumps(meta).encode("utf-8"))  # last: names a whole state
        self._saved_at = time.monotonic()

    def checkpoint(self, done: int, objects: dict[str, object]) -> None:
        """At a point where ``done`` inputs are finished and no other begun: save when due, and stop
        when asked to (:class:`ProbeInterrupted`, after saving)."""
        if (reason := self.stop.requested) is not None:
            self.save(done, objects)
            raise ProbeInterrupted(
                f"probe stopped by {reason} after {done} of {self.total} inputs; what it finished is saved in "
                f"{self.folder}: run the same command again to continue"
            )
        if time.monotonic() - self._saved_at >= self.every_s:
            self.save(done, objects)

    def clear(self) -> None:
        for name in (META, STATE):
            (self.folder / name).unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass
