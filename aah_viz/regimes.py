"""The regimes as the light side knows them: one row per regime, read by figures, tables and the dashboard.

The model side's ``instrumentation.config.REGIMES`` defines what a regime does (its config flags);
this table holds what the light side says about one without torch: its colour, its place and name
in the paper's tables, its factor levels, whether it has a window controller at all, and the other
names the reference uses for it. ``tests/test_regimes_table.py`` checks it against the model side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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


@dataclass(frozen=True)
class Regime:
    """What the light side knows of one regime (its config flags are the model side's)."""

    name: str
    color: str  # the same on every page and in every export
    # the method's name in the paper's Tables 1 and 2 and its row there (None: not in them)
    display: str = ""
    paper_rank: int | None = None
    # (grouping, hierarchy, joint scorer) in the words of the paper's Table 1
    described: tuple[str, str, str] | None = None
    # factor levels; "other" names flags outside the five factors, so a regime is only ever compared
    # with one equal in everything else. None: outside the factorial design.
    factors: Mapping[str, object] | None = None
    controller: bool = True  # False: plain or static-window attention, no AAH state at all
    aliases: tuple[str, ...] = field(default=())  # other names of it (the reference's, older runs')

    @property
    def title(self) -> str:
        return self.display or self.name


def _factors(grouping, refresh, freeze, joint, control, other: str = "") -> Mapping[str, object]:
    levels = dict(zip(FACTORS, (grouping, refresh, freeze, joint, control)))
    return MappingProxyType({**levels, "other": other})


_ADAPTIVE = ("adaptive learned", "adaptive", "wide joint")

# In the model side's order: the paper's regimes first, then the ablations and the new baselines.
_ROWS = (
    Regime(
        "full_attention",
        "#444444",
        display="Pure baseline",
        paper_rank=0,
        described=("off", "none", "off"),
        factors=_factors(None, None, None, None, 0),
        controller=False,
        aliases=("pure_baseline", "full_attn"),
    ),
    Regime(
        "grouping_off",
        "#8c564b",
        display="grouping_off",
        paper_rank=1,
        described=("off", "none", "off"),
        factors=_factors(0, None, None, 0, 1),
    ),
    Regime(
        "full_adaptive",
        "#1f77b4",
        display="Full adaptive",
        paper_rank=2,
        described=_ADAPTIVE,
        factors=_factors(1, 1, 0, 1, 1),
    ),
    Regime(
        "shallow_freeze",
        "#2ca02c",
        display="Shallow freeze",
        paper_rank=3,
        described=("learned frozen", "frozen", "wide joint"),
        factors=_factors(1, 0, 1, 1, 1),
    ),
    Regime(
        "deep_practical_reuse",
        "#d62728",
        display="Deep practical reuse",
        paper_rank=4,
        described=("cached level-0", "reuse", "wide joint"),
        factors=_factors(1, 1, 1, 1, 1),
    ),
    Regime(
        "control_off",
        "#9467bd",
        described=("adaptive learned", "adaptive (not executed)", "wide joint"),
        factors=_factors(1, 1, 0, 1, 0),
    ),
    Regime("fixed_window", "#ff7f0e"),
    Regime(
        "fixed_random_grouping",
        "#17becf",
        factors=_factors(1, 0, 1, 1, 1, other="random_partition"),
        aliases=("fixed_random",),
    ),
    Regime("freeze_after_warmup", "#bcbd22", factors=_factors(1, 0, 1, 1, 1, other="passthrough")),
    Regime("shuffle_post_select", "#e377c2"),
    Regime("random_uniform", "#7f7f7f"),
    Regime(
        "independent_scoring",
        "#393b79",
        described=("adaptive learned", "adaptive", "independent"),
        factors=_factors(1, 1, 0, 0, 1),
    ),
    Regime("no_feature_ema", "#637939", factors=_factors(1, 1, 0, 1, 1, other="no_feature_ema")),
    Regime("no_parent_constraint", "#ad494a", factors=_factors(1, 1, 0, 1, 1, other="no_parent_constraint")),
    Regime("sliding_window", "#8c6d31", controller=False),
    Regime("local_global_layers", "#7b4173", controller=False),
    Regime("head_windows", "#98df8a", controller=False),
)
REGIMES: Mapping[str, Regime] = MappingProxyType({r.name: r for r in _ROWS})
PAPER_ORDER = tuple(r.name for r in sorted((r for r in _ROWS if r.paper_rank is not None), key=lambda r: r.paper_rank))
_BY_ALIAS = {alias: r for r in _ROWS for alias in r.aliases}


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
