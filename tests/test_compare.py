"""Comparisons: AAH groups against probe clusters within layers, and windows against probe scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, v_measure_score

from aah_viz.cli import main
from aah_viz.probes.agreement import scores
from aah_viz.probes.compare import compare_run
from aah_viz.probes.head_profiles import cluster_heads, layer_profile, wide_probe_heads
from aah_viz.probes.partition_agreement import COMPARISON_COLUMNS
from aah_viz.probes.store import write_probe_tables
from aah_viz.runlog import RunWriter, load_run, make_manifest
from aah_viz.stats.ranks import spearman_rows, stratified_spearman


def test_batched_scores_equal_scikit_learn():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(2, 16))
        a = rng.integers(0, int(rng.integers(1, n + 1)), size=(3, n))
        b = rng.integers(0, int(rng.integers(1, n + 1)), size=n)
        if trial % 5 == 0:
            a[0] = 0  # one group
        if trial % 3 == 0:
            a[1] = np.arange(n)  # all singletons
        if trial % 4 == 0:
            b = np.zeros(n, dtype=int)
        got = scores(a, b)
        for i in range(3):
            assert got["ari"][i] == pytest.approx(adjusted_rand_score(a[i], b), abs=1e-9)
            assert got["nmi"][i] == pytest.approx(normalized_mutual_info_score(a[i], b), abs=1e-9)
            assert got["v_measure"][i] == pytest.approx(v_measure_score(a[i], b), abs=1e-9)


def test_spearman_row_by_row_equals_scipy_with_ties_and_nan_for_a_constant_row():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, size=(6, 11)).astype(float)
    y = rng.integers(0, 3, size=(6, 11)).astype(float)
    x[5] = 2.0  # constant: no rank correlation
    got = spearman_rows(x, y)
    assert got[:5] == pytest.approx([spearmanr(a, b).statistic for a, b in zip(x[:5], y[:5])], abs=1e-12)
    assert np.isnan(got[5])


def test_stratified_spearman_is_the_mean_of_within_layer_rhos_not_the_pooled_one():
    rng = np.random.default_rng(1)
    windows, scores_ = [], []
    for layer in range(3):  # within a layer: longer window, higher score; across layers the opposite
        w = np.tile([8.0, 16, 32, 64], 3)
        windows.append(w * (4**layer))
        scores_.append(0.9 - 0.4 * layer + 0.001 * w + rng.normal(0, 0.002, w.size))
    pooled_naive = spearmanr(np.concatenate(windows), np.concatenate(scores_)).statistic
    assert pooled_naive < 0  # the layer confound
    got = stratified_spearman(windows, scores_, n_boot=300, permutations=300)
    expected = np.mean([spearmanr(w, s).statistic for w, s in zip(windows, scores_)])
    assert got["rho"] == pytest.approx(expected) and got["rho"] > 0.8
    assert got["p_value"] < 0.01 and abs(got["null_mean"]) < 0.1
    assert got["ci_low"] <= got["rho"] <= got["ci_high"] and got["ci_low"] > 0.5
    assert got["n_layers"] == 3 and got["n_heads"] == 36 and not got["degenerate"]
    one = stratified_spearman([windows[0]], [scores_[0]], n_boot=50, permutations=50)
    assert one["rho"] == pytest.approx(spearmanr(windows[0], scores_[0]).statistic)


def test_layers_whose_heads_share_one_window_say_nothing():
    flat = stratified_spearman([np.full(12, 64.0)], [np.arange(12.0)])
    assert flat["degenerate"] and flat["reason"] == "all heads one window" and np.isnan(flat["rho"])
    mixed = stratified_spearman([np.full(12, 64.0), np.tile([8.0, 64], 6)], [np.arange(12.0), np.arange(12.0)])
    assert not mixed["degenerate"] and mixed["n_layers"] == 1 and mixed["n_heads"] == 12


def _probe_rows(step, layer, head, window, kind, rng, layer_shift=0.0):
    """Syntax-like heads (kind 0) and coreference-like heads (kind 1), with a per-layer offset."""
    rows = []

    def add(probe, metric, value):
        rows.append(
            {
                "step": step,
                "layer": layer,
                "head": head,
                "probe": probe,
                "metric": metric,
                "value": value,
                "window": window,
            }
        )

    for rel in ("det", "nsubj"):
        for d in ("dep2head", "head2dep"):
            add("syntax", f"{rel}:{d}", (0.8 if kind == 0 else 0.1) + layer_shift + rng.uniform(0, 0.05))
    add("syntax", "score", (0.8 if kind == 0 else 0.1) + rng.uniform(0, 0.05))
    add("coref", "accuracy", (0.2 if kind == 0 else 0.7) + rng.uniform(0, 0.05))
    add("coref", "acc:1-3", 0.5 + rng.uniform(0, 0.05))
    add("coref", "acc:64+", 0.0 if window < 64 else 0.6)  # beyond a head's window: zero by construction
    add("distance", "mass:1", (0.7 if kind == 0 else 0.1) + rng.uniform(0, 0.05))
    add("distance", "mass:16-31", (0.05 if kind == 0 else 0.5) + rng.uniform(0, 0.05))
    return rows


def _make_run(path, n_layer=2, n_head=12, step=40, windows_follow_groups_in_layer=None, level1_copies=False):
    """Two AAH groups per layer at level 0 (syntax-like heads, coreference-like heads), one at level 1;
    windows independent of the groups, except in ``windows_follow_groups_in_layer``."""
    manifest = make_manifest(
        run_id=path.name,
        regime="full_adaptive",
        seed=0,
        config={},
        windows=[8, 16, 32, 64],
        seq_len=64,
        n_layer=n_layer,
        n_head=n_head,
        max_depth=2,
    )
    writer = RunWriter.create(path, manifest)
    rows, probe = [], []
    rng = np.random.default_rng(0)
    for layer in range(n_layer):
        for head in range(n_head):
            kind = int(head >= n_head // 2)
            window = (8, 64)[kind] if layer == windows_follow_groups_in_layer else (8, 64)[head % 2]
            for s in (step - 10, step):
                rows.append(
                    {
                        "step": s,
                        "layer": layer,
                        "head": head,
                        "window_idx": 0,
                        "window": window,
                        "raw_idx": 0,
                        "group_l0": kind,
                        "group_l1": kind + 7 if level1_copies else 0,
                    }
                )
            probe += _probe_rows(step, layer, head, window, kind, rng, layer_shift=0.5 * layer)
    writer.append("heads", pd.DataFrame(rows))
    writer.close()
    write_probe_tables(path, {"probe_heads": pd.DataFrame(probe)}, step)
    return path


def test_groups_that_match_the_probe_profiles_beat_the_layer_stratified_null(tmp_path):
    tables = compare_run(load_run(_make_run(tmp_path / "run")), permutations=300, n_boot=200)
    comp = tables["comparisons"]
    assert list(comp.columns) == COMPARISON_COLUMNS
    level0 = comp[comp["level"] == 0]
    per_layer = level0[level0["layer"].notna()]
    assert set(per_layer["layer"]) == {0, 1} and set(per_layer["target"]) == {"kmeans:profile", "agglomerative:profile"}
    assert np.allclose(per_layer["ari"].astype(float), 1.0) and not per_layer["degenerate"].any()
    assert (per_layer["n_groups"] == 2).all() and (per_layer["n_probe_clusters"] == 2).all()
    assert (per_layer["p_value"] < 0.02).all() and (per_layer["null_p95"] < 0.5).all()
    pooled = level0[level0["layer"].isna()].set_index("target")
    assert pooled.loc["kmeans:profile", "ari"] == pytest.approx(1.0) and pooled.loc["kmeans:profile", "n_layers"] == 2
    assert pooled.loc["kmeans:profile", "p_value"] < 0.01 and abs(pooled.loc["kmeans:profile", "null_mean"]) < 0.1
    # the windows alternate within every layer, independent of the groups: they do not explain the clusters
    assert (per_layer["window_ari"] < 0.2).all()


def test_degenerate_rows_say_why(tmp_path):
    comp = compare_run(load_run(_make_run(tmp_path / "run", windows_follow_groups_in_layer=1)), permutations=50)[
        "comparisons"
    ]
    level1 = comp[comp["level"] == 1]
    assert level1["degenerate"].all()
    assert all("one AAH group" in r for r in level1.loc[level1["layer"].notna(), "reason"])
    assert set(level1.loc[level1["layer"].isna(), "reason"]) == {"every layer degenerate"}
    layer1 = comp[(comp["level"] == 0) & (comp["layer"] == 1)]
    assert layer1["degenerate"].all() and all("groups identical to window classes" in r for r in layer1["reason"])
    pooled = comp[(comp["level"] == 0) & comp["layer"].isna()]
    assert (pooled["n_layers"] == 1).all() and not pooled["degenerate"].any()  # layer 0 only


def test_profiles_are_built_within_a_layer_and_skip_buckets_beyond_a_window():
    rows = []
    for layer in range(2):  # identical heads within a layer; layers differ a lot
        for head in range(4):
            rows += _probe_rows(0, layer, head, 8 if head < 2 else 64, 0, np.random.default_rng(layer), 0.5 * layer)
    ph = pd.DataFrame(rows)
    wide = wide_probe_heads(ph, 2, 4)
    windows = np.array([8, 8, 64, 64])
    profile = layer_profile(wide, 0, 4, windows)
    assert profile.shape == (4, 0)  # nothing varies within the layer: the across-layer split is not a profile
    assert cluster_heads(profile, None, 2) == {}
    # heads that differ only in a bucket beyond the short windows: that bucket is not part of the profile
    ph.loc[(ph["metric"] == "acc:1-3") & (ph["head"] == 0) & (ph["layer"] == 0), "value"] = 0.9
    profile = layer_profile(wide_probe_heads(ph, 2, 4), 0, 4, windows)
    assert profile.shape == (4, 1)  # acc:1-3 only; acc:64+ (zero for the window-8 heads) left out
    assert layer_profile(wide_probe_heads(ph, 2, 4), 0, 4, np.full(4, 128)).shape == (4, 2)


def test_window_association_is_stratified_by_layer(tmp_path):
    assoc = compare_run(load_run(_make_run(tmp_path / "run")), permutations=50, n_boot=100)["window_association"]
    pooled = assoc[assoc["layer"].isna()].set_index("target")
    assert set(pooled.index) == {"spearman:syntax", "spearman:coref"}
    per_layer = assoc[assoc["layer"].notna()]
    expected = np.mean(per_layer[per_layer["target"] == "spearman:syntax"]["rho"])
    assert pooled.loc["spearman:syntax", "rho"] == pytest.approx(expected)
    assert (assoc["ci_low"] <= assoc["rho"] + 1e-12).all() and (assoc["rho"] <= assoc["ci_high"] + 1e-12).all()


def test_compare_cli_prints_writes_and_replaces(tmp_path, capsys):
    a = _make_run(tmp_path / "a")
    b = _make_run(tmp_path / "b")
    assert main(["compare", str(a), str(b), "--permutations", "50", "--bootstrap", "50"]) == 0
    out = capsys.readouterr().out
    assert "kmeans:profile" in out and " a " in out and " b " in out and "spearman:syntax" in out
    first = load_run(a).table("comparisons")
    assert len(first) > 0 and set(first["level"]) == {0, 1}
    assert len(load_run(a).table("window_association")) > 0
    assert main(["compare", str(a), "--permutations", "50", "--bootstrap", "50", "--level", "0", "--json"]) == 0
    printed = capsys.readouterr().out
    assert '"comparisons"' in printed and '"window_association"' in printed
    again = load_run(a).table("comparisons")
    assert set(again["level"].dropna()) == {0}  # the step's earlier rows were replaced, not duplicated
    assert again.duplicated(subset=["level", "layer", "target"]).sum() == 0


def test_compare_without_probes_is_one_error(tmp_path, capsys):
    manifest = make_manifest(
        run_id="x",
        regime="full_adaptive",
        seed=0,
        config={},
        windows=[8, 16],
        seq_len=16,
        n_layer=1,
        n_head=2,
        max_depth=1,
    )
    RunWriter.create(tmp_path / "x", manifest).close()
    assert main(["compare", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "aah-viz probe" in err[0]


def test_cluster_heads_uses_js_when_present():
    js = np.array([[0, 0.1, 0.9, 0.9], [0.1, 0, 0.9, 0.9], [0.9, 0.9, 0, 0.1], [0.9, 0.9, 0.1, 0]])
    labels = cluster_heads(np.zeros((4, 0)), js, k=2)["js_agglomerative"]
    assert labels[0] == labels[1] != labels[2] == labels[3]


def test_rows_carry_the_verdict_of_the_partition_they_compare(tmp_path):
    path = _make_run(tmp_path / "run")
    writer = RunWriter.resume(path)
    writer.append(  # layer 0: real at the newest update before the probe; layer 1: chance then real later
        "cluster_validity",
        pd.DataFrame(
            {
                "step": [30, 30, 40, 40, 50],
                "layer": [0, 1, 0, 1, 1],
                "origin": ["natural"] * 5,
                "shadow": [False] * 5,
                "verdict": ["chance", "real", "real", "chance", "real"],
            }
        ),
    )
    writer.close()
    comp = compare_run(load_run(path), permutations=20, n_boot=20)["comparisons"]
    level0 = comp[comp["level"] == 0]
    by_layer = level0[level0["layer"].notna()].groupby("layer")["partition_verdict"].agg(set).to_dict()
    assert by_layer == {0: {"real"}, 1: {"chance"}}  # step 40's verdicts; step 50 comes after the probe
    assert set(level0.loc[level0["layer"].isna(), "partition_verdict"]) == {"undefined"}  # layers disagree
    assert set(comp.loc[comp["level"] == 1, "partition_verdict"]) == {"undefined"}  # validity is level 0 only
    # without validity rows every verdict is undefined
    plain = compare_run(load_run(_make_run(tmp_path / "plain")), permutations=20, n_boot=20)["comparisons"]
    assert set(plain["partition_verdict"]) == {"undefined"}


def test_a_level_that_repeats_the_one_below_is_compared_once(tmp_path):
    from aah_viz.probes.compare import same_partitions

    assert same_partitions(np.array([[0, 0, 1], [2, 1, 1]]), np.array([[5, 5, 3], [0, 4, 4]]))
    assert not same_partitions(np.array([[0, 0, 1]]), np.array([[0, 1, 1]]))
    assert not same_partitions(np.array([[0, 0, 1]]), np.array([[0, 0, 0]]))
    path = _make_run(tmp_path / "run", level1_copies=True)  # level 1: level 0's groups under other ids
    comp = compare_run(load_run(path), permutations=20, n_boot=20)["comparisons"]
    assert set(comp["level"]) == {0}
    assert set(compare_run(load_run(path), level=1, permutations=20, n_boot=20)["comparisons"]["level"]) == {1}


def test_long_setup_names_stand_on_the_axis_as_short_marks_with_the_name_on_hover():
    from aah_viz.figures.compare import regime_metric_figure, setup_ticks

    short = ["full_adaptive", "grouping_off"]
    assert setup_ticks(short) == short
    long = ["full_adaptive, controller_pairwise_mode=none", "full_adaptive, ema_alpha=0.0"]
    assert setup_ticks(long) == ["S1", "S2"]
    assert setup_ticks([long[0], "grouping_off", long[1]]) == ["S1", "grouping_off", "S2"]
    runs = pd.DataFrame(
        {"regime": long * 2, "seed": [0, 0, 1, 1], "val_loss": [2.0, 2.1, 2.2, 2.3], "key": list("abcd")}
    )
    fig = regime_metric_figure(runs, ["val_loss"]).to_dict()
    assert list(fig["layout"]["xaxis"]["tickvals"]) == sorted(long)
    assert list(fig["layout"]["xaxis"]["ticktext"]) == ["S1", "S2"]
    assert list(fig["data"][0]["x"]) == sorted(long)  # the whole name is the category: the hover shows it
