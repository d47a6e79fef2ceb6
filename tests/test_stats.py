"""Seed statistics: bootstrap, Welch's t, permutation test, paired curves, factorial effects."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from aah_viz.export import stats
from aah_viz.stats import resampling, significance

A = [6.561, 6.552, 6.570, 6.549, 6.566]
B = [6.540, 6.531, 6.545, 6.529]


def test_summary_matches_numpy_and_interval_is_seeded():
    s = stats.summarize(A, seed=3)
    assert s.n == 5
    assert s.mean == pytest.approx(np.mean(A), abs=1e-15)
    assert s.std == pytest.approx(np.std(A, ddof=1), abs=1e-15)
    assert s.ci_low < s.mean < s.ci_high
    # the interval is a percentile bootstrap of the mean: same seed, same interval; other seed differs
    assert resampling.bootstrap_ci(A, seed=3) == (s.ci_low, s.ci_high)
    assert resampling.bootstrap_ci(A, seed=3) == resampling.bootstrap_ci(list(A), seed=3)
    assert resampling.bootstrap_ci(A, seed=4) != resampling.bootstrap_ci(A, seed=3)
    # independent re-implementation of the percentile bootstrap with the documented generator
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 5, size=(stats.DEFAULT_BOOT, 5))
    lo, hi = np.quantile(np.asarray(A)[idx].mean(axis=1), [0.025, 0.975])
    assert (lo, hi) == (s.ci_low, s.ci_high)


def test_single_value_has_no_spread():
    s = stats.summarize([6.5])
    assert s.n == 1 and s.mean == 6.5
    assert math.isnan(s.std) and math.isnan(s.ci_low) and math.isnan(s.ci_high)
    assert s.spread_text() == "n = 1, no variance estimate"
    assert stats.summarize([float("nan"), None, 2.0]).n == 1


def test_group_summaries_by_one_or_several_keys_match_numpy_in_order_of_appearance():
    df = pd.DataFrame(
        {
            "regime": ["b", "a", "b", "a", "b"],
            "layer": [0, 0, 0, 1, 1],
            "x": [1.0, 2.0, 3.0, 4.0, "n/a"],
        }
    )
    by_regime = stats.group_summaries(df, ["x"], by="regime", seed=5)
    assert list(by_regime["regime"]) == ["b", "a"] and list(by_regime["n"]) == [3, 2]
    assert list(by_regime["x_n"]) == [2, 2]  # text is no number
    assert by_regime["x"].tolist() == [np.mean([1.0, 3.0]), np.mean([2.0, 4.0])]
    assert by_regime["x_std"].tolist() == [np.std([1.0, 3.0], ddof=1), np.std([2.0, 4.0], ddof=1)]
    assert (by_regime.loc[0, "x_ci_low"], by_regime.loc[0, "x_ci_high"]) == resampling.bootstrap_ci([1.0, 3.0], seed=5)

    cells = stats.group_summaries(df, ["x"], by=["regime", "layer"])
    assert [tuple(r) for r in cells[["regime", "layer", "n"]].itertuples(index=False)] == [
        ("b", 0, 2),
        ("a", 0, 1),
        ("a", 1, 1),
        ("b", 1, 1),
    ]
    assert cells["x"].tolist()[:3] == [2.0, 2.0, 4.0] and math.isnan(cells["x"].iloc[3])
    assert math.isnan(cells["x_std"].iloc[1])  # one run: no spread


def test_a_value_column_named_like_another_columns_interval_keeps_its_own_summary():
    df = pd.DataFrame({"regime": ["a", "a", "a"], "delta": [0.1, 0.3, 0.2], "delta_ci_low": [-1.0, -2.0, -3.0]})
    [(ident, cols)] = stats.summaries_by_group(df, ["delta", "delta_ci_low"], seed=2)
    assert ident == {"regime": "a", "n": 3}
    assert (cols["delta"].ci_low, cols["delta"].ci_high) == resampling.bootstrap_ci([0.1, 0.3, 0.2], seed=2)
    assert cols["delta_ci_low"].mean == np.mean([-1.0, -2.0, -3.0])


def test_welch_matches_scipy():
    ours = significance.welch_t_test(A, B)
    ref = sps.ttest_ind(A, B, equal_var=False)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert ours.df == pytest.approx(ref.df, rel=1e-12)
    assert math.isnan(significance.welch_t_test([1.0], B).p_value)


def _diff(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def test_permutation_exact_matches_scipy_for_equal_sizes():
    x, y = [6.561, 6.552, 6.570, 6.549], B
    ours = significance.permutation_test(x, y)
    ref = sps.permutation_test(
        (x, y), _diff, permutation_type="independent", alternative="two-sided", n_resamples=np.inf, vectorized=True
    )
    assert ours.method == "permutation (exact)"
    assert ours.statistic == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_permutation_exact_matches_enumeration_for_unequal_sizes():
    pooled = np.asarray(A + B)
    obs = np.mean(A) - np.mean(B)
    diffs = []
    for c in itertools.combinations(range(len(pooled)), len(A)):
        mask = np.zeros(len(pooled), dtype=bool)
        mask[list(c)] = True
        diffs.append(pooled[mask].mean() - pooled[~mask].mean())
    expected = np.mean(np.abs(diffs) >= abs(obs) - 1e-12)
    assert significance.permutation_test(A, B).p_value == pytest.approx(expected)


def test_permutation_monte_carlo_is_seeded():
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 15), rng.normal(0.8, 1, 15)
    p1 = significance.permutation_test(x, y, exact_limit=10, n_resamples=999, seed=1)
    p2 = significance.permutation_test(x, y, exact_limit=10, n_resamples=999, seed=1)
    assert p1.p_value == p2.p_value and p1.method.startswith("permutation (999")
    exact = sps.permutation_test((x, y), _diff, n_resamples=20000, vectorized=True, random_state=0).pvalue
    assert abs(p1.p_value - exact) < 0.03


def test_compare_to_baseline_and_single_seed_note():
    finals = pd.DataFrame({"regime": ["base"] * 4 + ["new"] * 5 + ["solo"], "val_loss": B + A + [6.5]})
    cmp = stats.compare_to_baseline(finals, "base").set_index("regime")
    ref = sps.ttest_ind(A, B, equal_var=False)
    assert cmp.loc["new", "welch_p"] == pytest.approx(ref.pvalue, rel=1e-10)
    assert cmp.loc["new", "diff"] == pytest.approx(np.mean(A) - np.mean(B))
    assert cmp.loc["solo", "note"] == "n = 1, no variance estimate"
    assert math.isnan(cmp.loc["solo", "welch_p"])
    with pytest.raises(ValueError, match="baseline regime 'nope'"):
        stats.compare_to_baseline(finals, "nope")


def test_paired_difference_curve_pairs_by_seed():
    rows = []
    for seed in (0, 1, 2):
        for step in (10, 20):
            rows.append({"regime": "base", "seed": seed, "step": step, "val_loss": 5.0 + seed + step / 100})
            rows.append(
                {"regime": "new", "seed": seed, "step": step, "val_loss": 5.0 + seed + step / 100 - 0.1 * (seed + 1)}
            )
    rows.append({"regime": "new", "seed": 9, "step": 10, "val_loss": 0.0})  # no partner: ignored
    curve = stats.paired_difference_curve(pd.DataFrame(rows), "new", "base")
    assert list(curve["step"]) == [10, 20]
    assert list(curve["n"]) == [3, 3]
    assert curve["mean_diff"].to_numpy() == pytest.approx([-0.2, -0.2])
    assert curve["std"].to_numpy() == pytest.approx([np.std([-0.1, -0.2, -0.3], ddof=1)] * 2)


def test_factorial_effects_isolate_each_covered_factor():
    means = {
        "full_adaptive": 6.50,
        "shallow_freeze": 6.40,
        "deep_practical_reuse": 6.45,
        "independent_scoring": 6.55,
        "control_off": 6.60,
        "grouping_off": 6.70,
    }
    rows = [{"regime": r, "val_loss": m + d} for r, m in means.items() for d in (-0.01, 0.0, 0.01)]
    eff = stats.factorial_effects(pd.DataFrame(rows)).set_index("factor")
    assert eff.loc["freeze", "effect"] == pytest.approx(means["deep_practical_reuse"] - means["full_adaptive"])
    assert eff.loc["hierarchy_refresh", "effect"] == pytest.approx(
        means["deep_practical_reuse"] - means["shallow_freeze"]
    )
    assert eff.loc["joint_scoring", "effect"] == pytest.approx(means["full_adaptive"] - means["independent_scoring"])
    assert eff.loc["window_control", "effect"] == pytest.approx(means["full_adaptive"] - means["control_off"])
    assert eff.loc["grouping", "effect"] == pytest.approx(means["independent_scoring"] - means["grouping_off"])
    assert eff["covered"].all()
    on = [means["full_adaptive"] + d for d in (-0.01, 0, 0.01)]
    off = [means["independent_scoring"] + d for d in (-0.01, 0, 0.01)]
    assert eff.loc["joint_scoring", "welch_p"] == pytest.approx(sps.ttest_ind(on, off, equal_var=False).pvalue)


def test_factorial_reports_uncovered_factors_and_confounding():
    rows = [{"regime": "full_adaptive", "val_loss": 6.5}, {"regime": "grouping_off", "val_loss": 6.6}]
    eff = stats.factorial_effects(pd.DataFrame(rows)).set_index("factor")
    # grouping_off also drops the joint scorer: grouping alone is not isolated
    assert not eff["covered"].any()
    assert eff.loc["grouping", "note"].startswith("not covered")
    rows = [{"regime": "full_adaptive", "val_loss": 6.5}, {"regime": "control_off", "val_loss": 6.6}]
    eff = stats.factorial_effects(pd.DataFrame(rows)).set_index("factor")
    assert eff.loc["window_control", "covered"]
    assert eff.loc["window_control", "note"] == "n = 1, no variance estimate"


def test_paired_sign_flip_matches_scipy():
    x = np.array([6.561, 6.552, 6.570, 6.549, 6.566, 6.558])
    y = x - np.array([0.011, 0.004, 0.020, -0.003, 0.015, 0.009])
    ours = significance.paired_permutation_test(x - y)
    ref = sps.permutation_test(
        (x, y),
        lambda a, b, axis=-1: np.mean(a - b, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf,
        vectorized=True,
    )
    assert ours.method == "paired sign-flip (exact)"
    assert ours.statistic == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)
    finals = pd.DataFrame(
        {"regime": ["base"] * 6 + ["new"] * 6, "seed": list(range(6)) * 2, "val_loss": list(y) + list(x)}
    )
    row = stats.compare_to_baseline(finals, "base").iloc[0]
    assert row["n_paired"] == 6 and row["paired_perm_p"] == pytest.approx(ref.pvalue, abs=1e-12)
