"""The regimes: one table (``aah_viz/data/regimes.toml``), one row per regime, read without torch.

A regime is a named set of model config overrides (``instrumentation.config.AAHConfig.from_preset``
applies them). Each row also holds what the light side shows of it: its colour, its place and name in
the paper's tables, and the other names the reference uses for it. What follows from the overrides is
computed here, never typed: the factor levels of the factorial view and whether a controller exists.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TABLE_PATH = Path(__file__).parent / "data" / "regimes.toml"

# The five factors of the factorial view (method section 13). A regime has each at 1 (on), 0 (off) or
# None (does not apply: without grouping there is no hierarchy to refresh or freeze).
FACTOR_LABELS = {
    "grouping": "grouping (heads clustered into groups)",
    "hierarchy_refresh": "hierarchy refresh (upper levels rebuilt at each routing update)",
    "freeze": "freeze (level-0 partition fixed after it is first built)",
    "joint_scoring": "joint sibling scoring",
    "window_control": "window control (decisions executed)",
}
FACTORS = tuple(FACTOR_LABELS)

# The model side's window_ablation_mode values other than "adaptive": each overrides the windows the
# controller chose; with the first two the controller has no choice at all.
WINDOW_OVERRIDES = ("fixed_window", "random_uniform", "shuffle_post_select")
NO_CHOICE_MODES = ("fixed_window", "random_uniform")

# The model config's defaults of the keys the factors read (tests/test_regimes_table.py checks them
# against AAHConfig): a regime that does not override a key runs with this value.
BASE_FLAGS: Mapping[str, object] = MappingProxyType(
    {
        "enabled": True,
        "build_hierarchy": True,
        "apply_window_control": True,
        "controller_pairwise_mode": "joint_sibling",
        "hierarchy_ablation_mode": "adaptive",
        "reuse_group_hierarchy": False,
        "window_ablation_mode": "adaptive",
        "ema_alpha": 0.9,
        "parent_constraint": True,
    }
)

# Flags outside the five factors, named so a regime is only compared with one equal in everything else.
_OTHER_HIERARCHY = {"fixed_random": "random_partition", "freeze_after_warmup": "passthrough"}


@dataclass(frozen=True)
class Regime:
    """One row of the regimes table."""

    name: str
    description: str
    source: str  # paper, appendix, lab or new baseline
    color: str  # the same on every page and in every export
    overrides: Mapping[str, object]  # the config keys it sets, its base regime's first
    parameter: str | None = None  # the config key it takes as its size parameter
    # the method's name in the paper's Tables 1 and 2 and its row there (None: not in them)
    display: str = ""
    paper_rank: int | None = None
    # (grouping, hierarchy, joint scorer) in the words of the paper's Table 1
    described: tuple[str, str, str] | None = None
    aliases: tuple[str, ...] = field(default=())  # other names of it (the reference's, older runs')

    @property
    def title(self) -> str:
        return self.display or self.name

    def flag(self, key: str) -> object:
        """The value the regime runs ``key`` with (of the keys the factors read)."""
        return self.overrides.get(key, BASE_FLAGS[key])

    @property
    def controller(self) -> bool:
        """False: plain or static-window attention, no AAH state at all."""
        return bool(self.flag("enabled"))

    @property
    def factors(self) -> Mapping[str, object] | None:
        """Its factor levels and ``other``; None outside the factorial design (a baseline from outside
        the reference, windows given from outside, or windows overridden after the controller chose)."""
        overridden = self.flag("window_ablation_mode") != "adaptive"
        if self.source == "new baseline" or self.parameter is not None or overridden:
            return None
        routed = self.controller
        grouping = int(self.flag("build_hierarchy")) if routed else None
        mode = self.flag("hierarchy_ablation_mode")
        other = _OTHER_HIERARCHY.get(mode, "")
        if self.flag("ema_alpha") == 0:
            other = "no_feature_ema"
        if not self.flag("parent_constraint"):
            other = "no_parent_constraint"
        levels = (
            grouping,
            int(mode == "adaptive") if grouping else None,
            int(mode != "adaptive" or bool(self.flag("reuse_group_hierarchy"))) if grouping else None,
            int(self.flag("controller_pairwise_mode") != "none") if routed else None,
            int(routed and bool(self.flag("apply_window_control"))),
        )
        return MappingProxyType({**dict(zip(FACTORS, levels)), "other": other})


def _read_table(path: Path) -> tuple[Regime, ...]:
    rows: dict[str, Regime] = {}
    for name, row in tomllib.loads(path.read_text(encoding="utf-8")).items():
        row = dict(row)
        base = rows[row.pop("builds_on")].overrides if "builds_on" in row else {}
        row["overrides"] = MappingProxyType({**base, **row["overrides"]})
        for key in ("described", "aliases"):
            if key in row:
                row[key] = tuple(row[key])
        rows[name] = Regime(name=name, **row)
    return tuple(rows.values())


_ROWS = _read_table(TABLE_PATH)
REGIMES: Mapping[str, Regime] = MappingProxyType({r.name: r for r in _ROWS})
PAPER_ORDER = tuple(r.name for r in sorted((r for r in _ROWS if r.paper_rank is not None), key=lambda r: r.paper_rank))
_BY_ALIAS = {alias: r for r in _ROWS for alias in r.aliases}


def regimes_table() -> list[dict[str, Any]]:
    """The table as plain rows (what ``aah-viz regimes --json`` prints)."""
    return [
        {
            "name": r.name,
            "description": r.description,
            "source": r.source,
            "flags": {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.overrides.items()},
            "parameter": r.parameter,
        }
        for r in _ROWS
    ]


def slug(text) -> str:
    """Lower-case letters and digits joined by single underscores (how a regime name is spelled)."""
    return re.sub(r"[^a-z0-9]+", "_", str(text).strip().lower()).strip("_")


def regime_named(name) -> Regime | None:
    """The regime called ``name`` in any spelling (case, spaces, dashes) or by another of its names."""
    key = slug(name)
    return REGIMES.get(key) or _BY_ALIAS.get(key)


def paper_rank(name) -> tuple[int, str]:
    """Sort key: the paper's row order first, every other regime after them, alphabetically."""
    name = str(name)
    row = REGIMES.get(name)
    if row is not None and row.paper_rank is not None:
        return (row.paper_rank, name)
    return (len(PAPER_ORDER), name)


def did_you_mean(name, known=None) -> str:
    """`` (did you mean 'full_adaptive'?)`` for a misspelt regime name: the closest of ``known`` (default every
    regime), by its slug; an empty string when none is close."""
    import difflib

    names = [str(k) for k in (REGIMES if known is None else known)]
    close = difflib.get_close_matches(slug(name), [slug(n) for n in names], n=1, cutoff=0.75)
    if not close:
        return ""
    return f" (did you mean {next(n for n in names if slug(n) == close[0])!r}?)"
