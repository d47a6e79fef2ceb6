"""Comparisons: AAH groups against probe clusters, and windows against probe scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, v_measure_score

from aah_viz.cli import main
from aah_viz.probes.agreement import scores
from aah_viz.probes.compare import agreement_with_null, compare_run, probe_clusters, spearman_with_uncertainty
from aah_viz.probes.store import write_probe_tables
from aah_viz.runlog import RunWriter, load_run, make_manifest


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


def test_rankdata_equals_scipy():
    from scipy.stats import rankdata as scipy_rankdata

    from aah_viz.probes.compare import rankdata

    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, size=(6, 11)).astype(float)
    assert np.allclose(rankdata(x, axis=-1), scipy_rankdata(x, axis=-1))


def test_identical_partitions_beat_the_permutation_null():
    aah = np.array([[0, 0, 0, 1, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1, 0, 1]])
    result = agreement_with_null(aah, aah.copy(), permutations=300, seed=1)
    for value, chance, p in result.values():
        assert value == pytest.approx(1.0)
        assert chance < 0.6
        assert p < 0.02
    orthogonal = np.array([[0, 1, 0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 0, 0, 1, 1]])
    value, chance, p = agreement_with_null(aah, orthogonal, permutations=300, seed=1)["ari"]
    assert value < 0.1 and p > 0.2


def test_spearman_with_bootstrap_and_permutation():
    x = np.array([8, 8, 16, 16, 32, 32, 64, 64, 8, 16, 32, 64])
    y = x + np.arange(12) * 0.01  # monotone in x
    rho, chance, p, lo, hi, n = spearman_with_uncertainty(x, y, n_boot=500, permutations=500)
    assert rho == pytest.approx(spearmanr(x, y).statistic) and rho > 0.95 and p < 0.01 and n == 12
    assert lo <= rho <= hi and lo > 0.8 and abs(chance) < 0.1
    constant = spearman_with_uncertainty(np.full(12, 64), y)
    assert np.isnan(constant[0]) and constant[5] == 12


def _make_run(path, n_layer=2, n_head=6, step=40):
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
    rows = []
    rng = np.random.default_rng(0)
    for s in (step - 10, step):
        for layer in range(n_layer):
            for head in range(n_head):
                syntactic = head < n_head // 2
                rows.append(
                    {
                        "step": s,
                        "layer": layer,
                        "head": head,
                        "window_idx": 0 if syntactic else 3,
                        "window": 8 if syntactic else 64,
                        "raw_idx": 0,
                        "group_l0": 0 if syntactic else 1,
                        "group_l1": 0,
                    }
                )
    writer.append("heads", pd.DataFrame(rows))
    writer.close()
    probe = []
    for layer in range(n_layer):
        for head in range(n_head):
            syntactic = head < n_head // 2
            w = 8 if syntactic else 64
            for rel in ("det", "nsubj"):
                for d in ("dep2head", "head2dep"):
                    v = (0.8 if syntactic else 0.1) + rng.uniform(0, 0.05)
                    probe.append(
                        {
                            "step": step,
                            "layer": layer,
                            "head": head,
                            "probe": "syntax",
                            "metric": f"{rel}:{d}",
                            "value": v,
                            "window": w,
                        }
                    )
            probe.append(
                {
                    "step": step,
                    "layer": layer,
                    "head": head,
                    "probe": "syntax",
                    "metric": "score",
                    "value": (0.8 if syntactic else 0.1) + rng.uniform(0, 0.05),
                    "window": w,
                }
            )
            for metric, v in (
                ("accuracy", 0.2 if syntactic else 0.7),
                ("acc:1-3", 0.5),
                ("acc:64+", 0.0 if syntactic else 0.6),
            ):
                probe.append(
                    {
                        "step": step,
                        "layer": layer,
                        "head": head,
                        "probe": "coref",
                        "metric": metric,
                        "value": v + rng.uniform(0, 0.05),
                        "window": w,
                    }
                )
    write_probe_tables(path, {"probe_heads": pd.DataFrame(probe)}, step)
    return path


def test_compare_run_finds_planted_agreement_and_association(tmp_path):
    run = load_run(_make_run(tmp_path / "run"))
    table = compare_run(run, permutations=200, n_boot=300)
    agree = table[(table["kind"] == "partition_agreement") & (table["level"] == 0)].set_index(["target", "metric"])
    assert agree.loc[("kmeans:profile", "ari"), "value"] == pytest.approx(1.0)
    assert agree.loc[("agglomerative:profile", "nmi"), "value"] == pytest.approx(1.0)
    assert agree.loc[("kmeans:profile", "ari"), "p_value"] < 0.05
    assert "js_agglomerative" not in agree.index.get_level_values(0)  # no attention_js rows in this run
    assoc = table[table["kind"] == "window_association"].set_index("target")
    assert assoc.loc["spearman:syntax", "value"] < -0.8 and assoc.loc["spearman:syntax", "p_value"] < 0.01
    assert assoc.loc["spearman:coref", "value"] > 0.8
    assert (assoc["ci_low"] <= assoc["value"]).all() and (assoc["value"] <= assoc["ci_high"]).all()
    level1 = table[(table["kind"] == "partition_agreement") & (table["level"] == 1)]
    assert (level1[level1.metric == "ari"]["value"] == 0).all()  # one group against two clusters


def test_compare_cli_prints_writes_and_replaces(tmp_path, capsys):
    a = _make_run(tmp_path / "a")
    b = _make_run(tmp_path / "b")
    assert main(["compare", str(a), str(b), "--permutations", "50", "--bootstrap", "50"]) == 0
    out = capsys.readouterr().out
    assert "kmeans:profile" in out and " a " in out and " b " in out
    first = load_run(a).table("comparisons")
    assert len(first) > 0 and set(first["kind"]) == {"partition_agreement", "window_association"}
    assert main(["compare", str(a), "--permutations", "50", "--bootstrap", "50", "--level", "0", "--json"]) == 0
    again = load_run(a).table("comparisons")
    assert set(again["level"].dropna()) == {0}  # the step's earlier rows were replaced, not duplicated
    assert again.duplicated(subset=["kind", "level", "target", "metric"]).sum() == 0


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


def test_probe_clusters_use_js_when_present():
    n_layer, n_head = 1, 4
    rows = []
    js = np.array([[0, 0.1, 0.9, 0.9], [0.1, 0, 0.9, 0.9], [0.9, 0.9, 0, 0.1], [0.9, 0.9, 0.1, 0]])
    for i in range(4):
        for j in range(4):
            rows.append(
                {
                    "step": 0,
                    "layer": 0,
                    "head": i,
                    "probe": "attention_js",
                    "metric": f"js:0:{j}",
                    "value": js[i, j],
                    "window": 8,
                }
            )
    clusters = probe_clusters(pd.DataFrame(rows), n_layer, n_head, k=2)
    labels = clusters["js_agglomerative"]
    assert labels[0] == labels[1] != labels[2] == labels[3]
