"""The statistics behind probe claims (aah_viz.analysis.selection, aah_viz.stats), against hand computations
and planted data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import spearmanr

from aah_viz.analysis.selection import max_null, split_half_best
from aah_viz.probes.claims import Items, Settings, claim
from aah_viz.stats.ranks import mantel
from aah_viz.stats.resampling import cluster_bootstrap_interval
from aah_viz.stats.significance import adjusted_p, holm


def test_cluster_bootstrap_resamples_whole_clusters_as_a_loop_over_the_same_draws_does():
    clusters = np.array([0, 0, 1, 2, 2, 2, 3])
    values = np.array([[1, 0], [1, 1], [0, 0], [1, 1], [0, 1], [1, 0], [0, 1]], dtype=float)
    lo, hi = cluster_bootstrap_interval(clusters, values, 50, np.random.default_rng(5))
    # the same draws used by hand: four clusters drawn with replacement, each drawn cluster's items in
    picks = np.random.default_rng(5).integers(0, 4, size=(50, 4))
    means = []
    for pick in picks:
        rows = [values[clusters == c] for c in pick]
        means.append(np.concatenate(rows).mean(axis=0))
    expected_lo, expected_hi = np.quantile(np.array(means), [0.025, 0.975], axis=0)
    np.testing.assert_allclose(lo, expected_lo)
    np.testing.assert_allclose(hi, expected_hi)


def test_cluster_bootstrap_of_a_constant_is_that_constant_and_one_cluster_says_nothing():
    lo, hi = cluster_bootstrap_interval(np.array([0, 1, 1, 2]), np.full(4, 0.25), 30, np.random.default_rng(0))
    assert lo[0] == pytest.approx(0.25) and hi[0] == pytest.approx(0.25)
    lo, hi = cluster_bootstrap_interval(np.zeros(3, dtype=int), np.ones(3), 30, np.random.default_rng(0))
    assert np.isnan(lo[0]) and np.isnan(hi[0])


def test_split_half_scores_a_dominant_column_at_its_own_mean():
    clusters = np.repeat(np.arange(10), 3)
    values = np.zeros((30, 3))
    values[:, 1] = np.tile([1, 1, 0], 10)  # 2/3 in every cluster, always the best
    values[::3, 2] = 1  # 1/3
    split = split_half_best(clusters, values, np.random.default_rng(0), n_splits=5)
    assert split.score == pytest.approx(2 / 3)
    assert split.chosen_share == 1.0


def test_split_half_removes_the_optimism_of_the_best_of_many_noise_columns():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(100), 4)
    values = rng.random((400, 200)) < 0.5  # no column is better than another
    best_in_sample = values.mean(axis=0).max()
    split = split_half_best(clusters, values, np.random.default_rng(2), n_splits=10)
    assert best_in_sample > 0.55  # the chosen maximum is optimistic ...
    assert abs(split.score - 0.5) < 0.03  # ... the held-out half is not


def test_max_null_of_two_opposite_columns_by_hand():
    # two items with two choices each; column 0 always picks choice 0, column 1 always choice 1. The best
    # column gets both right when both answers are equal (probability 1/2), else one of two.
    choice = np.array([[0, 1], [0, 1]])
    null = max_null(np.array([2, 2]), np.array([1, 1]), choice, 4000, np.random.default_rng(3))
    assert set(np.unique(null)) == {0.5, 1.0}
    assert abs(np.mean(null == 1.0) - 0.5) < 0.03


def test_max_null_with_several_right_choices_and_a_column_that_picks_nothing():
    # one item, three mentions, two of them right: a column picking mention 0 is right with probability 2/3;
    # a column that picked nothing is never right; an item with a single choice is always right
    null = max_null(np.array([3]), np.array([2]), np.array([[0]]), 6000, np.random.default_rng(4))
    assert abs(null.mean() - 2 / 3) < 0.02
    assert np.all(max_null(np.array([3]), np.array([1]), np.array([[-1]]), 50, np.random.default_rng(0)) == 0)
    assert np.all(max_null(np.array([1, 1]), np.array([1, 1]), np.array([[0], [0]]), 50, np.random.default_rng(0)) == 1)


def test_adjusted_p_counts_the_observed_draw_and_holm_by_hand():
    assert adjusted_p(0.6, np.array([0.5, 0.6, 0.7, 0.2])) == pytest.approx(3 / 5)
    assert adjusted_p(0.9, np.array([0.5, 0.6])) == pytest.approx(1 / 3)
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04 -> running maximum 0.03, 0.06, 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, np.nan]), [0.03, 0.06, 0.06, np.nan])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])


def _planted_items(rng, n_sent=80, per_sent=4, n_cols=60, planted=None, planted_rate=0.6):
    """Items with 3 to 12 choices; every column picks at random; column ``planted`` is right on a share."""
    n = n_sent * per_sent
    n_choices = rng.integers(3, 13, size=n)
    gold = (rng.random(n) * n_choices).astype(np.int64)
    choice = (rng.random((n, n_cols)) * n_choices[:, None]).astype(np.int64)
    if planted is not None:
        right = rng.random(n) < planted_rate
        choice[right, planted] = gold[right]
    hits = choice == gold[:, None]
    return np.repeat(np.arange(n_sent), per_sent), hits, choice, n_choices, gold


def test_a_planted_head_beats_the_max_over_heads_null():
    rng = np.random.default_rng(7)
    clusters, hits, choice, n_choices, gold = _planted_items(rng, planted=17)
    baselines = {"offset": choice[:, 0] == gold}  # a baseline as weak as any random column
    row = claim(
        Items(clusters, hits, choice, n_choices, np.ones(len(gold)), baselines), Settings(n_boot=200, n_draws=199)
    )
    assert row["best"] == 17
    assert row["adjusted_p"] == pytest.approx(1 / 200)
    assert row["null_p95"] < 0.3 < row["split_half_acc"]
    assert row["best_ci_low"] < row["best_acc"] < row["best_ci_high"]
    assert row["beats_baseline"]


def test_a_head_equal_to_the_pos_rule_does_not_beat_it():
    rng = np.random.default_rng(8)
    clusters, hits, choice, n_choices, gold = _planted_items(rng, planted=3, planted_rate=0.8)
    pos_rule = hits[:, 3].copy()  # the rule makes exactly the head's picks
    items = Items(clusters, hits, choice, n_choices, np.ones(len(gold)), {"offset:-1": hits[:, 0], "pos": pos_rule})
    row = claim(items, Settings(n_boot=200, n_draws=99))
    assert row["best"] == 3 and row["adjusted_p"] == pytest.approx(1 / 100)  # the head is real ...
    assert row["baseline"] == "pos" and row["delta"] == 0  # ... and no better than the rule
    assert row["delta_ci_low"] == 0 and not row["beats_baseline"]


def test_pure_noise_rejects_at_about_the_nominal_rate():
    rng = np.random.default_rng(11)
    p_values = []
    for _ in range(300):
        clusters, hits, choice, n_choices, gold = _planted_items(rng, n_sent=15, per_sent=3, n_cols=12)
        best = hits.mean(axis=0).max()
        p_values.append(adjusted_p(best, max_null(n_choices, np.ones(len(gold)), choice, 99, rng)))
    rate = np.mean(np.array(p_values) <= 0.05)
    assert 0.02 <= rate <= 0.09  # nominal 0.05; 300 datasets give a standard error of 0.013


def test_mantel_of_three_items_enumerates_every_relabelling_by_hand():
    a = np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=float)
    result = mantel(a, a, n_perm=100, rng=np.random.default_rng(0))
    # relabelling three items permutes the three pairs every way: rho 1, 1/2, 1/2, -1/2, -1/2, -1
    assert result.exact and result.n_relabelings == 6
    assert result.rho == pytest.approx(1.0)
    assert result.p_value == pytest.approx(1 / 6)
    assert result.null_mean == pytest.approx(0.0)


def test_mantel_rho_is_spearmans_and_its_null_is_a_relabelling():
    rng = np.random.default_rng(2)
    points = rng.random((9, 2))
    a = np.linalg.norm(points[:, None] - points[None], axis=-1)
    b = a + 0.3 * rng.random((9, 9))
    b = (b + b.T) / 2
    np.fill_diagonal(b, 0)
    iu = np.triu_indices(9, 1)
    result = mantel(a, b, n_perm=199, rng=np.random.default_rng(3))
    assert result.rho == pytest.approx(spearmanr(a[iu], b[iu]).statistic)
    assert not result.exact and result.n_relabelings == 199
    assert result.p_value == pytest.approx(1 / 200)
    # an unrelated matrix: the observed rho is one more draw from the null
    c = rng.random((9, 9))
    c = (c + c.T) / 2
    assert mantel(a, c, 199, np.random.default_rng(4)).p_value > 0.05


def test_mantel_exact_p_counts_relabellings_at_least_as_large():
    rng = np.random.default_rng(5)
    a = rng.random((5, 5))
    a = a + a.T
    b = rng.random((5, 5))
    b = b + b.T
    iu = np.triu_indices(5, 1)
    observed = spearmanr(a[iu], b[iu]).statistic
    rhos = [spearmanr(a[iu], b[np.ix_(p, p)][iu]).statistic for p in map(list, itertools.permutations(range(5)))]
    result = mantel(a, b, 10, np.random.default_rng(0))
    assert result.exact and result.n_relabelings == 120
    assert result.p_value == pytest.approx(np.mean(np.array(rhos) >= observed - 1e-12))


def test_head_similarity_rows_carry_each_layers_mantel_test_and_holm_across_layers():
    from aah_viz.analysis import head_similarity as hs
    from aah_viz.analysis.similarity_measures import similarity

    rng = np.random.default_rng(6)
    n_layer, n_head = 3, 8
    distance = rng.random((n_layer, n_head, 6))
    probe = np.concatenate([distance * 2 + 0.05 * rng.random(distance.shape), rng.random((n_layer, n_head, 2))], -1)
    probe[2] = rng.random((n_head, 8))  # the last layer's probe scores say nothing of its attention
    inputs = {"distance": hs.HeadInput(distance), "probe": hs.HeadInput(probe)}
    settings = hs.Settings(null_samples=5, refit_samples=3, agreement_samples=99)
    table = hs.head_similarity_rows(inputs, settings=settings, similarities=("attention", "probe"))
    rows = hs.agreements(table)
    assert set(rows["procedure"]) == {"method", "complete"}
    iu = np.triu_indices(n_head, 1)
    for layer in range(n_layer):
        mine = rows[rows["layer"] == layer]
        a = 1 - similarity("attention", distance[layer])
        b = 1 - similarity("probe", probe[layer])
        assert mine["mantel_rho"].to_numpy() == pytest.approx([spearmanr(a[iu], b[iu]).statistic] * 2)
        assert not mine["mantel_exact"].any()  # 8! relabellings: drawn, not enumerated
    method = rows[rows["procedure"] == "method"].sort_values("layer")
    assert method["mantel_p_value"].iloc[0] == pytest.approx(1 / 100) and method["mantel_p_value"].iloc[2] > 0.05
    np.testing.assert_allclose(method["mantel_p_holm"], holm(method["mantel_p_value"].to_numpy()))


def test_mantel_view_shows_ari_only_where_both_groupings_are_real():
    from aah_viz.analysis import head_similarity as hs

    rng = np.random.default_rng(9)
    distance = rng.random((2, 7, 6))
    probe = distance[..., :5] + 0.1 * rng.random((2, 7, 5))
    inputs = {"distance": hs.HeadInput(distance), "probe": hs.HeadInput(probe)}
    table = hs.head_similarity_rows(
        inputs,
        settings=hs.Settings(null_samples=5, refit_samples=3, agreement_samples=50),
        similarities=("attention", "probe"),
    )
    view = hs.mantel_view(table)
    assert list(view["layer"]) == [0, 1] and set(view["similarity"]) == {"attention"}
    assert view["exact"].all()  # 7 heads: all 5040 relabellings
    grouped = hs.groupings(table)
    grouped = grouped[grouped["procedure"] == "method"]
    for layer, ari in zip(view["layer"], view["ARI (both real)"]):
        verdicts = set(grouped.loc[grouped["layer"] == layer, "verdict"])
        assert np.isnan(ari) == (verdicts != {"real"})
    assert hs.mantel_view(table.drop(columns=[c for c in table if c.startswith("mantel")])).empty  # older tables
