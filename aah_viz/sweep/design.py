"""A factorial design file (TOML): parsed, checked and expanded into cells, before anything runs.

```toml
command = "train"          # what every cell runs (aah-viz train on a preset)
seeds = [0, 1, 2]
fraction = ["feature_ema = grouping * scoring"]   # optional: a 2^(k-p) fraction by its generators

[fixed]                    # every cell: train arguments (preset, steps, ...) and model config keys
preset = "small"
steps = 280
warmup_steps = 20

[factors]
grouping = ["feature", "off"]          # a named factor with some of its named levels
feature_ema = ["on", "off"]
lr = { key = "lr", levels = [1e-4, 3e-4] }       # one setting, its values as levels

[factors.scorer]                       # levels as tables of settings
joint = { controller_pairwise_mode = "joint_sibling" }
independent = { controller_pairwise_mode = "none" }
```

A setting is either an argument of the cells' command (``vocabulary.COMMAND_FLAGS``: ``aah-viz train``, or
``aah-viz retrofit`` / ``aah-viz frontier`` on the folder ``model``) or a model config key (passed
as ``--set KEY=VALUE``; the CLI checks those against the model's config before anything runs). A cell is
refused when two of its levels set one key to different values, when a level sets a key ``[fixed]``
sets, or when a level needs a setting another level contradicts (no sibling scoring without grouping):
every refusal names the factor. Pure Python: no torch, no file other than the design is read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aah_viz.errors import ConfigError
from aah_viz.runlog.bounded_json import read_regular
from aah_viz.sweep.vocabulary import COMMAND_FLAGS, NAMED_FACTORS, OTHER_VALUES, REQUIRED, RESERVED, TRAIN_VALUES, Level

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class DesignError(ConfigError):
    """A design file that cannot run: names the factor, level or key at fault."""


COMMANDS = tuple(COMMAND_FLAGS)  # train on a preset; retrofit and frontier on a model folder
VALUES = {**TRAIN_VALUES, **OTHER_VALUES}  # what each command argument takes (one name, one meaning)
TOP_KEYS = ("name", "command", "seeds", "fraction", "fixed", "factors")
_NAME_RE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")
_GENERATOR_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*(-?)\s*([A-Za-z0-9_]+(?:\s*\*\s*[A-Za-z0-9_]+)+)\s*$")


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[str, ...]  # in the design's order; the first is the reference level
    settings: Mapping[str, Level]

    def level(self, name: str) -> Level:
        return self.settings[name]


@dataclass(frozen=True)
class Cell:
    """One combination of levels, in the design's factor order."""

    levels: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return "__".join(f"{factor}-{level}" for factor, level in self.levels)

    def as_dict(self) -> dict[str, str]:
        return dict(self.levels)

    def label(self) -> str:
        return ", ".join(f"{factor}={level}" for factor, level in self.levels)


