"""What a sweep design may set: the arguments of the command its cells run (``aah-viz train`` on a preset,
``aah-viz retrofit`` or ``aah-viz frontier`` on a model folder) and the values each takes, the keys the
sweep sets itself, and the named factors with their levels (method section 13's switches). Pure data;
``design`` checks a design against it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Arguments of ``aah-viz train`` a design may set (its setting name -> the flag). Everything else is a
# model config key. ``tests/test_sweep_design.py`` checks these against the train command's parser.
TRAIN_FLAGS = {
    "preset": "--preset",
    "regime": "--regime",
    "steps": "--steps",
    "data": "--data",
    "n_docs": "--n-docs",
    "data_seed": "--data-seed",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "weight_decay": "--weight-decay",
    "lr_warmup": "--lr-warmup",
    "eval_interval": "--eval-interval",
    "eval_batches": "--eval-batches",
    "checkpoint_interval": "--checkpoint-interval",
    "keep_checkpoints": "--keep-checkpoints",
    "detail": "--detail",
    "flush_every": "--flush-every",
    "backend": "--backend",
    "window": "--window",
    "device": "--device",
}
# What each train argument takes: ("int", lowest), ("number", None: above 0, or 0: at least 0), ("text", choices).
TRAIN_VALUES = {
    "preset": ("text", ("tiny", "small", "paper-1b")),
    "regime": ("text", None),
    "steps": ("int", 1),
    "data": ("text", None),
    "n_docs": ("int", 1),
    "data_seed": ("int", 0),
    "batch_size": ("int", 1),
    "lr": ("number", None),
    "weight_decay": ("number", 0),
    "lr_warmup": ("int", 0),
    "eval_interval": ("int", 1),
    "eval_batches": ("int", 1),
    "checkpoint_interval": ("int", 0),
    "keep_checkpoints": ("int", 0),
    "detail": ("text", ("full", "light", "minimal")),
    "flush_every": ("int", 1),
    "backend": ("text", None),
    "window": ("int", 1),
    "device": ("text", None),
}
# ``aah-viz retrofit MODEL`` and ``aah-viz frontier MODEL``: their arguments a design may set (the rest are
# AAH config keys, passed as --set like train's). ``tests/test_sweep_commands.py`` checks them against the parsers.
RETROFIT_FLAGS = {
    key: "--" + key.replace("_", "-")
    for key in ("data", "steps", "train", "batch_size", "seq_len", "lr", "weight_decay", "grad_clip", "eval_interval",
                "eval_batches", "checkpoint_interval", "keep_checkpoints", "detail", "flush_every", "regime",
                "windows", "window", "backend", "device")
}  # fmt: skip
FRONTIER_FLAGS = {
    key: "--" + key.replace("_", "-")
    for key in ("data", "seq_len", "windows", "adapt_steps", "regimes", "eval_blocks", "eval_share",
                "profile_blocks", "timing_pairs", "adapt_lr", "sink_tokens", "retrieval", "device")
}  # fmt: skip
MODEL = "model"  # the model folder retrofit and frontier run on (their positional argument)
COMMAND_FLAGS = {"train": TRAIN_FLAGS, "retrofit": RETROFIT_FLAGS, "frontier": FRONTIER_FLAGS}
# what a cell of each command must set, in [fixed] or in every level of a factor
REQUIRED = {"train": (), "retrofit": (MODEL, "data"), "frontier": (MODEL, "data")}
# the other commands' arguments and what they take ("list": numbers or names, given comma-joined)
OTHER_VALUES = {
    MODEL: ("text", None),
    "train": ("text", ("aah", "aah+head", "all")),
    "seq_len": ("int", 1),
    "grad_clip": ("number", 0),
    "windows": ("list", None),
    "adapt_steps": ("int", 0),
    "regimes": ("list", None),
    "eval_blocks": ("int", 1),
    "eval_share": ("share", None),  # above 0, below 1
    "profile_blocks": ("int", 1),
    "timing_pairs": ("int", 2),  # a paired ratio needs two pairs
    "adapt_lr": ("number", None),
    "sink_tokens": ("list", None),
    "retrieval": ("int", 0),
}


# config fields a command sets through its own flag only: as --set elsewhere they would name another model
# (preset) or one regime where the frontier takes its list (regimes)
SELECTORS = ("preset", "regime")


def command_misfit(command: str, key: str, config_keys) -> str | None:
    """Why ``key`` is no setting of ``command``, or None when it fits: one of the command's arguments, the
    model folder of a retrofit or frontier cell, or an AAH config key (``config_keys``: passed as --set)."""
    if key in COMMAND_FLAGS[command] or (key == MODEL and command != "train"):
        return None
    if key == MODEL:
        return "train builds its model from a preset; a model folder is for retrofit and frontier"
    others = [c for c, flags in COMMAND_FLAGS.items() if c != command and key in flags]
    if others and (key not in config_keys or key in SELECTORS):
        return f"an argument of aah-viz {' and '.join(others)} that aah-viz {command} does not take"
    if key in config_keys:
        return None
    return f"neither an aah-viz {command} argument nor a model config key"


# Set by the sweep itself, per trial: never by a design.
RESERVED = {
    "seed": "seeds are the design's top-level `seeds`",
    "out": "each trial's run directory is named by its cell under --logs",
    "resume": "the sweep resumes interrupted trials itself",
    "overwrite": "the sweep never replaces a run",
    "threads": "threads are the executor's (--threads)",
}


@dataclass(frozen=True)
class Level:
    settings: Mapping[str, object]
    # settings the rest of the cell must not contradict: key -> (value, the factor that provides it)
    needs: Mapping[str, tuple[object, str]] = field(default_factory=dict)


def _needs_grouping() -> dict:
    return {"build_hierarchy": (True, "grouping")}


# The factors a design may name with named levels (method section 13's switches).
NAMED_FACTORS: dict[str, dict[str, Level]] = {
    "grouping": {
        "feature": Level({"build_hierarchy": True}),
        "random": Level({"build_hierarchy": True, "hierarchy_ablation_mode": "fixed_random"}),
        "off": Level({"build_hierarchy": False, "controller_pairwise_mode": "none"}),
    },
    "scoring": {
        "joint": Level({"controller_pairwise_mode": "joint_sibling"}, _needs_grouping()),
        "independent": Level({"controller_pairwise_mode": "none"}, _needs_grouping()),
    },
    "feature_ema": {
        "on": Level({"ema_alpha": 0.9}, _needs_grouping()),
        "off": Level({"ema_alpha": 0.0}, _needs_grouping()),
    },
    "hierarchy": {
        "adaptive": Level({"hierarchy_ablation_mode": "adaptive"}, _needs_grouping()),
        "frozen": Level({"hierarchy_ablation_mode": "freeze_learned_topology"}, _needs_grouping()),
    },
}
