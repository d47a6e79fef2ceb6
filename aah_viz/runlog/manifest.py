"""The run manifest: building it, writing it atomically, reading it and checking its version."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas
import pyarrow

from aah_viz._version import __version__
from aah_viz.errors import RunLogError, SchemaVersionError
from aah_viz.runlog import bounded_json
from aah_viz.runlog.bounded_json import read_regular
from aah_viz.runlog.paths import atomic_write_bytes, manifest_path
from aah_viz.schema import (
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_IMPORTED,
    STATUS_RUNNING,
    STATUS_STOPPED,
    parse_version,
)

STATUSES = (STATUS_RUNNING, STATUS_FINISHED, STATUS_FAILED, STATUS_IMPORTED, STATUS_STOPPED)

# field -> (python types accepted, meaning); docs/log-format.md lists the same
REQUIRED_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "schema_version": ((str,), "major.minor of the run-directory format"),
    "run_id": ((str,), "name of the run"),
    "regime": ((str,), "routing regime"),
    "seed": ((int, type(None)), "random seed"),
    "config": ((dict,), "full model configuration"),
    "windows": ((list,), "candidate windows in tokens, ascending"),
    "seq_len": ((int,), "sequence length T"),
    "n_layer": ((int,), "number of layers"),
    "n_head": ((int,), "heads per layer"),
    "max_depth": ((int,), "most hierarchy levels a layer can have"),
    "software": ((dict,), "versions of the software that wrote the run"),
    "started_at": ((str,), "UTC start time, ISO 8601"),
    "status": ((str,), "running, finished, failed or imported"),
}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def software_versions() -> dict[str, str]:
    """Versions of the packages that shape the run; torch only when the caller already imported it."""
    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pandas.__version__,
        "pyarrow": pyarrow.__version__,
        "aah_viz": __version__,
    }
    torch = sys.modules.get("torch")  # never import it here: the light side runs without torch
    if torch is not None and getattr(torch, "__version__", None):
        versions["torch"] = str(torch.__version__)
    return versions


def host_info() -> dict[str, str]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python_impl": platform.python_implementation(),
    }


def _backend_field(backend: Any) -> dict | None:
    if backend is None:
        return None
    if isinstance(backend, str):
        return {"requested": backend, "resolved": backend, "fallback_reason": None}
    if isinstance(backend, dict):
        out = {"requested": None, "resolved": None, "fallback_reason": None}
        out.update(backend)
        return out
    raise RunLogError(
        f"manifest field 'backend' must be a name or a dict with requested/resolved/fallback_reason, got {backend!r}"
    )


def _positive_int(name: str, value: Any, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise RunLogError(f"manifest field {name!r} must be an integer, got {value!r}")
    value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise RunLogError(f"manifest field {name!r} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def check_windows(windows: Any) -> list[int]:
    try:
        values = [int(w) for w in windows]
    except (TypeError, ValueError):
        raise RunLogError(f"manifest field 'windows' must be a list of integers, got {windows!r}") from None
    if not values or any(w <= 0 for w in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise RunLogError(f"manifest field 'windows' must be positive and strictly ascending, got {values}")
    return values


def make_manifest(
    *,
    run_id: str,
    regime: str,
    seed: int | None,
    config: dict,
    windows,
    seq_len: int,
    n_layer: int,
    n_head: int,
    max_depth: int,
    preset: str | None = None,
    steps: int | None = None,
    data: Any = None,
    world_size: int = 1,
    backend: Any = None,
    **extra: Any,
) -> dict:
    """A complete manifest for a new run (status ``running``); ``extra`` fields are kept as given."""
    if not isinstance(run_id, str) or not run_id:
        raise RunLogError(f"manifest field 'run_id' must be a non-empty string, got {run_id!r}")
    if not isinstance(config, dict):
        raise RunLogError(
            f"manifest field 'config' must be a dict (the full model config), got {type(config).__name__}"
        )
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "regime": str(regime),
        "seed": None if seed is None else int(seed),
        "preset": preset,
        "config": to_jsonable(config),
        "windows": check_windows(windows),
        "seq_len": _positive_int("seq_len", seq_len),
        "n_layer": _positive_int("n_layer", n_layer),
        "n_head": _positive_int("n_head", n_head),
        "max_depth": _positive_int("max_depth", max_depth, allow_zero=True),
        "steps": None if steps is None else _positive_int("steps", steps, allow_zero=True),
        "last_step": None,
        "data": to_jsonable(data),
        "world_size": _positive_int("world_size", world_size),
        "backend": _backend_field(backend),
        "software": software_versions(),
        "host": host_info(),
        "started_at": utc_now(),
        "finished_at": None,
        "status": STATUS_RUNNING,
    }
    for key, value in extra.items():
        manifest[key] = to_jsonable(value)
    return manifest


def to_jsonable(value: Any) -> Any:
    """Plain JSON values from numpy scalars/arrays, tuples, paths and dataclass-like dicts."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "tolist"):  # tensors and other array types, without importing their library
        try:
            return to_jsonable(value.tolist())
        except Exception:  # noqa: BLE001 - fall back to the text form
            pass
    return str(value)


