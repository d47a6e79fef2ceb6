"""The command line of one trial: ``aah-viz train`` on a preset, ``aah-viz retrofit MODEL`` or
``aah-viz frontier MODEL`` on a model folder, from the cell's settings (the command's own arguments as
flags, every other setting an AAH config key as ``--set KEY=VALUE``), and the line that continues it."""

from __future__ import annotations

import json

from aah_viz.sweep.design import Cell, Design
from aah_viz.sweep.vocabulary import COMMAND_FLAGS, MODEL


def _flag_value(value) -> str:
    """A list (``windows = [64, 128]``) as the command takes it: comma-separated."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def cell_arguments(design: Design, cell: Cell) -> tuple[list[str], list[str], dict[str, object]]:
    """(positional arguments, flags, model config overrides) of a cell's command."""
    flags_of = COMMAND_FLAGS[design.command]
    positional, flags, overrides = [], [], {}
    for key, value in design.settings(cell).items():
        if key == MODEL and design.command != "train":
            positional.append(str(value))
        elif key in flags_of:
            flags += [flags_of[key], _flag_value(value)]
        else:
            overrides[key] = value
    return positional, flags, overrides


def trial_argv(design: Design, cell: Cell, seed: int, out: str) -> list[str]:
    """The arguments of ``aah-viz`` that start one trial (after the program name)."""
    positional, flags, overrides = cell_arguments(design, cell)
    argv = [design.command, *positional, *flags, "--seed", str(seed), "--out", out]
    for key, value in overrides.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    return argv


def resume_argv(design: Design, cell: Cell, seed: int, out: str) -> list[str]:
    """The arguments that continue a trial that did not finish: ``train --out RUN --resume`` (the run
    records its settings); retrofit needs its model and text again, with ``--resume``; a frontier continues
    when run again with the same settings."""
    if design.command == "train":
        return ["train", "--out", out, "--resume"]
    argv = trial_argv(design, cell, seed, out)
    return argv + ["--resume"] if design.command == "retrofit" else argv
