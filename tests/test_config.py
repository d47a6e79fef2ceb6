"""AAHConfig: presets, regimes as named overrides, round trips, and clear errors for bad configs."""

import pytest

from aah_viz.errors import ConfigError
from aah_viz.regimes import REGIMES, regimes_table
from instrumentation.config import CHOICES, PRESETS, AAHConfig


def test_tiny_preset_is_the_recommended_cpu_config():
    cfg = AAHConfig.from_preset("tiny")
    assert (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.n_ff) == (256, 64, 2, 12, 96, 384)
    assert cfg.windows == (8, 16, 32, 64) and cfg.w_min == 4 and cfg.warmup_steps == 3
    assert cfg.control_interval == 5 and cfg.max_depth == 4 and cfg.dropout == 0.0
    assert cfg.head_dim == 8 and cfg.preset == "tiny" and cfg.regime == "full_adaptive"


def test_paper_base_values_of_section_13():
    cfg = AAHConfig.from_preset("paper-1b")
    assert cfg.windows == (512, 1024, 2048, 4096) and cfg.block_size == 4096 and cfg.vocab_size == 50257
    assert (cfg.sim_threshold, cfg.super_threshold, cfg.ema_alpha, cfg.churn_penalty) == (0.72, 0.76, 0.9, 0.02)
    assert (cfg.min_group_size, cfg.warmup_steps, cfg.w_min, cfg.resolution_ema_alpha) == (3, 100, 64, 0.15)
    assert cfg.upper_cluster_metric == "cosine_normdiff" and cfg.controller_input_mode == "enriched"
    assert cfg.controller_pairwise_mode == "joint_sibling" and cfg.joint_hidden_dim == 64
    assert cfg.fixed_hierarchy_seed == 0 and cfg.dropout == 0.1 and cfg.attention_backend == "dense_masked"


@pytest.mark.parametrize("regime", list(REGIMES))
def test_every_regime_builds_and_records_its_name(regime):
    # head_windows has no default: every head's window is the user's (e.g. from a profile)
    given = {"static_head_windows": [[64] * 12] * 2} if regime == "head_windows" else {}
    cfg = AAHConfig.from_preset("tiny", regime=regime, **given)
    assert cfg.regime == regime
    for key, value in REGIMES[regime].overrides.items():
        assert getattr(cfg, key) == value


def test_regime_flags_match_the_paper_table():
    assert AAHConfig.from_preset("tiny", regime="shallow_freeze").max_depth == 1
    assert AAHConfig.from_preset("tiny", regime="shallow_freeze").hierarchy_ablation_mode == "freeze_learned_topology"
    assert AAHConfig.from_preset("tiny", regime="deep_practical_reuse").reuse_group_hierarchy is True
    off = AAHConfig.from_preset("tiny", regime="grouping_off")
    assert off.build_hierarchy is False and off.controller_pairwise_mode == "none"
    base = AAHConfig.from_preset("tiny", regime="full_attention")
    assert base.enabled is False and base.apply_window_control is False and base.build_hierarchy is False


def test_window_parameter_of_regimes():
    assert AAHConfig.from_preset("tiny", regime="fixed_window", fixed_window=32).fixed_window == 32
    assert AAHConfig.from_preset("tiny", regime="fixed_window", window=8).fixed_window == 8
    assert AAHConfig.from_preset("tiny", regime="fixed_window").fixed_window == 16  # second candidate by default
    assert AAHConfig.from_preset("tiny", regime="sliding_window", static_window=24).static_window == 24
    lg = AAHConfig.from_preset("tiny", regime="local_global_layers", window=8)
    assert lg.static_window == 8 and lg.global_every == 2
    with pytest.raises(ConfigError, match="fixed_window"):
        AAHConfig.from_preset("tiny", regime="fixed_window", fixed_window=12)
    with pytest.raises(ConfigError, match="takes no window parameter"):
        AAHConfig.from_preset("tiny", regime="full_adaptive", window=8)


def test_overrides_win_over_the_regime():
    cfg = AAHConfig.from_preset("tiny", regime="shallow_freeze", max_depth=4, control_interval=10)
    assert cfg.max_depth == 4 and cfg.control_interval == 10 and cfg.regime == "shallow_freeze"


def test_round_trip_through_dict():
    cfg = AAHConfig.from_preset("small", regime="fixed_window", fixed_window=32)
    d = cfg.to_dict()
    assert isinstance(d["windows"], list)
    assert AAHConfig.from_dict(d) == cfg


def test_reference_keys_and_legacy_aliases():
    cfg = AAHConfig.from_reference_dict(
        {
            "aah_v3_enabled": True,
            "aah_v3_windows": [8, 16, 32, 64],
            "aah_v3_W_min_gpu": 4,
            "aah_v3_grouping_enabled": False,
            "aah_v3_control_enabled": False,
            "block_size": 64,
            "aah_v3_flex_block_size": 128,
        }
    )
    assert cfg.build_hierarchy is False and cfg.apply_window_control is False and cfg.w_min == 4
    explicit = AAHConfig.from_reference_dict({"aah_v3_build_hierarchy": True, "aah_v3_grouping_enabled": False})
    assert explicit.build_hierarchy is True  # the canonical key wins over the alias