def write_manifest(run_dir: str | os.PathLike, manifest: dict) -> None:
    data = json.dumps(to_jsonable(manifest), indent=2, allow_nan=False).encode() + b"\n"
    atomic_write_bytes(manifest_path(run_dir), data)


def read_manifest(run_dir: str | os.PathLike) -> dict:
    """The manifest as a dict; raises :class:`RunLogError` when missing or unreadable."""
    path = manifest_path(run_dir)
    if not Path(run_dir).is_dir():
        raise RunLogError(f"{run_dir} is not a run directory (no such folder); give a folder holding manifest.json")
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise RunLogError(
            f"{run_dir} is not a run directory: {path.name} is missing (was the run started with aah-viz train?)"
        ) from None
    except UnicodeDecodeError as err:
        raise RunLogError(
            f"{path} is not UTF-8 text (byte {err.start} cannot be decoded); the run directory is damaged"
        ) from None
    except OSError as err:
        raise RunLogError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        manifest = bounded_json.loads(text)
    except ValueError as err:
        raise RunLogError(f"{path} is not valid JSON ({err}); the run directory is damaged") from None
    if not isinstance(manifest, dict):
        raise RunLogError(f"{path} must hold a JSON object, found {type(manifest).__name__}")
    return manifest


def check_version(manifest: dict, where: str | os.PathLike) -> tuple[int, int]:
    """Parse ``schema_version``; refuse a newer major with :class:`SchemaVersionError`."""
    text = manifest.get("schema_version")
    if text is None:
        raise RunLogError(f"run {where} has no schema_version in its manifest; it was not written by aah-viz")
    try:
        version = parse_version(text)
    except (TypeError, ValueError):
        raise RunLogError(f"run {where} has an unreadable schema_version {text!r} (expected major.minor)") from None
    ours = parse_version(SCHEMA_VERSION)
    if version[0] > ours[0]:
        raise SchemaVersionError(
            f"run {where} was written with schema {text}; this aah-viz reads {ours[0]}.x; upgrade aah-viz"
        )
    if version[0] < ours[0]:
        raise SchemaVersionError(
            f"run {where} was written with schema {text}, older than this aah-viz reads ({ours[0]}.x); "
            f"use an older aah-viz release to read it"
        )
    return version


# Ranges a manifest must keep: beyond them a page would allocate n_layer x n_head cells (or more)
# for a number no model has. int16 layer/head columns, int8 window indices.
LIMITS: dict[str, tuple[int, int]] = {
    "seq_len": (1, 1 << 24),
    "n_layer": (1, 1024),
    "n_head": (1, 1024),
    "max_depth": (0, 64),
    "world_size": (1, 1 << 16),
    "steps": (0, 10**12),
    "last_step": (0, 10**12),
}
MAX_WINDOWS = 127  # window_idx is an int8
MAX_WINDOW = (1 << 31) - 1  # window is an int32

# optional fields: when present (and not null where null is allowed) they must have these types
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "preset": (str, type(None)),
    "steps": (int, type(None)),
    "last_step": (int, type(None)),
    "data": (str, dict, type(None)),
    "world_size": (int,),
    "backend": (dict, type(None)),
    "host": (dict,),
    "finished_at": (str, type(None)),
    "resumes": (list,),
    "imported": (bool,),
    "sources": (list,),
    "reference": (dict,),
    "compactions": (list,),
    "train": (dict,),
}
# config keys the light side reads, by kind (other keys are the model's business)
CONFIG_NUMBERS = ("w_min", "warmup_steps", "control_interval", "n_embd", "n_ff", "block_size", "vocab_size")
CONFIG_STRINGS = ("preset", "regime", "window_ablation_mode", "attention_backend")
CONFIG_BOOLS = ("enabled",)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _type_names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", dict: "an object", list: "a list", bool: "true or false"}
    return " or ".join(names.get(t, "null") for t in types)


