"""Partition comparisons and routing stability on hand-built and synthetic head rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score

from aah_viz.analysis import partitions, stability


def test_ari_rows_equals_scikit_learn_row_by_row():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 5, size=(300, 12))
    b = rng.integers(0, 3, size=(300, 12))
    b[:40] = a[:40]  # identical rows
    b[40:60] = (a[40:60] + 7) * 3  # same partitions, other labels
    a[60] = 0
    b[60] = 0  # both one group
    a[61] = np.arange(12)
    b[61] = np.arange(12)[::-1]  # both all singletons
    a[62] = 0
    b[62] = np.arange(12)  # one group vs singletons
    got = partitions.ari_rows(a, b)
    want = np.array([adjusted_rand_score(x, y) for x, y in zip(a, b)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert np.all(got[:60] == 1.0)


def test_group_change_is_invariant_to_relabelling_and_finds_the_moved_head():
    a = np.array([[0, 0, 1, 1, 2, 2]])
    relabelled = np.array([[5, 5, 3, 3, 9, 9]])
    assert not partitions.heads_changing_group(a, relabelled).any()
    assert partitions.same_partition(a, relabelled).all()
    moved = np.array([[0, 0, 1, 1, 1, 2]])  # head 4 left group {4, 5} for group {2, 3}
    changed = partitions.heads_changing_group(a, moved)[0]
    assert changed.tolist() == [False, False, True, True, True, True]
    assert not partitions.same_partition(a, moved).any()


def _rows(layer, step, windows, g0, g1=None):
    n = len(windows)
    d = {
        "step": [step] * n,
        "layer": [layer] * n,
        "head": list(range(n)),
        "window_idx": windows,
        "window": [32 << w for w in windows],
        "group_l0": g0,
        "group_l1": g1 if g1 is not None else [None] * n,
    }
    return pd.DataFrame(d)


def _heads():
    return pd.concat(
        [
            _rows(0, 10, [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]),
            _rows(0, 15, [0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]),  # relabelled only
            _rows(0, 20, [0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0]),  # head 1 moves, head 1 switches window
            _rows(0, 25, [0, 0, 1, 1], [0, 1, 1, 1]),  # the upper level disappears
            _rows(1, 10, [2, 2, 2, 2], [0, 0, 0, 0]),
            _rows(1, 20, [2, 2, 2, 2], [0, 0, 0, 0]),
        ],
        ignore_index=True,
    ).sample(frac=1.0, random_state=3)  # row order must not matter


def test_update_frame_compares_each_update_with_the_previous_one_of_its_layer():
    u = stability.update_frame(_heads(), n_head=4)
    assert list(u.columns) == stability.UPDATE_COLUMNS
    assert u[["layer", "step"]].values.tolist() == [[0, 10], [0, 15], [0, 20], [0, 25], [1, 10], [1, 20]]
    first = u.iloc[[0, 4]]
    assert first["ari"].isna().all() and first["topology_changed"].isna().all()
    r = u.set_index(["layer", "step"])
    assert r.loc[(0, 15), "ari"] == 1.0
    assert r.loc[(0, 15), "group_switch_share"] == 0.0
    assert r.loc[(0, 15), "topology_changed"] == False  # noqa: E712
    assert r.loc[(0, 20), "ari"] == pytest.approx(adjusted_rand_score([0, 0, 1, 1], [0, 1, 1, 1]))
    # head 1 changed mates, and so did everybody it left or joined: all four heads
    assert r.loc[(0, 20), "group_switch_share"] == 1.0
    assert r.loc[(0, 20), "window_switch_share"] == 0.25
    assert r.loc[(0, 20), "topology_changed"] == True  # noqa: E712
    assert r.loc[(0, 25), "topology_changed"] == True  # noqa: E712  (level 1 vanished)
    assert r.loc[(0, 25), "n_levels"] == 1 and r.loc[(0, 20), "n_levels"] == 2
    assert r.loc[(1, 20), "ari"] == 1.0 and r.loc[(1, 20), "prev_step"] == 10
    summary = stability.layer_summary(u).set_index("layer")
    assert summary.loc[0, "updates"] == 4 and summary.loc[0, "topology_changes"] == 2


def test_head_switch_stats_counts_switches_flip_flops_and_dwell():
    heads = pd.concat(
        [_rows(0, s, [w, 0], [0, 0]) for s, w in zip([0, 10, 20, 30, 40], [0, 1, 0, 0, 2])], ignore_index=True
    )
    st_ = stability.head_switch_stats(heads, n_head=2).set_index("head")
    assert st_.loc[0, "window_switches"] == 3  # 0->1, 1->0, 0->2
    assert st_.loc[0, "flip_flops"] == 1  # 0 -> 1 -> 0
    assert st_.loc[0, "switch_rate"] == pytest.approx(3 / 4)
    assert st_.loc[0, "mean_dwell_steps"] == pytest.approx(40 / 4)
    assert st_.loc[1, "window_switches"] == 0 and st_.loc[1, "mean_dwell_steps"] == 40


def test_stability_of_a_synthetic_run_matches_a_direct_computation(tmp_path):
    from aah_viz.analysis import queries
    from aah_viz.runlog import load_run
    from aah_viz.samples import make_synthetic_run

    run = load_run(make_synthetic_run(tmp_path / "r", n_layer=3, n_head=8, steps=200, seed=4))
    heads = queries.heads_at_updates(run)
    ups = queries.update_steps(run)
    events = run.events("routing_update")
    assert len(ups) == len(events) and len(heads) == len(ups) * 8
    u = stability.update_frame(heads, 8)
    # recompute layer 2's ARI series with scikit-learn from the raw table
    raw = run.table("heads", filters=[("layer", "==", 2)])
    steps = sorted(ups.loc[ups["layer"] == 2, "step"])
    parts = [raw[raw["step"] == s].sort_values("head")["group_l0"].to_numpy() for s in steps]
    want = [adjusted_rand_score(a, b) for a, b in zip(parts, parts[1:])]
    got = u[u["layer"] == 2].sort_values("step")["ari"].to_numpy()[1:]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_compare_rows_matches_the_contingency_ari_and_co_membership():
    rng = np.random.default_rng(7)
    a = rng.integers(-1, 4, size=(5000, 10))  # -1 stands for a missing level (one label of its own)
    b = a.copy()
    flip = rng.random(a.shape) < 0.1
    b[flip] = rng.integers(-1, 4, size=flip.sum())
    ari, changed = partitions.compare_rows(a, b)
    np.testing.assert_allclose(ari, partitions.ari_rows(a, b), atol=1e-12)
    co_a, co_b = partitions.co_membership(a), partitions.co_membership(b)
    np.testing.assert_array_equal(changed, (co_a != co_b).any(axis=2))
    # the chunked co-membership path (wide layers) agrees with the bitmask path
    wide_a, wide_b = np.tile(a[:300], 6), np.tile(b[:300], 6)  # 60 heads
    ari_w, changed_w = partitions.compare_rows(wide_a, wide_b)
    np.testing.assert_allclose(ari_w, partitions.ari_rows(wide_a, wide_b), atol=1e-12)
    np.testing.assert_array_equal(
        changed_w, (partitions.co_membership(wide_a) != partitions.co_membership(wide_b)).any(axis=2)
    )
    idx = rng.choice(len(a), 50, replace=False)
    np.testing.assert_allclose(ari[idx], [adjusted_rand_score(a[i], b[i]) for i in idx], atol=1e-12)


def test_incomplete_rows_give_the_same_answer_as_complete_ones():
    heads = _heads().sort_values(["step", "layer", "head"])
    fast = stability.update_frame(heads, n_head=4)
    shuffled = stability.update_frame(heads.sample(frac=1.0, random_state=0), n_head=4)
    pd.testing.assert_frame_equal(fast, shuffled)
    cut = heads.iloc[:-1]  # the newest rows (step 25) lost one head row
    partial = stability.update_frame(cut, n_head=4)
    assert len(partial) == len(fast)
    keep = ~((fast["layer"] == 0) & (fast["step"] == 25))
    pd.testing.assert_frame_equal(partial[keep], fast[keep])
    assert partial.loc[~keep, "window_switch_share"].item() == 0.5  # head 3 missing counts as changed


def test_without_grouping_windows_still_compare_and_the_figure_draws_them():
    from aah_viz.figures.stability import stability_figure

    heads = _heads().drop(columns=["group_l0", "group_l1"])
    u = stability.update_frame(heads, n_head=4)
    assert u["ari"].isna().all() and u["topology_changed"].isna().all()
    assert u.set_index(["layer", "step"]).loc[(0, 20), "window_switch_share"] == 0.25
    fig = stability_figure(u)
    switching = next(t for t in fig.data if t.name == "switching window")
    # one point per update step, averaged over the layers updating then (step 20: layers 0 and 1)
    assert switching.x.tolist() == [15, 20, 25]
    assert switching.y.tolist() == [0.0, 0.125, 0.25]