def test_windows_not_ascending():
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("tiny", windows=(16, 8, 32, 64))
    assert "windows" in str(err.value) and "ascending" in str(err.value)
    with pytest.raises(ConfigError, match="ascending"):
        AAHConfig.from_preset("tiny", windows=(8, 8, 64))


def test_window_above_sequence_length():
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("tiny", windows=(8, 16, 128))
    assert "windows" in str(err.value) and "block_size=64" in str(err.value)


def test_unknown_regime_and_preset_list_the_allowed_names():
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("tiny", regime="fully_adaptive")
    assert "fully_adaptive" in str(err.value)
    assert all(name in str(err.value) for name in REGIMES)
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("huge")
    assert all(name in str(err.value) for name in PRESETS)


def test_heads_must_divide_the_width():
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("tiny", n_head=7)
    msg = str(err.value)
    assert "n_head" in msg and "n_embd=96" in msg and "12" in msg


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_unknown_enum_values_name_key_and_allowed_values(key):
    with pytest.raises(ConfigError) as err:
        AAHConfig.from_preset("tiny", **{key: "no_such_value"})
    msg = str(err.value)
    assert key in msg and all(v in msg for v in CHOICES[key])


def test_seq_len_is_an_alias_of_block_size():
    assert AAHConfig.from_dict({"seq_len": 32, "windows": [8, 16, 32]}).block_size == 32
    with pytest.raises(ConfigError, match="disagree"):
        AAHConfig.from_dict({"seq_len": 32, "block_size": 64})


def test_unknown_key_is_an_error():
    with pytest.raises(ConfigError, match="unknown config key"):
        AAHConfig.from_dict({"n_heads": 12})


def test_static_window_is_plain_attention_only():
    with pytest.raises(ConfigError, match="static_window"):
        AAHConfig.from_preset("tiny", static_window=16)


def test_regimes_table_is_plain_data():
    import json

    rows = regimes_table()
    assert [r["name"] for r in rows] == list(REGIMES)
    json.dumps(rows)  # serialisable as is
    assert all(r["description"] for r in rows)


def test_regimes_cli_json(capsys):
    import json

    from aah_viz.cli import main

    assert main(["regimes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in data["regimes"]]
    assert names == list(REGIMES)
    by_name = {r["name"]: r for r in data["regimes"]}
    assert by_name["shallow_freeze"]["flags"] == {"max_depth": 1, "hierarchy_ablation_mode": "freeze_learned_topology"}
    assert by_name["fixed_window"]["parameter"] == "fixed_window"
    assert {p["name"] for p in data["presets"]} == set(PRESETS)


def test_self_merging_configurations_are_refused():
    with pytest.raises(ConfigError, match="upper_l2_threshold.*merge into itself"):
        AAHConfig.from_preset("tiny", upper_cluster_metric="l2", upper_l2_threshold=-1.0)
    with pytest.raises(ConfigError, match="super_threshold.*merge into itself"):
        AAHConfig.from_preset("tiny", super_threshold=-1.5)
    with pytest.raises(ConfigError, match="sim_threshold"):
        AAHConfig.from_preset("tiny", sim_threshold=-1.0)
    # no merge, or no upper level: nothing can merge into itself
    assert AAHConfig.from_preset("tiny", upper_cluster_metric="l2", upper_l2_threshold=-2.0, min_group_size=1)
    assert AAHConfig.from_preset("tiny", upper_cluster_metric="l2", upper_l2_threshold=-2.0, max_depth=1)
    assert AAHConfig.from_preset("tiny", upper_cluster_metric="l2", upper_l2_threshold=-0.5)
    assert AAHConfig.from_preset("tiny").churn_clamp == "all"  # the reference's clamp by default


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"nonsense": 1}, "nonsense"),
        ({"sim_threshold": float("nan")}, "sim_threshold"),
        ({"churn_penalty": float("inf")}, "churn_penalty"),
        ({"ema_alpha": 2.0}, "ema_alpha"),
        ({"n_layer": "two"}, "n_layer"),
        ({"n_layer": 2.5}, "n_layer"),
        ({"bias": "yes"}, "bias"),
        ({"windows": 8}, "windows"),
        ({"windows": ["8"]}, "windows"),
    ],
)
def test_every_key_is_checked_for_name_type_and_range(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        AAHConfig(**kwargs)


def test_retired_keys_are_gone_and_old_configs_still_load():
    old = AAHConfig.from_preset("tiny").to_dict()
    assert not set(old) & {"diagnostic_detail", "mask_cache_size", "resolution_collapse_min_frac"}
    old.update(diagnostic_detail="full", mask_cache_size=16, resolution_collapse_min_frac=0.9)
    old["resolution_collapse_max_frac"] = 0.9
    assert AAHConfig.from_dict(old) == AAHConfig.from_preset("tiny")
