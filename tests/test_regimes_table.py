"""The regimes table (aah_viz.regimes) against the model config it overrides and the published tables.

Each fact the table computes about a regime is derived here again, independently, from the config the
model side builds with the regime's overrides, or read from the reference's bundled Table 1.
"""

import csv
from pathlib import Path

import pytest

from aah_viz import regimes
from aah_viz.dashboard.pickers import ADAPTIVE_FIRST
from aah_viz.export.stats import regime_factors
from aah_viz.figures import style
from aah_viz.importers.reference_csv import regime_of
from aah_viz.regimes import REGIMES
from instrumentation.config import CHOICES, AAHConfig

PAPER = Path(regimes.__file__).parent / "data" / "reference" / "paper"


def flags(name: str) -> dict:
    """The config a regime runs with: the model's defaults under the regime's overrides."""
    return {**AAHConfig().to_dict(), **REGIMES[name].overrides}


def factors_from_flags(name: str) -> dict | None:
    """The factor levels the regime's flags imply (method section 13), or None outside the factorial design."""
    f = flags(name)
    spec = REGIMES[name]
    if spec.source == "new baseline" or spec.parameter is not None or f["window_ablation_mode"] != "adaptive":
        return None  # a baseline from outside the reference, windows set from outside or overridden: no factor

    routed = f["enabled"]
    grouping = int(f["build_hierarchy"]) if routed else None
    mode = f["hierarchy_ablation_mode"]
    other = {"fixed_random": "random_partition", "freeze_after_warmup": "passthrough"}.get(mode, "")
    if f["ema_alpha"] == 0:
        other = "no_feature_ema"
    if not f["parent_constraint"]:
        other = "no_parent_constraint"
    return {
        "other": other,
        "grouping": grouping,
        "hierarchy_refresh": int(mode == "adaptive") if grouping else None,
        "freeze": int(mode != "adaptive" or f["reuse_group_hierarchy"]) if grouping else None,
        "joint_scoring": int(f["controller_pairwise_mode"] != "none") if routed else None,
        "window_control": int(routed and f["apply_window_control"]),
    }


def test_the_base_flags_the_table_reads_are_the_model_configs_defaults():
    defaults = AAHConfig().to_dict()
    assert dict(regimes.BASE_FLAGS) == {key: defaults[key] for key in regimes.BASE_FLAGS}


@pytest.mark.parametrize("name", list(REGIMES))
def test_a_regime_overrides_only_config_keys_and_the_config_it_builds_keeps_them(name):
    given = {"static_head_windows": [[64] * 12] * 2} if name == "head_windows" else {}
    cfg = AAHConfig.from_preset("tiny", regime=name, **given).to_dict()
    assert set(REGIMES[name].overrides) <= set(cfg)
    assert {k: cfg[k] for k in REGIMES[name].overrides} == dict(REGIMES[name].overrides)


def test_a_regime_built_on_another_carries_its_overrides_first():
    shallow = dict(REGIMES["shallow_freeze"].overrides)
    for name in ("fixed_window", "shuffle_post_select", "random_uniform"):
        own = dict(REGIMES[name].overrides)
        assert list(own)[: len(shallow)] == list(shallow) and own["window_ablation_mode"] == name


@pytest.mark.parametrize("name", list(REGIMES))
def test_a_regime_has_a_controller_exactly_when_its_flags_keep_the_aah_state(name):
    assert regimes.REGIMES[name].controller == flags(name)["enabled"]


@pytest.mark.parametrize("name", list(REGIMES))
def test_factor_levels_are_those_the_flags_imply(name):
    assert regime_factors(name) == factors_from_flags(name)


def test_window_overrides_are_the_model_sides_ablation_modes():
    assert set(regimes.WINDOW_OVERRIDES) == set(CHOICES["window_ablation_mode"]) - {"adaptive"}
    assert set(regimes.NO_CHOICE_MODES) < set(regimes.WINDOW_OVERRIDES)
    assert "shuffle_post_select" not in regimes.NO_CHOICE_MODES  # it permutes the chosen windows


def test_every_regime_the_dashboard_opens_first_has_a_controller():
    assert all(regimes.REGIMES[name].controller for name in ADAPTIVE_FIRST)


def _published_rows() -> list[dict]:
    with open(PAPER / "aah_v3_4096_table1_training.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_paper_regimes_are_the_published_rows_in_their_order_and_words():
    rows = _published_rows()
    assert [regime_of(r["method"]) for r in rows] == list(regimes.PAPER_ORDER)
    for rank, row in enumerate(rows):
        ours = regimes.REGIMES[regime_of(row["method"])]
        assert (ours.paper_rank, ours.title) == (rank, row["method"])
        assert (ours.described[0], ours.described[2]) == (row["grouping"], row["joint_scorer"])
        assert regimes.paper_rank(ours.name) == (rank, ours.name)
    assert regimes.paper_rank("control_off") == (len(rows), "control_off")  # others follow, by name


def test_another_spelling_or_an_alias_finds_the_regime_and_an_unknown_name_nothing():
    assert regimes.regime_named("Pure baseline").name == "full_attention"
    assert regimes.regime_named("full-attn").name == "full_attention"
    assert regimes.regime_named(" Deep practical REUSE ").name == "deep_practical_reuse"
    assert regimes.regime_named("fixed_random").name == "fixed_random_grouping"
    assert regimes.regime_named("my_new_regime") is None
    names = set(regimes.REGIMES)
    aliases = [a for r in regimes.REGIMES.values() for a in r.aliases]
    assert not names & set(aliases) and len(aliases) == len(set(aliases))


def test_each_regime_has_its_own_colour_and_an_unknown_one_a_stable_colour_of_the_palette():
    colours = [style.regime_color(name) for name in REGIMES]
    assert len(set(colours)) == len(colours)
    assert all(len(c) == 7 and c.startswith("#") and int(c[1:], 16) >= 0 for c in colours)
    assert style.regime_color("my_new_regime") == style.regime_color("my_new_regime")
    assert style.regime_color("my_new_regime") in colours


def test_a_misspelt_regime_is_answered_with_the_closest_name():
    from aah_viz.errors import ConfigError
    from aah_viz.regimes import did_you_mean

    assert did_you_mean("full_adaptve") == " (did you mean 'full_adaptive'?)"
    assert did_you_mean("Full-Atention") == " (did you mean 'full_attention'?)"
    assert did_you_mean("nope") == ""
    assert did_you_mean("shallow_frieze", ["shallow_freeze", "full_attention"]) == " (did you mean 'shallow_freeze'?)"
    # the config every command builds a model from (train, retrofit, sweep cells) says it
    from instrumentation.config import AAHConfig

    with pytest.raises(ConfigError, match=r"unknown regime 'shalow_freeze' \(did you mean 'shallow_freeze'\?\)"):
        AAHConfig.from_preset("tiny", "shalow_freeze")
