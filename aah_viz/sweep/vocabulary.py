"""What a sweep design may set: the ``aah-viz train`` arguments and the values each takes, the keys the
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
