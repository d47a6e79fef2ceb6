"""Cluster validity of head partitions: known answers, and the pieces checked against scikit-learn/scipy."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform
from sklearn.metrics import adjusted_rand_score, silhouette_score

from aah_viz.analysis import cluster_validity as cv


def _distance(x: np.ndarray) -> np.ndarray:
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    d = np.clip(1.0 - unit @ unit.T, 0.0, None)
    np.fill_diagonal(d, 0.0)
    return d


def _planted(rng, sizes, spread=0.05, offset=0.5, dim=9):
    """Groups of heads around a common direction, each group pushed along its own axis."""
    rows = [1.0 + spread * rng.standard_normal((size, dim)) + offset * np.eye(dim)[g] for g, size in enumerate(sizes)]
    return np.concatenate(rows), np.repeat(np.arange(len(sizes)), sizes)


def test_batched_silhouette_equals_scikit_learn():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 9))
    d = _distance(x)
    labelings = [rng.integers(0, k, 12) for k in (2, 3, 5) for _ in range(4)]
    labelings.append(np.array([0] * 11 + [1]))  # a singleton group scores 0
    for labels in labelings:
        dense = cv.dense_labels(labels)
        if not 2 <= dense.max() + 1 <= 11:
            continue
        expected = silhouette_score(d, dense, metric="precomputed")
        assert cv.silhouettes(d, dense[None])[0] == pytest.approx(expected, abs=1e-12)


def test_batched_complete_linkage_matches_scipy():
    rng = np.random.default_rng(1)
    mats = np.stack([_distance(rng.standard_normal((10, 9))) for _ in range(6)])
    for k in (2, 3, 4):
        ours = cv.complete_linkage_labels(mats, k)
        for d, labels in zip(mats, ours):
            theirs = fcluster(linkage(squareform(d, checks=False), method="complete"), k, criterion="maxclust")
            assert adjusted_rand_score(theirs, labels) == pytest.approx(1.0)


def test_similarity_spread_is_over_distinct_pairs():
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    sim = cv.cosine_similarity(x)
    assert cv.similarity_spread(sim) == pytest.approx((0.0, 0.0, 1.0))


def test_planted_clusters_are_called_real():
    rng = np.random.default_rng(2)
    for sizes in ([8, 8], [4, 4, 4, 4], [6, 10]):
        x, labels = _planted(rng, sizes)
        v = cv.assess_partition(x, labels, threshold=0.72, origin="natural", seed=3)
        assert v.verdict == cv.REAL, v
        assert v.silhouette > max(v.null_p95, v.refit_p95)
        assert v.null_p_value < 0.05 and v.refit_p_value < 0.05


def test_a_random_partition_of_planted_clusters_is_not_real():
    rng = np.random.default_rng(4)
    x, labels = _planted(rng, [8, 8])
    v = cv.assess_partition(x, rng.permutation(labels), threshold=0.72, seed=5)
    assert v.verdict == cv.CHANCE


def test_identical_heads_are_a_forced_split_that_is_not_real():
    torch = pytest.importorskip("torch")
    from instrumentation.routing.clustering import cluster, labels_from_groups

    x = np.tile(np.linspace(0.5, 1.5, 9), (8, 1)).astype(np.float32)
    res = cluster(torch.tensor(x), threshold=0.72, allow_forced_bipartition=True)
    assert res.origin == cv.FORCED
    v = cv.assess_partition(x, labels_from_groups(res.groups, 8), threshold=0.72, origin=res.origin)
    assert v.verdict != cv.REAL
    assert v.sim_min == pytest.approx(1.0)
    text = cv.describe(v)
    assert text.startswith("forced split") and "(0.72)" in text and "least similar pair is 1.000" in text


def test_the_methods_clustering_of_random_features_does_not_beat_the_null():
    """Noise clustered by the method itself: forced splits never real, natural ones rarely."""
    torch = pytest.importorskip("torch")
    from instrumentation.routing.clustering import cluster, labels_from_groups

    rng = np.random.default_rng(6)
    counts = {"forced": 0, "forced_real": 0, "natural": 0, "natural_real": 0}
    for draw in range(30):
        for kind, x in (
            ("forced", 1.0 + 0.1 * rng.standard_normal((16, 9))),
            ("natural", rng.standard_normal((16, 9))),
        ):
            x = x.astype(np.float32)
            res = cluster(torch.tensor(x), threshold=0.72, allow_forced_bipartition=True)
            v = cv.assess_partition(x, labels_from_groups(res.groups, 16), threshold=0.72, origin=res.origin, seed=draw)
            if v.verdict == cv.UNDEFINED:
                continue
            counts[kind] += 1
            counts[kind + "_real"] += v.verdict == cv.REAL
    assert counts["forced"] == 30 and counts["forced_real"] == 0
    assert counts["natural"] >= 15 and counts["natural_real"] <= 0.15 * counts["natural"]


def test_the_permutation_null_alone_calls_fitted_noise_real():
    """Why there is a second null: relabelings are no chance level for a partition fitted to the data."""
    torch = pytest.importorskip("torch")
    from instrumentation.routing.clustering import cluster, labels_from_groups

    rng = np.random.default_rng(7)
    beats_relabelings = 0
    for draw in range(20):
        x = (1.0 + 0.1 * rng.standard_normal((16, 9))).astype(np.float32)
        res = cluster(torch.tensor(x), threshold=0.72, allow_forced_bipartition=True)
        v = cv.assess_partition(x, labels_from_groups(res.groups, 16), threshold=0.72, origin=res.origin, seed=draw)
        beats_relabelings += v.silhouette > v.null_p95
        assert v.verdict == cv.CHANCE
    assert beats_relabelings >= 15


def test_degenerate_partitions_are_undefined():
    x = np.random.default_rng(8).standard_normal((6, 9))
    assert cv.assess_partition(x, [0] * 6, threshold=0.7, origin="collapsed").verdict == cv.UNDEFINED
    assert cv.assess_partition(x, range(6), threshold=0.7).verdict == cv.UNDEFINED
    none = cv.assess_partition(None, [0, 0, 1, 1], threshold=0.7, origin="frozen")
    assert none.verdict == cv.UNDEFINED and np.isnan(none.silhouette)
    assert "undefined" in cv.describe(none)


def test_the_null_is_seeded():
    rng = np.random.default_rng(9)
    x, labels = _planted(rng, [5, 5], offset=0.1)
    a = cv.assess_partition(x, labels, threshold=0.7, seed=11)
    b = cv.assess_partition(x, labels, threshold=0.7, seed=11)
    assert a == b


def _rows():
    return pd.DataFrame(
        {
            "step": [10, 10, 15, 15, 20, 20],
            "layer": [0, 1, 0, 1, 0, 1],
            "origin": [cv.FORCED, "natural", cv.FORCED, cv.FORCED, "natural", "natural"],
            "verdict": [cv.CHANCE, cv.REAL, cv.CHANCE, cv.CHANCE, cv.REAL, cv.UNDEFINED],
            "sim_median": [0.99, 0.5, 0.98, 0.97, 0.6, 0.4],
        }
    )


def test_shares_by_layer_and_over_the_run():
    df = _rows()
    by_layer = cv.shares_by_layer(df).set_index("layer")
    for layer, part in df.groupby("layer"):
        assert by_layer.loc[layer, "partitions"] == len(part)
        assert by_layer.loc[layer, "forced_share"] == pytest.approx((part["origin"] == cv.FORCED).sum() / len(part))
        assessed = part["verdict"] != cv.UNDEFINED  # undefined partitions neither beat nor miss the null
        assert by_layer.loc[layer, "real_share"] == pytest.approx((part["verdict"] == cv.REAL).sum() / assessed.sum())
        assert by_layer.loc[layer, "median_similarity"] == pytest.approx(np.median(part["sim_median"]))
    shares = cv.run_shares(df)
    n_assessed = int((df["verdict"] != cv.UNDEFINED).sum())
    assert shares == {
        "partitions": 6,
        "forced_share": pytest.approx(3 / 6),
        "real_share": pytest.approx(2 / n_assessed),
    }


def test_the_banner_appears_only_when_groups_are_in_doubt():
    df = _rows()
    text = cv.groups_in_doubt(df)
    assert text is not None and "50% of 6" in text and "40% of those assessed" in text  # 2 real of 5 assessed
    unassessed = df.assign(verdict=cv.UNDEFINED)  # e.g. recorded before verdicts existed
    assert "assessed" not in cv.groups_in_doubt(unassessed.assign(origin=cv.FORCED))
    assert cv.groups_in_doubt(unassessed.assign(origin="natural")) is None
    good = df.assign(origin="natural", verdict=cv.REAL)
    assert cv.groups_in_doubt(good) is None
    assert cv.groups_in_doubt(df.iloc[:0]) is None


# ---------------------------------------------------------------------------- from a run directory


def test_runs_without_a_validity_table_fall_back_to_the_tree(tmp_path):
    from aah_viz.analysis import queries
    from aah_viz.export import records
    from aah_viz.runlog import load_run
    from aah_viz.samples import make_synthetic_run
    from aah_viz.schema import TABLES

    path = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=8, steps=120, seed=3)
    shutil.rmtree(path / "cluster_validity")  # as recorded before the table existed
    run = load_run(path)
    tree = pd.read_parquet(run.path / "tree")
    level0 = tree[tree["level"] == 0].drop_duplicates(["step", "layer"])
    validity = queries.cluster_validity(run)
    assert len(validity) == len(level0)
    assert set(validity["verdict"]) == {cv.UNDEFINED}
    assert list(validity.columns) == list(TABLES["cluster_validity"])  # every view reads the same columns
    assert validity["silhouette"].isna().all() and validity["sim_median"].isna().all()
    expected = (level0["origin"] == cv.FORCED).mean()
    rec = records.stability_record(run)
    assert rec["forced_share"] == pytest.approx(expected)
    assert np.isnan(rec["real_share"])  # no verdicts recorded: unknown, not zero


def test_the_stability_export_carries_the_recorded_shares(tmp_path):
    from aah_viz.export import build_table
    from aah_viz.runlog import load_run
    from aah_viz.runlog.columns import rows_to_arrow
    from aah_viz.runlog.segment_io import write_segment
    from aah_viz.samples import make_synthetic_run

    shares = {}
    for seed in (0, 1):
        path = make_synthetic_run(tmp_path / f"fa{seed}", n_layer=2, n_head=8, steps=60, seed=seed)
        rng = np.random.default_rng(seed)
        rows = pd.DataFrame(
            {
                "step": np.repeat(np.arange(20, 60, 5), 2),
                "layer": np.tile([0, 1], 8),
                "origin": rng.choice([cv.FORCED, "natural"], 16),
                "verdict": rng.choice([cv.REAL, cv.CHANCE], 16),
            }
        )
        shutil.rmtree(path / "cluster_validity")
        (path / "cluster_validity").mkdir()
        write_segment(path / "cluster_validity", "part-000001.parquet", rows_to_arrow("cluster_validity", rows))
        shares[seed] = ((rows["origin"] == cv.FORCED).mean(), (rows["verdict"] == cv.REAL).mean())
    runs = [load_run(tmp_path / f"fa{seed}") for seed in (0, 1)]
    by_run = build_table("stability", runs, by="run").df.set_index("seed")
    for seed, (forced, real) in shares.items():
        assert by_run.loc[seed, "forced_share"] == pytest.approx(forced)
        assert by_run.loc[seed, "real_share"] == pytest.approx(real)
    by_regime = build_table("stability", runs, by="regime").df
    assert by_regime["forced_share"].iloc[0] == pytest.approx(np.mean([s[0] for s in shares.values()]))


def test_a_levels_caption_names_its_score_and_prints_one_pair_once():
    """A level's logged sim_min / sim_max are its clustering metric's scores (issue 42): upper levels cluster by
    cosine_normdiff (cosine minus 16 x the relative norm difference), which runs below -1; a single pair
    (or pairs scoring alike) is one value, never "-1.830 to -1.830"."""
    one = {"origin": "natural", "sim_min": -1.8304, "sim_max": -1.8296}
    text = cv.describe_level(one, "cosine_normdiff", 16.0)
    assert text.count("-1.830") == 1 and "-1.830 to" not in text, text
    assert text.endswith(
        "pairwise score of its items: -1.830 (cosine_normdiff: cosine minus 16 x the relative difference of the "
        "two rows' norms, from -17 to 1)"
    ), text
    assert "similarity of its items" not in text
    # the score the text names is the one the clustering computes: a pair of rows at cosine 1, norms 1 and 2
    torch = pytest.importorskip("torch")
    from instrumentation.routing.clustering import cluster

    rows = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    res = cluster(rows, threshold=0.5, metric="cosine_normdiff", normdiff_scale=16.0)
    assert res.sim_min == pytest.approx(1.0 - 16.0 * (2.0 - 1.0) / 2.0)  # -7: no cosine can take it
    spread = cv.describe_level({"origin": "natural", "sim_min": 0.25, "sim_max": 0.75}, "cosine")
    assert spread.endswith("pairwise cosine similarity of its items: 0.250 to 0.750")
    assert "minus the Euclidean distance" in cv.describe_level(one, "l2")
    assert "similarity" not in cv.describe_level({"origin": "frozen", "sim_min": 0.1, "sim_max": 0.2}, "cosine")
