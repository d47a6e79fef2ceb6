"""The settings of a training run: checked at the door, and on ``--resume`` taken from the run itself.

A resumed run must continue the run that is there, not a new one built from command-line
defaults. The run's manifest records every training argument (``manifest["train"]``); a resume
takes them all from there. An argument the user gave explicitly must agree with the recorded
one, with one exception that is an explicit, recorded choice: ``steps`` larger than recorded
extends the run.
"""

from __future__ import annotations

import dataclasses
import math

from aah_viz.errors import ConfigError

# Training arguments that define the run (and so are taken from it on resume). Device, threads,
# progress display and the resume/overwrite switches are how this process runs, not what it trains.
RUN_DEFINING = (
    "preset",
    "regime",
    "steps",
    "seed",
    "data",
    "n_docs",
    "data_seed",
    "batch_size",
    "lr",
    "weight_decay",
    "lr_warmup_steps",
    "eval_interval",
    "eval_batches",
    "val_fraction",
    "checkpoint_interval",
    "keep_checkpoints",
    "detail",
    "flush_every",
    "backend",
    "window",
    "routing_sync",
)

# (flag, lowest allowed value) of every integer setting; None values mean "the default".
_INT_MIN = {
    "steps": ("--steps", 1),
    "n_docs": ("--n-docs", 1),
    "batch_size": ("--batch-size", 1),
    "lr_warmup_steps": ("--lr-warmup", 0),
    "eval_interval": ("--eval-interval", 1),
    "eval_batches": ("--eval-batches", 1),
    "checkpoint_interval": ("--checkpoint-interval", 0),
    "keep_checkpoints": ("--keep-checkpoints", 0),
    "flush_every": ("--flush-every", 1),
    "window": ("--window", 1),
    "threads": ("--threads", 1),
    "seed": ("--seed", 0),
    "data_seed": ("--data-seed", 0),
}


# the largest value of a setting whose size is allocated (a batch of 10^11 sequences is not a mistake to run)
_INT_MAX = {"batch_size": 1 << 16, "eval_batches": 1 << 20, "n_docs": 10**7, "threads": 4096, "steps": 10**9}


def check_ints(settings, table: dict = _INT_MIN) -> None:
    """Every integer setting of ``settings`` (an object with those attributes) within its range, or one
    ConfigError naming the flag, the value and the range."""
    for key, (flag, lowest) in table.items():
        value = getattr(settings, key, None)
        if value is None:
            continue
        highest = _INT_MAX.get(key)
        allowed = f">= {lowest}" if highest is None else f"from {lowest} to {highest}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{flag} must be an integer {allowed}, got {value!r}")
        if value < lowest or (highest is not None and value > highest):
            raise ConfigError(f"{flag} must be an integer {allowed}, got {value}")


def check_values(tc) -> None:
    """Raise ConfigError (naming the flag and the allowed values) for any out-of-range training setting."""
    check_ints(tc)
    if not _finite(tc.lr) or tc.lr <= 0:
        raise ConfigError(f"--lr must be a finite number above 0, got {tc.lr!r}")
    if not _finite(tc.weight_decay) or tc.weight_decay < 0:
        raise ConfigError(f"--weight-decay must be a finite number >= 0, got {tc.weight_decay!r}")
    if not _finite(tc.val_fraction) or not 0 < tc.val_fraction < 1:
        raise ConfigError(f"val_fraction must be in (0, 1), got {tc.val_fraction!r}")
    if tc.routing_sync not in (None, "mean", "off"):
        raise ConfigError(f"--routing-sync must be mean or off, got {tc.routing_sync!r}")
    if tc.resume and tc.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pass one of them")


