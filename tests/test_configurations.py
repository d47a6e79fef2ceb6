"""Which runs may be averaged together (issue 42): model, sequence length and candidate windows, from
manifests; and the paired perplexity ratio of two configurations of a frontier on the same blocks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aah_viz.analysis.configurations import configuration_of, setup_groups, setup_names, split_by_configuration
from aah_viz.analysis.frontier import against_nearest_static, paired_ratio

BYTE = {"preset": "small", "seq_len": 128, "windows": [16, 32, 64, 128]}
SMOL = {"preset": "models/smollm2-135m", "seq_len": 512, "windows": [64, 128, 256, 512],
        "retrofit": {"model_dir": "models/smollm2-135m"}}  # fmt: skip


def test_runs_of_other_models_lengths_or_windows_never_share_a_group():
    manifests = {
        "a0": {**BYTE, "regime": "full_adaptive"},
        "a1": {**BYTE, "regime": "full_adaptive"},
        "base": {**BYTE, "regime": "full_attention", "windows": [1, 2]},  # its windows are not in effect
        "tiny": {**BYTE, "preset": "tiny", "regime": "full_adaptive"},
        "w": {**BYTE, "regime": "full_adaptive", "windows": [32, 128]},
        "s0": {**SMOL, "regime": "full_adaptive"},
        "s1": {**SMOL, "regime": "grouping_off"},
    }
    groups = dict((label, sorted(keys)) for label, keys in split_by_configuration(manifests))
    assert groups == {
        "preset small, T = 128, windows 16/32/64/128": ["a0", "a1", "base"],
        "preset small, T = 128, windows 32/128": ["base", "w"],  # the baseline joins each group of its T
        "preset tiny, T = 128, windows 16/32/64/128": ["tiny"],
        "smollm2-135m, T = 512, windows 64/128/256/512": ["s0", "s1"],
    }
    assert [len(k) for _, k in split_by_configuration(manifests)] == [3, 2, 2, 1]  # the largest first
    assert configuration_of({"regime": "frontier", "seq_len": 512, "config": {"model_dir": "m/smol"}})[0] == "smol"


def _sample_manifests(pattern: str) -> dict[str, dict]:
    import json
    from pathlib import Path

    found = sorted((Path(__file__).resolve().parents[1] / "sample_logs").glob(pattern + "/manifest.json"))
    if not found:
        pytest.skip("the bundled sample logs are not in this checkout")
    return {p.parent.name: json.loads(p.read_text()) for p in found}


def test_setups_of_one_regime_are_told_apart_by_the_settings_that_differ():
    # the sweep's cells, as its folder names spell them (grouping, scoring, feature EMA), against the names
    sweep = _sample_manifests("sweep_ablation_tiny/*")
    names = setup_names(sweep)
    cells = {k: k.rsplit("__seed-", 1)[0] for k in sweep}
    assert len(set(cells.values())) == 4 and len(sweep) == 12
    assert all((names[a] == names[b]) == (cells[a] == cells[b]) for a in sweep for b in sweep)
    assert all(n.startswith("full_adaptive, ") and "hierarchy_ablation_mode=" in n for n in names.values())
    # SmolLM2's adaptations: sinks and z-scored features are setups of their own, named by what differs
    smol = _sample_manifests("smollm2_wikitext/frontier-*")
    smol = {k: m for k, m in smol.items() if m.get("regime") != "frontier"}
    assert setup_names(smol) == {
        "frontier-fixed_random_grouping": "fixed_random_grouping",
        "frontier-fixed_random_grouping-sink4": "fixed_random_grouping, sink_tokens=4",
        "frontier-full_adaptive": "full_adaptive",
        "frontier-full_adaptive-sink4": "full_adaptive, sink_tokens=4",
        "frontier-grouping_off": "grouping_off",
        "frontier-grouping_off-sink4": "grouping_off, sink_tokens=4",
        "frontier-zscore-full_adaptive": "full_adaptive, feature_normalization=zscore",
    }
    # seeds of one setup share a name; the seed and where a run ran are no setting
    seeds = {"a0": {"regime": "r", "seed": 0, "config": {"seed": 0, "lr": 1}, "train": {"device": "cpu"}},
             "a1": {"regime": "r", "seed": 1, "config": {"seed": 1, "lr": 1}, "train": {"device": "cuda"}}}  # fmt: skip
    assert setup_names(seeds) == {"a0": "r", "a1": "r"}


def test_retired_keys_and_a_flag_a_run_lacks_but_ran_with_make_no_setup():
    from aah_viz.method import RETIRED_KEYS
    from aah_viz.regimes import REGIMES

    ran_with = REGIMES["grouping_off"].flag("build_hierarchy")  # what an older config lacking it ran with
    retired = {k: 0.5 for k in RETIRED_KEYS}
    manifests = {
        "old": {"regime": "grouping_off", "config": {"lr": 1, **retired}},  # before the flag, with retired keys
        "new": {"regime": "grouping_off", "config": {"lr": 1, "build_hierarchy": ran_with}},
        "other": {"regime": "grouping_off", "config": {"lr": 1, "build_hierarchy": not ran_with}},
    }
    names = setup_names(manifests)
    assert names["old"] == names["new"] == "grouping_off"
    assert names["other"] == f"grouping_off, build_hierarchy={not ran_with}"


def test_a_baseline_alone_is_its_own_group():
    assert split_by_configuration({"b": {**BYTE, "regime": "full_attention"}}) == [
        ("preset small, T = 128, full attention only", ["b"])
    ]


def test_the_paired_ratio_is_the_ratio_of_perplexities_and_its_interval_pairs_blocks():
    rng = np.random.default_rng(3)
    b = rng.uniform(1000, 2000, size=12)
    a = b + 50.0  # every block worse by the same amount: the paired interval has no width
    ratio, lo, hi = paired_ratio(a, b, 256)
    ppl = lambda x: math.exp(x.sum() / (x.size * 256))  # noqa: E731
    assert ratio == pytest.approx(ppl(a) / ppl(b))
    assert lo == pytest.approx(ratio) and hi == pytest.approx(ratio)
    c = b + rng.normal(0, 80, size=12)  # noisy differences: an interval around the ratio
    ratio, lo, hi = paired_ratio(c, b, 256)
    assert lo < ratio < hi
    with pytest.raises(ValueError):
        paired_ratio(a[:3], b, 256)


def test_each_routed_configuration_meets_the_static_window_of_nearest_acr():
    blocks = [[100.0, 110.0], [90.0, 95.0], [120.0, 130.0]]

    def row(name, family, acr, nll):
        return {"configuration": name, "family": family, "acr": acr, "block_nll": nll, "tokens_per_block": 8}

    details = [
        row("sliding_window_64", "sliding_window", 0.125, blocks[0]),
        row("sliding_window_128", "sliding_window", 0.25, blocks[1]),
        row("x_adapted", "adapted", 0.2, blocks[2]),
        row("y_zero_shot", "zero_shot", 0.1875, blocks[2]),
    ]
    rows = {r["configuration"]: r for r in against_nearest_static(details)}
    assert rows["x_adapted"]["static"] == "sliding_window_128"
    assert rows["y_zero_shot"]["static"] == "sliding_window_64"  # a tie: the lower ACR
    assert rows["x_adapted"]["ratio"] == pytest.approx(math.exp((250 - 185) / 16))


def test_an_aah_row_with_sinks_meets_the_static_window_with_as_many_sinks():
    def row(name, family, acr, nll, sinks=0):
        return {
            "configuration": name, "family": family, "acr": acr, "block_nll": nll, "tokens_per_block": 8,
            "sink_tokens": sinks,
        }  # fmt: skip

    details = [
        row("sliding_window_64", "sliding_window", 0.30, [100.0, 110.0]),
        row("sliding_window_64_sink4", "sliding_window", 0.36, [90.0, 95.0], 4),
        row("x_adapted_sink4", "adapted", 0.31, [92.0, 97.0], 4),
        row("x_adapted", "adapted", 0.35, [99.0, 101.0]),
    ]
    rows = {r["configuration"]: r for r in against_nearest_static(details)}
    assert rows["x_adapted_sink4"]["static"] == "sliding_window_64_sink4"  # not the nearer window without sinks
    assert rows["x_adapted"]["static"] == "sliding_window_64"


def test_sink_effects_and_the_frontier_text_say_what_the_table_says():
    import pandas as pd

    from aah_viz.analysis.frontier import sink_effects
    from aah_viz.dashboard.views.frontier import findings_markdown

    t = pd.DataFrame(
        {
            "configuration": ["unpatched", "full_attention", "sliding_window_64", "sliding_window_64_sink4",
                              "head_windows_p95", "head_windows_p95_sink4", "head_windows_p90_sink4", "x_adapted"],
            "family": ["unpatched", "patch", "sliding_window", "sliding_window", "head_windows", "head_windows",
                       "head_windows", "adapted"],
            "sink_tokens": [0, 0, 0, 4, 0, 4, 4, 0],
            "ppl": [30.0, 30.0, 111.0, 45.0, 30.5, 31.0, 33.0, 90.0],
            "acr": [1.0, 1.0, 0.125, 0.133, 0.96, 0.63, 0.5, 0.3],
            "pareto": [True, True, True, True, False, True, True, False],
            "retrieval": [1.0, 1.0, 0.0, 0.4, 1.0, 1.0, float("nan"), 0.0],
            "retrieval_n": [20, 20, 20, 20, 20, 20, 0, 20],
        }
    )  # fmt: skip
    effects = {e["configuration"]: e for e in sink_effects(t)}
    assert set(effects) == {"sliding_window_64", "head_windows_p95"}  # p90 has no row without sinks
    e = effects["sliding_window_64"]
    assert (e["ppl"], e["ppl_sinks"], e["acr_sinks"], e["sinks"]) == (111.0, 45.0, 0.133, 4)
    assert e["x_full"] == pytest.approx(111.0 / 30.0) and e["x_full_sinks"] == pytest.approx(45.0 / 30.0)
    text = findings_markdown(t, [], {}, None, None, [])
    assert f"111.00 (x{111 / 30:.2f}) at ACR 0.125 without, 45.00 (x{45 / 30:.2f}) at ACR 0.133 with 4" in text
    assert "Of 20 questions each" in text
    assert "4 of 7 configurations answer all" in text and "2 answer none" in text


def test_runs_trained_for_other_lengths_are_another_configuration():
    manifests = {
        "a": {**BYTE, "regime": "full_adaptive", "steps": 280},
        "b": {**BYTE, "regime": "full_adaptive", "steps": 280},
        "long": {**BYTE, "regime": "full_adaptive", "steps": 2500},
        "base": {**BYTE, "regime": "full_attention", "steps": 280},
    }
    groups = dict((label, sorted(keys)) for label, keys in split_by_configuration(manifests))
    assert groups == {
        "preset small, T = 128, windows 16/32/64/128, 280 steps": ["a", "b", "base"],
        "preset small, T = 128, windows 16/32/64/128, 2,500 steps": ["long"],
    }
    # a run's group names what tells its configuration from the others, and nothing they share
    assert setup_groups(manifests) == {
        "a": "full_adaptive [280 steps]",
        "b": "full_adaptive [280 steps]",
        "long": "full_adaptive [2,500 steps]",
        "base": "full_attention [280 steps]",
    }
    smol = {**SMOL, "regime": "full_adaptive", "steps": 280}
    assert setup_groups({"a": manifests["a"], "s": smol}) == {
        "a": "full_adaptive [preset small, T = 128, windows 16/32/64/128]",
        "s": "full_adaptive [smollm2-135m, T = 512, windows 64/128/256/512]",
    }
    assert setup_groups({"a": manifests["a"], "b": manifests["b"]}) == {"a": "full_adaptive", "b": "full_adaptive"}


def test_groups_of_runs_set_up_differently_have_short_names_the_full_ones_in_a_table():
    """The walk's Training chart (issue 42, M1): a SmolLM2 adaptation beside byte-level runs, a sweep's cells
    and a seed pair. Settings are told apart within a configuration (the adaptation's hyperparameters, which
    no byte-level run records, never name a byte-level group "train.lr=unrecorded"); the legend's names are
    the group's value alone where no other group shares it, else the value and a setup key."""
    from aah_viz.analysis.configurations import group_labels, group_rows

    byte = {**BYTE, "steps": 280, "train": {"lr": 3e-4}}
    manifests = {
        "fa0": {**byte, "regime": "full_adaptive", "config": {"ema_alpha": 0.9}},
        "fa1": {**byte, "regime": "full_adaptive", "config": {"ema_alpha": 0.9}},
        "ema0": {**byte, "regime": "full_adaptive", "config": {"ema_alpha": 0.0}},
        "sw": {**byte, "regime": "sliding_window", "config": {"ema_alpha": 0.9}},
        "smol": {**SMOL, "regime": "full_adaptive", "steps": 40,
                 "retrofit": {**SMOL["retrofit"], "lr": 1e-4, "batch_size": 4}},
    }  # fmt: skip
    groups = setup_groups(manifests, "regime")
    assert groups["fa0"] == groups["fa1"] != groups["ema0"]  # seeds of one setup, never another setup
    assert len(set(groups.values())) == 4
    assert not any("unrecorded" in name or "train." in name for name in groups.values())
    assert groups["ema0"].startswith("full_adaptive, ema_alpha=0.0 [preset small, T = 128")
    labels = group_labels(manifests, groups, "regime")
    # the legend's order is the full names' order; the three full_adaptive groups are keyed in it
    order = sorted(set(groups.values()))
    assert [labels[n] for n in order] == [
        "full_adaptive · S1",
        "full_adaptive · S2",
        "full_adaptive · S3",
        "sliding_window",
    ]
    assert all(len(label) <= 40 for label in labels.values())
    rows = group_rows(groups, labels)
    assert [r["group"] for r in rows] == [labels[n] for n in order]
    assert [r["runs"] for r in rows] == [sum(g == n for g in groups.values()) for n in order]
    assert {r["setup"] for r in rows} == set(groups.values())  # the full settings and configuration
    assert next(r for r in rows if r["runs"] == 2)["run names"] == "fa0, fa1"


def test_a_setting_an_older_manifest_lacks_is_named_only_where_it_alone_tells_setups_apart():
    new = {"regime": "r", "config": {"ema_alpha": 0.9, "data_seed": 1}}
    manifests = {
        "new0": new,
        "new1": new,
        "new2": new,  # most runs record data_seed: its value goes unsaid
        "old_ema0": {"regime": "r", "config": {"ema_alpha": 0.0}},  # written before data_seed was recorded
        "old": {"regime": "r", "config": {"ema_alpha": 0.9}},  # differs from "new" in that alone
    }
    names = setup_names(manifests)
    assert names["new0"] == names["new1"] == names["new2"] == "r"
    assert names["old_ema0"] == "r, ema_alpha=0.0"  # told apart by what it records: no "unrecorded" in its name
    assert names["old"] == "r, data_seed=unrecorded"  # nothing else tells it from "new": the lack is named
    assert len({names[k] for k in ("new0", "old_ema0", "old")}) == 3  # setups never share a name
