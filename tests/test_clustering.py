"""Clustering and hierarchy (method §5): the worked examples of §12, the reference's quirks, invariants."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from instrumentation.routing.clustering import (  # noqa: E402
    _score_vectors,
    aggregate_group_features,
    cluster,
    labels_from_groups,
)
from instrumentation.routing.hierarchy import (  # noqa: E402
    build_hierarchy,
    fixed_deterministic_partition,
    fixed_random_partition,
    grow_upper_levels,
    hierarchy_from_topology,
    passthrough_hierarchy,
)

T = lambda rows: torch.tensor(rows, dtype=torch.float32)  # noqa: E731
LEVEL0 = dict(metric="cosine", allow_forced_bipartition=True, min_group_size=3, churn_penalty=0.02)
UPPER = dict(metric="cosine_normdiff", normdiff_scale=16.0, min_group_size=3, threshold_kind="super_threshold")
PAPER = dict(
    sim_threshold=0.72,
    super_threshold=0.76,
    max_depth=4,
    upper_metric="cosine_normdiff",
    min_group_size=3,
    churn_penalty=0.02,
)


def _is_partition(groups, n):
    flat = sorted(i for g in groups for i in g)
    return flat == list(range(n)) and all(groups)


# --- §12 worked examples -------------------------------------------------------------------------


def test_example1_natural_level0():
    X = T([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0.1, 0.95, 0], [1, 0.05, 0], [0, 1, 0.1]])
    res = cluster(X, threshold=0.72, **LEVEL0)
    assert res.groups == [[0, 1, 4], [2, 3, 5]]
    assert res.origin == "natural" and not res.forced_bipartition
    assert res.merged_count == 0 and res.groups_before_merge == 2 == res.groups_after_merge


EXAMPLE2 = [[1, 0.10, 0], [1, 0.12, 0], [1, 0.05, 0], [1, 0.2, 0], [1, 0, 0.1], [1, 0.15, 0.05]]


@pytest.mark.parametrize("prev_labels", [None, [0, 0, 1, 1, 0, 1]])
def test_example2_collapse_then_forced_bipartition(prev_labels):
    res = cluster(T(EXAMPLE2), threshold=0.72, prev_labels=prev_labels, **LEVEL0)
    assert res.groups_before_force == 1
    assert res.origin == "forced_bipartition" and res.forced_bipartition
    assert res.anchor_pair == (3, 4)
    assert res.anchor_similarity == pytest.approx(0.97571, abs=1e-5)
    assert res.groups == [[3, 0, 1, 5], [4, 2]]  # anchors first; no merge after a forced split
    assert res.merged_count == 0 and min(map(len, res.groups)) < 3


def test_example2_stats_are_taken_before_the_churn_bonus():
    plain = cluster(T(EXAMPLE2), threshold=0.72, **LEVEL0)
    churned = cluster(T(EXAMPLE2), threshold=0.72, prev_labels=[0, 0, 0, 0, 0, 0], **LEVEL0)
    assert (plain.sim_mean, plain.sim_min, plain.sim_max) == (churned.sim_mean, churned.sim_min, churned.sim_max)
    assert plain.sim_min == pytest.approx(0.97571, abs=1e-5)


def test_churn_bonus_moves_only_the_anchor():
    # Heads 3 and 4 are the least similar pair; a bonus for "previously together" lifts that pair
    # above the next-least similar one, so the anchor moves and with it the split.
    prev = [0, 1, 1, 0, 0, 1]
    base = cluster(T(EXAMPLE2), threshold=0.72, **LEVEL0)
    moved = cluster(T(EXAMPLE2), threshold=0.72, prev_labels=prev, **{**LEVEL0, "churn_penalty": 0.5})
    assert base.anchor_pair == (3, 4)
    assert moved.anchor_pair != (3, 4) and moved.origin == "forced_bipartition"
    # natural clustering never reads the churn-adjusted matrix
    X = T([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0.1, 0.95, 0], [1, 0.05, 0], [0, 1, 0.1]])
    assert cluster(X, threshold=0.72, prev_labels=[0, 1, 0, 1, 0, 1], **{**LEVEL0, "churn_penalty": 0.9}).groups == [
        [0, 1, 4],
        [2, 3, 5],
    ]


def test_example3_small_group_merge():
    X = T([[1, 0, 0], [0, 0, 1], [0.65, 0.76, 0], [0.85, 0.53, 0], [0, 0.1, 1], [0.1, 0, 1], [0.9, 0.44, 0]])
    res = cluster(X, threshold=0.72, **LEVEL0)
    assert res.origin == "natural"
    assert res.groups_before_merge == 3 and res.small_groups_before_merge == 1 and res.singletons_before_merge == 1
    assert res.groups == [[1, 4, 5], [2, 3, 6, 0]]
    assert res.merged_count == 1 and res.groups_after_merge == 2
    u = _score_vectors(X, "cosine")
    assert float(u[[0]].mean(0) @ u[[2, 3, 6]].mean(0)) == pytest.approx(0.80, abs=0.01)


@pytest.mark.parametrize(
    "rows, n_groups, origin, similarity",
    [
        ([[1, 0, 0], [2, 0, 0]], 2, "natural", -7.0),
        ([[1, 0, 0], [1.01, 0, 0]], 1, "collapsed", 0.8416),
        ([[1, 0, 0], [0, 1, 0]], 2, "natural", 0.0),
    ],
)
def test_example4_upper_level_cosine_normdiff(rows, n_groups, origin, similarity):
    res = cluster(T(rows), threshold=0.76, **UPPER)
    assert len(res.groups) == n_groups and res.origin == origin and not res.forced_bipartition
    assert res.sim_min == pytest.approx(similarity, abs=1e-4) == res.sim_max
    h = grow_upper_levels(
        [[0], [1]], T(rows), super_threshold=0.76, max_depth=4, upper_metric="cosine_normdiff", min_group_size=3
    )
    if origin == "collapsed":  # the collapsed attempt is recorded but its level is not added
        assert h.group_counts() == [2] and h.stop_reason == "upper_level_collapsed"
        assert len(h.attempts) == 1 and h.level_added() == [False]
    else:  # "[2, 2, 2, 2]": two too-different groups are copied up to max_depth
        assert h.group_counts() == [2, 2, 2, 2] and h.stop_reason == ""
        assert [lvl.groups for lvl in h.levels[1:]] == [[[0], [1]]] * 3


def test_example9_fixed_random_grouping_uses_seeded_randperm():
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0)).tolist()
    groups = fixed_random_partition(12, seed=0)
    assert groups == [sorted(perm[:6]), sorted(perm[6:])]
    assert fixed_random_partition(12, seed=0) == groups
    assert fixed_random_partition(12, seed=1) != groups
    odd = fixed_random_partition(7, seed=3)
    assert [len(g) for g in odd] == [3, 4] and _is_partition(odd, 7)


def test_fixed_deterministic_partition():
    assert fixed_deterministic_partition(6) == [[0, 2, 4], [1, 3, 5]]
    assert fixed_deterministic_partition(1) == [[0]]


# --- merge quirks (§5.6) -------------------------------------------------------------------------


def test_merge_into_a_stale_emptied_slot():
    # {0} merges into {3, 7}; that group, still below min_group_size, then scores best against the
    # stale mean of the emptied slot 0 and is moved there: the group now sits first.
    X = T(
        [
            [-0.2, 0.8, 0.9, 0.2],
            [-1.7, -0.2, 0.1, 1.5],
            [0.4, -1.6, -0.6, 1.5],
            [1.1, -0.5, 1.3, 0.0],
            [-1.6, 0.9, -1.8, -0.9],
            [0.7, 0.6, -0.5, -0.4],
            [-2.4, 0.5, 0.8, 1.3],
            [0.8, 0.4, 1.3, 0.6],
        ]
    )
    res = cluster(X, threshold=0.3, metric="cosine", min_group_size=4)
    assert res.groups_before_merge == 5 and res.merged_count == 2
    assert res.groups == [[3, 7, 0], [1, 2, 6], [4], [5]]


def test_no_merge_with_two_non_empty_groups():
    X = T([[0.3, 0.1, 0.7], [0.7, 0.8, 0.2], [0.6, 0.3, 0.4], [0.1, 0.3, 0.3], [0.7, 0.6, 0.6], [1.0, 1.0, 0.8]])
    res = cluster(X, threshold=0.72, metric="cosine", min_group_size=3)
    assert res.groups == [[0], [1, 2, 3, 4, 5]] and res.merged_count == 0
    u = _score_vectors(X, "cosine")
    assert float(u[[0]].mean(0) @ u[[1, 2, 3, 4, 5]].mean(0)) >= 0.72  # would merge with a third group


def test_min_group_size_one_never_merges():
    X = T([[1, 0, 0], [0, 0, 1], [0.65, 0.76, 0], [0.85, 0.53, 0], [0, 0.1, 1], [0.1, 0, 1], [0.9, 0.44, 0]])
    res = cluster(X, threshold=0.72, metric="cosine", min_group_size=1)
    assert res.groups == [[0], [1, 4, 5], [2, 3, 6]] and res.merged_count == 0


# --- other metrics and edge cases ----------------------------------------------------------------


def test_single_item_and_unknown_metric():
    res = cluster(T([[1.0, 2.0]]), threshold=0.72, allow_forced_bipartition=True)
    assert res.groups == [[0]] and res.origin == "single_item"
    with pytest.raises(ValueError, match="unknown clustering metric"):
        cluster(T([[1.0], [2.0]]), threshold=0.5, metric="manhattan")


def test_l2_uses_its_own_threshold_and_raw_rows():
    X = T([[0, 0], [0.5, 0], [10, 0], [10.4, 0]])
    res = cluster(X, threshold=0.99, metric="l2", upper_l2_threshold=-1.0)
    assert res.groups == [[0, 1], [2, 3]] and res.threshold == -1.0
    assert res.sim_max == pytest.approx(-0.4, abs=1e-5)


def test_centered_cosine_separates_what_cosine_cannot():
    X = T([[10, 10.1], [10, 10.2], [10.2, 10], [10.1, 10]])
    assert len(cluster(X, threshold=0.72, metric="cosine").groups) == 1
    assert cluster(X, threshold=0.72, metric="centered_cosine").groups == [[0, 1], [2, 3]]


def test_aggregate_group_features_modes():
    rows = T([[1, 2], [3, 6], [5, 1]])
    groups = [[0, 1], [2]]
    mean = aggregate_group_features(groups, rows, "mean")
    assert torch.equal(mean, T([[2, 4], [5, 1]]))
    assert torch.allclose(aggregate_group_features(groups, rows, "mean_std"), T([[3, 6], [5, 1]]))
    assert torch.allclose(aggregate_group_features(groups, rows, "mean_var"), T([[3, 8], [5, 1]]))
    offset = aggregate_group_features(groups, rows, "mean_global_offset")
    assert torch.allclose(offset, 2 * mean - rows.mean(0))
    assert torch.equal(aggregate_group_features(groups, rows, "something_else"), mean)


# --- hierarchy invariants ------------------------------------------------------------------------


def _features(n, seed, spread):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 9, generator=g) ** spread) + 0.01


def _check_structure(h, n_heads):
    assert _is_partition(h.levels[0].groups, n_heads)
    for below, above in zip(h.levels[:-1], h.levels[1:]):
        assert _is_partition(above.groups, len(below.groups))
    for level in h.levels:
        assert level.features.shape == (len(level.groups), 9)
    maps = h.head_group_maps(n_heads)
    assert len(maps) == len(h.levels)
    for lvl, (labels, parents) in enumerate(zip(maps, h.parent_maps() + [None])):
        members = h.members(lvl)
        assert _is_partition(members, n_heads) and all(m == sorted(m) for m in members)
        assert labels == labels_from_groups(members, n_heads)  # every head in exactly one group per level
        if parents is not None:
            assert len(parents) == len(h.levels[lvl].groups)
            for gid, parent in enumerate(parents):
                assert gid in h.levels[lvl + 1].groups[parent]
                assert set(members[gid]) <= set(h.members(lvl + 1)[parent])


@pytest.mark.parametrize("n_heads", [2, 5, 12, 16, 32, 64])
@pytest.mark.parametrize("spread", [1.0, 6.0])
def test_build_hierarchy_invariants(n_heads, spread):
    X = _features(n_heads, n_heads, spread)
    h = build_hierarchy(X, **PAPER)
    _check_structure(h, n_heads)
    assert 1 <= len(h.levels) <= 4
    assert len(h.levels[0].groups) >= 2  # forced bipartition at level 0
    assert h.attempts[0] is h.levels[0].facts
    assert torch.equal(h.levels[0].features, aggregate_group_features(h.levels[0].groups, X))
    n_added = len(h.levels)
    assert len(h.attempts) == n_added + (h.stop_reason == "upper_level_collapsed")
    if h.stop_reason == "":
        assert n_added == 4


def test_build_hierarchy_with_previous_labels_and_modes():
    X = _features(16, 3, 4.0)
    first = build_hierarchy(X, **PAPER)
    labels = first.head_group_maps(16)[0]
    again = build_hierarchy(X, **PAPER, prev_labels=labels, group_feature_mode="mean_std")
    _check_structure(again, 16)
    assert again.levels[0].groups == first.levels[0].groups  # churn never changes a natural result


def test_passthrough_gives_exactly_max_depth_levels():
    level0 = [[0, 2, 4], [1, 3, 5]]
    feats = _features(2, 1, 1.0)
    for depth in (1, 2, 4):
        h = passthrough_hierarchy(level0, feats, depth)
        assert h.group_counts() == [2] * depth and h.stop_reason == ""
        assert all(torch.equal(lvl.features, feats) for lvl in h.levels)
        _check_structure(h, 6)
        assert h.head_group_maps(6) == [[0, 1, 0, 1, 0, 1]] * depth


def test_hierarchy_from_topology_reproduces_the_topology():
    X = _features(32, 7, 6.0)
    built = build_hierarchy(X, **PAPER)
    topology = built.topology()
    pooled = aggregate_group_features(topology[0], X)
    again = hierarchy_from_topology(topology, pooled)
    assert again.topology() == topology and again.attempts == []
    for a, b in zip(again.levels, built.levels):
        assert torch.equal(a.features, b.features)
    assert again.head_group_maps(32) == built.head_group_maps(32)
    topology[0][0].append(99)  # the stored copy is independent of the hierarchy
    assert 99 not in built.levels[0].groups[0]


def test_head_group_maps_compose_parents():
    topology = [[[0, 3], [1], [2, 4]], [[2, 0], [1]], [[1, 0]]]
    h = hierarchy_from_topology(topology, _features(3, 0, 1.0))
    assert h.parent_maps() == [[0, 1, 0], [0, 0]]
    assert h.head_group_maps(5) == [[0, 1, 2, 0, 2], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert h.members(1) == [[0, 2, 3, 4], [1]]
    _check_structure(h, 5)


def test_grow_upper_levels_accepts_level0_only_settings():
    feats = _features(4, 2, 1.0)
    h = grow_upper_levels([[0], [1], [2], [3]], feats, **PAPER, prev_labels=[0, 1, 2, 3])
    _check_structure(h, 4)
    assert h.levels[0].facts is None
    assert all(a.threshold_kind == "super_threshold" and not a.forced_bipartition for a in h.attempts)
    single = grow_upper_levels([[0, 1, 2]], feats[:1], **PAPER)
    assert single.group_counts() == [1] and single.stop_reason == "level0_collapsed" and single.attempts == []


def test_stop_reasons_at_the_edges():
    one = build_hierarchy(_features(1, 0, 1.0), **PAPER)
    assert one.topology() == [[[0]]] and one.stop_reason == "level0_collapsed"
    assert one.attempts[0].origin == "single_item"
    shallow = build_hierarchy(_features(12, 0, 1.0), **{**PAPER, "max_depth": 1})
    assert len(shallow.levels) == 1 and shallow.stop_reason == "" and len(shallow.attempts) == 1
    assert shallow.group_counts()[0] >= 2


def test_grow_upper_levels_rejects_unknown_keywords():
    with pytest.raises(TypeError, match="upper_metrc"):
        grow_upper_levels([[0], [1]], _features(2, 0, 1.0), super_threshold=0.76, max_depth=2, upper_metrc="l2")


# Nine features of one head, duplicated: in float32 its unit vector u has u . u = 1 + 1 ulp.
DUPLICATE_HEAD = [0.22, 0.48, 1.81, 0.19, 0.93, 1.99, 1.36, 1.03, 0.13]


def _expected_anchor(X, prev, churn, clamp_all):
    """The forced-split anchor pair computed here from S = u u^T, the churn bonus and the clamp."""
    u = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True).clamp_min(1e-6)
    S = u @ u.T
    labels = torch.tensor(prev)
    same = labels[:, None] == labels[None, :]
    S = (
        torch.where(same, S + churn, S).clamp(max=1.0)
        if clamp_all
        else torch.where(same, (S + churn).clamp(max=1.0), S)
    )
    S.fill_diagonal_(2.0)
    flat = S.reshape(-1).tolist()
    return divmod(flat.index(min(flat)), len(prev))


def test_churn_clamp_follows_the_reference_and_the_method_text_reading_is_an_option():
    X = T([DUPLICATE_HEAD] * 6)
    u = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)
    off = (u @ u.T)[~torch.eye(6, dtype=torch.bool)]
    assert bool((off > 1.0).all())  # the case exists only because float32 cosines exceed 1
    prev = [0, 1, 0, 1, 0, 1]
    ref = cluster(X, threshold=0.72, prev_labels=prev, **LEVEL0)  # default: the reference clamps all of S
    text = cluster(X, threshold=0.72, prev_labels=prev, churn_clamp="bonus", **LEVEL0)
    assert ref.anchor_pair == _expected_anchor(X, prev, 0.02, clamp_all=True) == (0, 1)
    assert text.anchor_pair == _expected_anchor(X, prev, 0.02, clamp_all=False) == (0, 2)
    assert ref.groups != text.groups
    h = build_hierarchy(X, prev_labels=prev, churn_clamp="bonus", **PAPER)
    assert h.levels[0].groups == text.groups  # the option reaches the adaptive build
    with pytest.raises(ValueError, match="churn_clamp"):
        cluster(X, threshold=0.72, prev_labels=prev, churn_clamp="none", **LEVEL0)


@pytest.mark.parametrize("threshold", [-1.0, -5.0])
def test_a_merge_threshold_that_lets_a_group_merge_into_itself_is_refused(threshold):
    from aah_viz.errors import ConfigError

    X = T([[0, 0, 0], [5, 0, 0], [0, 5, 0], [9, 9, 0], [0, 0, 9]])
    with pytest.raises(ConfigError, match="merge into itself"):
        cluster(X, threshold=0.0, metric="l2", upper_l2_threshold=threshold, min_group_size=3)
    # without merging (min_group_size 1) the same threshold is harmless
    assert _is_partition(cluster(X, threshold=0.0, metric="l2", upper_l2_threshold=threshold).groups, 5)
    assert _is_partition(cluster(X, threshold=0.0, metric="l2", upper_l2_threshold=-0.5, min_group_size=3).groups, 5)


def test_decision_margin_of_a_sequential_assignment():
    """Two items: one comparison against the threshold, at cosine cos(theta)."""
    import math

    for theta, joined in ((0.5, True), (1.0, False)):
        res = cluster(T([[1.0, 0.0], [math.cos(theta), math.sin(theta)]]), threshold=0.72)
        assert (len(res.groups) == 1) is joined
        assert res.decision_margin == pytest.approx(abs(math.cos(theta) - 0.72), abs=1e-6)


def test_decision_margin_of_a_forced_split_is_the_anchors_lead_and_the_tie_band():
    """One group of four, split around its least similar pair: the margin is the smaller of that
    pair's lead over the next least similar entry of S and every member's |delta| from the tie band,
    computed here independently in float64."""
    import numpy as np

    X = np.array([[1.0, 0.05, 0.0], [1.0, 0.0, 0.08], [1.0, 0.03, 0.03], [1.0, 0.06, 0.02]])
    res = cluster(T(X.tolist()), threshold=0.5, allow_forced_bipartition=True)
    assert res.forced_bipartition
    u = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = u @ u.T
    np.fill_diagonal(S, 2.0)
    entries = np.sort(S.ravel())
    i0, i1 = res.anchor_pair
    delta = u @ u[i0] - u @ u[i1]
    others = [j for j in range(4) if j not in (i0, i1)]
    expected = min(entries[1] - entries[0], *(abs(abs(delta[j]) - 1e-8) for j in others))
    # the sequential pass's own comparisons (all above the threshold here) are farther away
    assert res.decision_margin == pytest.approx(expected, abs=2e-7)
    assert res.decision_margin < 1e-6  # S is symmetric: the anchor pair and its transpose nearly tie


def test_decision_margin_is_small_exactly_where_a_nudge_changes_the_groups():
    """Over random inputs: every partition that a perturbation of size eps changes had a margin below eps."""
    gen = torch.Generator().manual_seed(3)
    eps, changed = 1e-2, 0
    for _ in range(300):
        X = torch.rand(6, 9, generator=gen) + 0.2
        base = cluster(X, threshold=0.97, allow_forced_bipartition=True)
        nudged = cluster(X + eps * torch.randn(6, 9, generator=gen), threshold=0.97, allow_forced_bipartition=True)
        if nudged.groups != base.groups:
            changed += 1
            assert base.decision_margin < eps, (base.groups, nudged.groups, base.decision_margin)
    assert changed > 0