def check_device(device: str) -> None:
    """One line for a device this machine does not have (instead of torch's traceback later)."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(
            f"--device {device!r} is not a device torch knows; allowed here: cpu"
            + (", cuda" * torch.cuda.is_available())
        ) from None
    if kind == "cpu":
        return
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: CUDA is not available on this machine; allowed here: cpu")
        index = str(device).partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(
                f"--device {device}: no such GPU; allowed: cuda, cpu, cuda:0..cuda:{torch.cuda.device_count() - 1}"
            )
        return
    if kind == "mps" and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return
    raise ConfigError(
        f"--device {device!r} is not available; allowed here: cpu" + (", cuda" * torch.cuda.is_available())
    )


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def explicit_fields(tc) -> set[str]:
    """The run-defining fields the caller set: ``tc.explicit`` from the CLI, else those off the defaults."""
    if tc.explicit is not None:
        return set(tc.explicit)
    defaults = type(tc)()
    return {k for k in RUN_DEFINING if getattr(tc, k) != getattr(defaults, k)}


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    settings: object  # the TrainConfig to continue with
    recorded_steps: int
    extends: bool  # steps larger than recorded: an explicit extension of the run


def resume_settings(tc, manifest: dict, checkpoint_step: int | None) -> ResumePlan:
    """The settings a ``--resume`` continues with: the run's own, checked against explicit arguments.

    Raises ConfigError naming both values when an explicit argument contradicts the recorded one,
    and when ``steps`` would shorten the run (below the recorded steps or the newest checkpoint).
    """
    recorded = manifest.get("train")
    if not isinstance(recorded, dict):
        # A run written by something other than ``aah-viz train`` (a callback): nothing to take from it.
        return ResumePlan(tc, int(manifest.get("steps") or tc.steps), extends=False)
    explicit = explicit_fields(tc)
    settings = {k: recorded[k] for k in RUN_DEFINING if k in recorded}
    for key in sorted(explicit & settings.keys() - {"steps"}):
        mine, theirs = getattr(tc, key), settings[key]
        if mine != theirs:
            raise ConfigError(
                f"--resume: {_flag(key)} {mine} contradicts the run's recorded {theirs}; "
                f"leave it out to continue the run as it was recorded"
            )
    config = manifest.get("config") or {}
    for key, value in sorted((tc.overrides or {}).items()):
        if key in config and config[key] != _comparable(value, config[key]):
            raise ConfigError(
                f"--resume: --set {key}={value} contradicts the run's recorded {key}={config[key]}; "
                "leave it out to continue the run as it was recorded"
            )
    recorded_steps = int(settings.get("steps", tc.steps))
    steps = recorded_steps
    if "steps" in explicit and tc.steps != recorded_steps:
        if checkpoint_step is not None and tc.steps <= checkpoint_step:
            raise ConfigError(
                f"--resume: --steps {tc.steps} is not above the newest checkpoint (step {checkpoint_step}, "
                f"{checkpoint_step + 1} steps done) of a {recorded_steps}-step run; a run can be extended "
                f"(--steps above {recorded_steps}), never shortened"
            )
        if tc.steps < recorded_steps:
            raise ConfigError(
                f"--resume: --steps {tc.steps} contradicts the run's recorded {recorded_steps}; a run can be "
                f"extended (--steps above {recorded_steps}), never shortened"
            )
        steps = tc.steps
    settings["steps"] = steps
    merged = dataclasses.replace(tc, **settings, overrides={}, report=resumed_report(tc.report, recorded.get("report")))
    return ResumePlan(merged, recorded_steps, extends=steps > recorded_steps)


def resumed_report(given, recorded):
    """The reporting a resume continues with: the --report-to given now, else the run's recorded one
    (a bare --resume keeps sending where the run sent; its packages must still be there)."""
    if given is not None or not isinstance(recorded, dict) or not recorded.get("targets"):
        return given
    from aah_viz.reporting.options import check_installed
    from aah_viz.reporting.reporter import ReportSettings
    from aah_viz.reporting.sinks import parse_targets

    targets = parse_targets(",".join(str(t) for t in recorded["targets"] if isinstance(t, str)))
    check_installed(targets)
    numbers = {k: recorded.get(k) for k in ("every", "images")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers.values()):
        raise ConfigError(f"--resume: the run's recorded reporting {recorded!r} is damaged; give --report-to again")
    return ReportSettings(targets, numbers["every"], numbers["images"], bool(recorded.get("layers")))


def _comparable(value, recorded):
    """A --set value in the recorded value's JSON form (tuples are lists in the manifest)."""
    return list(value) if isinstance(value, tuple) and isinstance(recorded, list) else value


def _flag(key: str) -> str:
    flags = {"lr_warmup_steps": "--lr-warmup", "val_fraction": "val_fraction"}
    return flags.get(key, "--" + key.replace("_", "-"))


def check_same_data(data, recorded) -> None:
    """On ``--resume``, the training text must be the file the run started with (size and SHA-256 recorded in
    the manifest's ``data``); a relative ``--data`` that now resolves elsewhere, or an edited file, is refused."""
    from pathlib import Path

    from instrumentation.data import SYNTHETIC, file_identity

    if str(data) == SYNTHETIC or not isinstance(recorded, dict) or not recorded.get("sha256"):
        return  # the synthetic corpus is fixed by n_docs and data_seed; older runs recorded no hash
    then = {k: recorded.get(k) for k in ("path", "bytes", "sha256")}
    here = Path(data).resolve()
    now = file_identity(here) if here.is_file() else None
    if now is not None and (now["bytes"], now["sha256"]) == (then["bytes"], then["sha256"]):
        return
    started = f"{then['path']} ({then['bytes']} bytes, sha256 {str(then['sha256'])[:16]}...)"
    if now is None or str(here) != then["path"]:
        missing = ", which does not exist" if now is None else ", another file"
        raise ConfigError(
            f"--resume: the training data {str(data)!r} now resolves to {here}{missing}; the run started with "
            f"{started}: resume from the folder the run was started in, with that file in place"
        )
    raise ConfigError(
        f"--resume: the training data {here} changed since the run started (then {then['bytes']} bytes, sha256 "
        f"{str(then['sha256'])[:16]}...; now {now['bytes']} bytes, sha256 {now['sha256'][:16]}...): a resumed run "
        "must see the same text; restore the file, or start a new run"
    )