def manifest_problems(manifest: dict) -> list[str]:
    """Missing, ill-typed or out-of-range manifest fields, one message each (naming the field)."""
    problems = []
    for field, (types, meaning) in REQUIRED_FIELDS.items():
        if field not in manifest:
            problems.append(f"manifest.json: missing field {field!r} ({meaning})")
            continue
        if not _type_ok(manifest[field], types):
            problems.append(
                f"manifest.json: field {field!r} ({meaning}) must be {_type_names(types)}, "
                f"got {_shown(manifest[field])}"
            )
    for field, types in OPTIONAL_FIELDS.items():
        if field in manifest and not _type_ok(manifest[field], types):
            problems.append(
                f"manifest.json: field {field!r} must be {_type_names(types)}, got {_shown(manifest[field])}"
            )
    status = manifest.get("status")
    if isinstance(status, str) and status not in STATUSES:
        problems.append(f"manifest.json: field 'status' is {_shown(status)}, not one of {', '.join(STATUSES)}")
    windows = manifest.get("windows")
    if isinstance(windows, list):
        if not all(_is_int(w) for w in windows):
            problems.append(f"manifest.json: field 'windows' must be a list of integers, got {_shown(windows)}")
        elif len(windows) > MAX_WINDOWS or any(w > MAX_WINDOW for w in windows):
            problems.append(
                f"manifest.json: field 'windows' allows at most {MAX_WINDOWS} windows of at most {MAX_WINDOW} tokens"
            )
        else:
            try:
                check_windows(windows)
            except RunLogError as err:
                problems.append(f"manifest.json: {err}")
    for field, (lo, hi) in LIMITS.items():
        value = manifest.get(field)
        if _is_int(value) and not lo <= value <= hi:
            problems.append(f"manifest.json: field {field!r} must be in [{lo}, {hi}], got {value}")
    problems += _config_problems(manifest.get("config"))
    problems += _mirror_problems(manifest)
    backend = manifest.get("backend")
    if isinstance(backend, dict) and not all(v is None or isinstance(v, str) for v in backend.values()):
        problems.append(f"manifest.json: field 'backend' must map names to strings or null, got {_shown(backend)}")
    return problems


def _config_problems(config: Any) -> list[str]:
    if not isinstance(config, dict):
        return []
    problems = []
    for key in CONFIG_NUMBERS:
        value = config.get(key)
        if value is not None and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        ):
            problems.append(f"manifest.json: field 'config.{key}' must be a number >= 0, got {_shown(value)}")
    for key in CONFIG_STRINGS:
        if config.get(key) is not None and not isinstance(config[key], str):
            problems.append(f"manifest.json: field 'config.{key}' must be a string, got {_shown(config[key])}")
    for key in CONFIG_BOOLS:
        if config.get(key) is not None and not isinstance(config[key], bool):
            problems.append(f"manifest.json: field 'config.{key}' must be true or false, got {_shown(config[key])}")
    return problems


# config keys that say again what a top-level field says: they must agree (a page or a command may read either)
MIRRORED = ("n_layer", "n_head", "max_depth")


def _mirror_problems(manifest: dict) -> list[str]:
    config = manifest.get("config")
    if not isinstance(config, dict):
        return []
    problems = []
    for key in MIRRORED:
        if key not in config:
            continue
        value, top = config[key], manifest.get(key)
        lo, hi = LIMITS[key]
        if not (_is_int(value) and lo <= value <= hi):
            problems.append(
                f"manifest.json: field 'config.{key}' must be an integer in [{lo}, {hi}], got {_shown(value)}"
            )
        elif _is_int(top) and value != top:
            problems.append(f"manifest.json: field 'config.{key}' is {value}, but field {key!r} says {top}")
    return problems


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def check_manifest(manifest: dict, where: str | os.PathLike) -> None:
    """Raise :class:`RunLogError` naming the first bad field of a manifest ``validate`` would reject."""
    problems = manifest_problems(manifest)
    if problems:
        more = f" (and {len(problems) - 1} more problems: aah-viz validate lists them)" if len(problems) > 1 else ""
        first = problems[0].removeprefix("manifest.json: ")
        raise RunLogError(f"run {where} cannot be opened: its manifest.json {first}{more}")