@dataclass(frozen=True)
class Design:
    name: str
    command: str
    seeds: tuple[int, ...]
    fixed: Mapping[str, object]
    factors: tuple[Factor, ...]
    generators: tuple[str, ...]
    cells: tuple[Cell, ...]

    @property
    def factor_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors)

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)

    def settings(self, cell: Cell) -> dict[str, object]:
        """The cell's settings: the fixed ones, then each factor's level (checked not to collide)."""
        out = dict(self.fixed)
        for factor, level in cell.levels:
            out.update(self.factor(factor).level(level).settings)
        return out

    def trials(self) -> list[tuple[Cell, int]]:
        return [(cell, seed) for cell in self.cells for seed in self.seeds]

    def canonical(self) -> dict:
        """What defines the design's trials, as plain JSON (a changed design is a changed fingerprint)."""
        return {
            "command": self.command,
            "seeds": list(self.seeds),
            "fixed": dict(self.fixed),
            "factors": {f.name: {lv: dict(f.level(lv).settings) for lv in f.levels} for f in self.factors},
            "fraction": list(self.generators),
            "cells": [c.name for c in self.cells],
        }

    def fingerprint(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_name(cell: Cell, seed: int) -> str:
    """The run directory of one trial under the logs root: its cell, then its seed."""
    return f"{cell.name}__seed-{seed}"


def parse_run_name(name: str) -> tuple[dict[str, str], int] | None:
    """The levels and seed a run directory's name says, or None for a name no design gives."""
    parts = name.split("__")
    if len(parts) < 2 or not parts[-1].startswith("seed-") or not parts[-1][5:].isdigit():
        return None
    levels = {}
    for part in parts[:-1]:
        factor, sep, level = part.partition("-")
        if not sep or not _NAME_RE.match(factor) or not _NAME_RE.match(level):
            return None
        levels[factor] = level
    return levels, int(parts[-1][5:])


def load_design(path) -> Design:
    path = Path(path)
    try:
        text = read_regular(path).decode("utf-8")  # a FIFO given as the design: refused, not waited on
    except FileNotFoundError:
        raise DesignError(f"design file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DesignError(f"design file {path} cannot be read: {err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DesignError(f"design file {path} is not valid TOML: {err}") from None
    try:
        return parse_design(data, default_name=path.stem)
    except DesignError as err:
        raise DesignError(f"design {path.name}: {err}") from None


def parse_design(data: Mapping, *, default_name: str = "sweep") -> Design:
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise DesignError(f"unknown key(s) {', '.join(map(repr, unknown))}; a design has {', '.join(TOP_KEYS)}")
    command = data.get("command", "train")
    if command not in COMMANDS:
        raise DesignError(f"command {command!r} is not one a sweep runs; allowed: {', '.join(COMMANDS)}")
    seeds = _seeds(data.get("seeds", [0]))
    fixed = _settings(data.get("fixed", {}), "[fixed]")
    raw_factors = data.get("factors")
    if not isinstance(raw_factors, Mapping) or not raw_factors:
        raise DesignError("[factors] is missing or empty; name at least one factor with two or more levels")
    factors = tuple(_factor(name, spec) for name, spec in raw_factors.items())
    for f in factors:
        for level in f.levels:
            clash = sorted(set(f.level(level).settings) & set(fixed))
            if clash:
                raise DesignError(
                    f"factor {f.name!r} level {level!r} sets {', '.join(clash)}, which [fixed] sets too; "
                    "a setting is either fixed or varied"
                )
    generators = _generators(data.get("fraction", []), factors)
    design = Design(str(data.get("name", default_name)), command, seeds, fixed, factors, generators, ())
    cells = _expand(factors, generators)
    for cell in cells:
        check_cell(design, cell)
    return Design(design.name, command, seeds, fixed, factors, generators, tuple(cells))


def check_cell(design: Design, cell: Cell) -> None:
    """Refuse a cell whose levels contradict each other (naming both factors) or contradict [fixed]."""
    owner: dict[str, tuple[object, str]] = {k: (v, "[fixed]") for k, v in design.fixed.items()}
    for factor, level in cell.levels:
        for key, value in design.factor(factor).level(level).settings.items():
            if key in owner and owner[key][0] != value:
                other = owner[key][1]
                raise DesignError(
                    f"factor {factor!r} level {level!r} sets {key}={value!r} but {other} sets {key}="
                    f"{owner[key][0]!r} in cell {cell.label()}; drop one of the levels or the factor"
                )
            owner[key] = (value, f"factor {factor!r} level {level!r}")
    missing = [key for key in REQUIRED[design.command] if key not in owner]
    if missing:
        what = {"model": "model (the model folder)", "data": "data (the text file)"}
        raise DesignError(
            f"command {design.command!r} needs {' and '.join(what.get(k, k) for k in missing)} in [fixed] or in "
            f"every level of a factor; cell {cell.label()} has none"
        )
    for factor, level in cell.levels:
        for key, (value, provider) in design.factor(factor).level(level).needs.items():
            if key in owner and owner[key][0] != value:
                raise DesignError(
                    f"factor {factor!r} level {level!r} needs {provider} on, but {owner[key][1]} turns it off "
                    f"(cell {cell.label()}); drop that level of {provider!r} or the factor {factor!r}"
                )


def _seeds(raw) -> tuple[int, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = list(range(raw))  # seeds = 3 means 0, 1, 2
    if not isinstance(raw, list) or not raw or any(isinstance(s, bool) or not isinstance(s, int) for s in raw):
        raise DesignError(f"seeds must be a list of integers >= 0 or a count, got {raw!r}")
    if any(s < 0 for s in raw) or len(set(raw)) != len(raw):
        raise DesignError(f"seeds must be distinct integers >= 0, got {raw!r}")
    return tuple(raw)


def _settings(raw, where: str) -> dict[str, object]:
    if not isinstance(raw, Mapping):
        raise DesignError(f"{where} must be a table of settings, got {raw!r}")
    out = {}
    for key, value in raw.items():
        if key in RESERVED:
            raise DesignError(f"{where} sets {key!r}: {RESERVED[key]}")
        if not re.match(r"^[a-z_][a-z0-9_]*$", key):
            raise DesignError(f"{where}: {key!r} is not a setting name (a train argument or a model config key)")
        if not _plain(value):
            raise DesignError(f"{where}: {key} must be a number, text, true/false or a list of them, got {value!r}")
        if key in VALUES:
            _check_value(key, value, where)
        out[key] = value
    return out


def _check_value(key: str, value, where: str) -> None:
    kind, limit = VALUES[key]
    if kind == "list":  # windows = [64, 128] or "64,128"
        ok = isinstance(value, (str, list)) and bool(value) and not any(isinstance(v, bool) for v in value)
        wanted = "a list of numbers or names, or them comma-separated"
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= limit
        wanted = f"an integer >= {limit}"
    elif kind in ("number", "share"):  # a share lies strictly between 0 and 1
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > 0 if limit is None else value >= limit) and (kind == "number" or value < 1)
        bound = "above 0" if limit is None else f">= {limit}"
        wanted = "a number between 0 and 1" if kind == "share" else f"a finite number {bound}"
    else:
        ok = isinstance(value, str) and (limit is None or value in limit)
        wanted = "text" if limit is None else "one of " + ", ".join(limit)
    if not ok:
        raise DesignError(f"{where}: {key} must be {wanted}, got {value!r}")


def _plain(value) -> bool:
    if isinstance(value, list):
        return all(_plain(v) and not isinstance(v, list) for v in value)
    return isinstance(value, (bool, int, float, str))


def _factor(name: str, spec) -> Factor:
    if not _NAME_RE.match(name):
        raise DesignError(f"factor {name!r}: a factor name is lower-case letters, digits and single underscores")
    if isinstance(spec, list):  # named levels of a named factor
        if name not in NAMED_FACTORS:
            raise DesignError(
                f"factor {name!r} is not a named factor ({', '.join(NAMED_FACTORS)}); give its levels as "
                f"[factors.{name}] tables of settings or as {{ key = ..., levels = [...] }}"
            )
        known = NAMED_FACTORS[name]
        for level in spec:
            if level not in known:
                raise DesignError(f"factor {name!r} has no level {level!r}; its levels are {', '.join(known)}")
        levels = {level: known[level] for level in spec}
    elif isinstance(spec, Mapping) and "levels" in spec:  # one setting, its values as levels
        extra = sorted(set(spec) - {"key", "levels"})
        if extra or not isinstance(spec.get("key"), str):
            raise DesignError(f'factor {name!r}: write {{ key = "setting", levels = [v1, v2, ...] }}')
        values = spec["levels"]
        if not isinstance(values, list):
            raise DesignError(f"factor {name!r}: levels must be a list of values, got {values!r}")
        levels = {}
        for value in values:
            level = _value_name(value)
            if level in levels:
                raise DesignError(f"factor {name!r}: two levels are both named {level!r}")
            levels[level] = Level(_settings({spec["key"]: value}, f"factor {name!r}"))
    elif isinstance(spec, Mapping):
        levels = {}
        for level, settings in spec.items():
            if not _NAME_RE.match(str(level)):
                raise DesignError(f"factor {name!r}: level {level!r} must be lower-case letters, digits, underscores")
            levels[level] = Level(_settings(settings, f"factor {name!r} level {level!r}"))
    else:
        raise DesignError(f"factor {name!r} must be a list of named levels or a table of levels, got {spec!r}")
    if len(levels) < 2 or len(set(levels)) != len(levels):
        raise DesignError(f"factor {name!r} needs at least two distinct levels, got {list(levels)}")
    return Factor(name, tuple(levels), levels)


def _value_name(value) -> str:
    text = str(value).lower().replace("-", "m").replace("+", "")
    slug = re.sub(r"[^a-z0-9]+", "_", text).strip("_")
    return slug or "empty"


def _generators(raw, factors: tuple[Factor, ...]) -> tuple[str, ...]:
    """Each generator ``D = A * B * C`` (or ``D = -A * B``) defines D's level from the others' (2 levels each)."""
    if isinstance(raw, str):
        raw = [raw]
    if raw in ("full", None):
        return ()
    if not isinstance(raw, list):
        raise DesignError(f'fraction must be a list of generators such as "D = A * B", got {raw!r}')
    by_name = {f.name: f for f in factors}
    generated: set[str] = set()
    out = []
    for text in raw:
        m = _GENERATOR_RE.match(str(text))
        if not m:
            raise DesignError(f'fraction: {text!r} is not a generator such as "feature_ema = grouping * scoring"')
        target, sources = m.group(1), [s.strip() for s in m.group(3).split("*")]
        for name in [target, *sources]:
            if name not in by_name:
                raise DesignError(f"fraction {text!r}: {name!r} is not a factor of this design")
            if len(by_name[name].levels) != 2:
                raise DesignError(
                    f"fraction {text!r}: factor {name!r} has {len(by_name[name].levels)} levels; "
                    "a fraction needs two-level factors"
                )
        if target in generated or target in sources or len(set(sources)) != len(sources):
            raise DesignError(f"fraction {text!r}: factor {target!r} is generated twice or from itself")
        generated.add(target)
        out.append(f"{target} = {m.group(2)}{' * '.join(sources)}")
    if any(s in generated for g in out for s in g.split("=")[1].replace("-", "").replace("*", " ").split()):
        raise DesignError("fraction: a generator uses a generated factor; generate from base factors only")
    return tuple(out)


def _expand(factors: tuple[Factor, ...], generators: tuple[str, ...]) -> list[Cell]:
    """The full factorial of the base factors; each generated factor's level is the product of the
    sources' codes (first level -1, second +1), negated for ``= -A * B``."""
    rules = {}
    for g in generators:
        target, rhs = (s.strip() for s in g.split("="))
        sign = -1 if rhs.startswith("-") else 1
        rules[target] = (sign, [s.strip() for s in rhs.lstrip("-").split("*")])
    base = [f for f in factors if f.name not in rules]
    cells = []
    for combo in itertools.product(*(f.levels for f in base)):
        chosen = dict(zip((f.name for f in base), combo))
        for target, (sign, sources) in rules.items():
            code = sign
            for s in sources:
                code *= -1 if chosen[s] == _factor_of(factors, s).levels[0] else 1
            chosen[target] = _factor_of(factors, target).levels[0 if code < 0 else 1]
        cells.append(Cell(tuple((f.name, chosen[f.name]) for f in factors)))
    return cells


def _factor_of(factors, name: str) -> Factor:
    return next(f for f in factors if f.name == name)
