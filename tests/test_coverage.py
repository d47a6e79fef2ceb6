"""Coverage formulas (method §11.1): ACR with its T^2 denominator, causal-pair coverage, flops ratio."""

import numpy as np
import pytest

from aah_viz.coverage import acr, band_pairs, causal_coverage, effective_windows, flops_ratio_est


def test_worked_example_7_acr():
    windows = [[512, 512, 1024, 4096], [512, 512, 1024, 4096]]
    assert acr(windows, 4096, w_min=64) == pytest.approx(0.375)


def test_acr_is_mean_of_w_over_t_with_w_min_clamp():
    rng = np.random.default_rng(0)
    w = rng.choice([2, 8, 16, 64, 100], size=(3, 12))
    expected = np.mean(np.minimum(64, np.maximum(4, w)) / 64)
    assert acr(w, 64, w_min=4) == pytest.approx(expected)
    assert effective_windows([2, 100], 64, 4).tolist() == [4, 64]


def test_full_attention_has_acr_and_causal_coverage_one():
    assert acr([64] * 12, 64) == 1.0
    assert causal_coverage([64] * 12, 64) == 1.0
    assert causal_coverage([1000], 64) == 1.0


def _brute_causal_pairs(T, W):
    return sum(1 for t in range(T) for s in range(T) if s <= t and s >= t - W + 1)


@pytest.mark.parametrize("T,W", [(8, 3), (16, 1), (16, 16), (10, 4), (64, 8)])
def test_band_pairs_counts_the_causal_band(T, W):
    assert int(band_pairs(T, [W])[0]) == _brute_causal_pairs(T, W)


def test_causal_coverage_formula():
    T, wins = 32, [4, 8, 32]
    expected = sum(_brute_causal_pairs(T, w) for w in wins) / (len(wins) * T * (T + 1) / 2)
    assert causal_coverage(wins, T) == pytest.approx(expected)
    # The two denominators differ: ACR counts rectangles over T^2, coverage counts the causal band.
    assert acr(wins, T) != pytest.approx(causal_coverage(wins, T))


def test_flops_ratio_of_the_1b_shape():
    for a in (0.25, 0.375, 1.0):
        r = flops_ratio_est(a, seq_len=4096, n_embd=1536, n_ff=6144)
        assert r == pytest.approx((4096 / 9216 * a + 1) / (4096 / 9216 + 1))
    assert flops_ratio_est(1.0, seq_len=4096, n_embd=1536, n_ff=6144) == pytest.approx(1.0)
    assert flops_ratio_est(0.375, seq_len=4096, n_embd=1536, n_ff=6144) == pytest.approx(
        (0.4444 * 0.375 + 1) / 1.4444, abs=1e-4
    )


def test_empty_windows_is_an_error():
    with pytest.raises(ValueError):
        acr([], 64)
