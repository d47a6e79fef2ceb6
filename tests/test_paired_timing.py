"""The paired-timing harness: per-pair ratio medians, their bootstrap intervals, the interleaving."""

import statistics
import time

import numpy as np
import pytest
from scipy.stats import binom

from aah_viz.paired_timing import (
    DEFAULT_PAIRS,
    default_clock,
    interleave,
    pair_ratios,
    paired_ratio,
    paired_report,
    pairs_of,
    round_robin,
    timed,
)
from aah_viz.stats.resampling import bootstrap_ci


def test_the_figure_is_the_median_of_per_pair_ratios_not_a_ratio_of_medians():
    # the machine got busy from pair 5 on and slowed both sides; the busy spell began inside pair 5
    num = [1.0, 1.1, 0.9, 1.0, 5.0, 5.2, 4.8, 5.1, 5.0]
    den = [2.0, 2.1, 1.9, 2.0, 2.0, 10.0, 9.8, 10.2, 10.1]
    by_hand = [a / b for a, b in zip(num, den)]
    fig = paired_ratio(num, den)
    assert fig.median == pytest.approx(statistics.median(by_hand))
    assert list(pair_ratios(num, den)) == pytest.approx(by_hand)
    assert fig.n_pairs == 9
    assert fig.median != pytest.approx(statistics.median(num) / statistics.median(den))


def _exact_bootstrap_median_quantile(values, q):
    """The q-quantile of the exact bootstrap distribution of the median of an odd-sized sample.

    The resampled median is <= x_(j) exactly when at least (n+1)/2 of the n draws are <= x_(j), and
    the number of such draws is Binomial(n, j/n); no random numbers involved.
    """
    xs = sorted(values)
    n = len(xs)
    cdf = [binom.sf((n + 1) // 2 - 1, n, j / n) for j in range(1, n + 1)]
    j = next(i for i, c in enumerate(cdf) if c >= q)
    return xs[j], cdf


def test_bootstrap_interval_matches_the_exact_bootstrap_distribution_of_the_median():
    rng = np.random.default_rng(7)
    values = list(rng.lognormal(mean=-0.7, sigma=0.15, size=11))
    lo_exact, cdf = _exact_bootstrap_median_quantile(values, 0.025)
    hi_exact, _ = _exact_bootstrap_median_quantile(values, 0.975)
    # the exact CDF is well away from both tail levels, so Monte-Carlo error cannot move the endpoint
    assert min(abs(c - q) for c in cdf for q in (0.025, 0.975)) > 0.01
    lo, hi = bootstrap_ci(values, statistic=np.median, n_boot=20000, seed=3)
    assert (lo, hi) == (lo_exact, hi_exact)


def test_interval_is_seeded_and_covers_a_known_ratio():
    rng = np.random.default_rng(0)
    covered = 0
    sims = 200
    for i in range(sims):
        den = rng.uniform(1.0, 3.0, size=15)  # the load changes from pair to pair
        num = 0.5 * den * rng.lognormal(0.0, 0.1, size=15)  # true ratio 0.5, median noise factor 1
        fig = paired_ratio(num, den, seed=i)
        assert fig.ci_low <= fig.median <= fig.ci_high
        covered += fig.ci_low <= 0.5 <= fig.ci_high
    assert 0.85 <= covered / sims <= 1.0
    again = paired_ratio(num, den, seed=sims - 1)
    assert (again.ci_low, again.ci_high) == (fig.ci_low, fig.ci_high)


def test_a_wide_interval_or_too_few_pairs_warns_and_a_tight_one_does_not():
    den = [1.0] * 11
    tight = paired_ratio([0.50, 0.51, 0.49, 0.50, 0.50, 0.52, 0.48, 0.50, 0.51, 0.49, 0.50], den)
    assert tight.warning is None and tight.width < 0.1
    wide = paired_ratio([0.3, 0.9, 0.5, 1.1, 0.4, 0.8, 0.6, 0.35, 1.0, 0.45, 0.7], den)
    assert wide.width > 0.1 and "wider than 0.1" in wide.warning
    few = paired_ratio([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
    assert f"at least {DEFAULT_PAIRS}" in few.warning
    with pytest.raises(ValueError):
        pair_ratios([1.0, 2.0], [1.0])


def _logged_sides():
    """(log, side): ``side(name)`` is a run that appends ``name`` to ``log`` and returns the next tick of
    one clock shared by every side (1.0, 2.0, ...), so the times say the order the runs ran in."""
    log = []
    clock = iter(range(1, 1000))

    def side(name):
        def run():
            log.append(name)
            return float(next(clock))

        return run

    return log, side


def test_interleave_runs_both_sides_back_to_back_alternating_and_skips_the_warmup():
    log, side = _logged_sides()

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    bar = Bar()
    raw = interleave({"x": (side("a"), side("b"))}, pairs=3, warmup=1, progress=bar)
    assert log == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert raw["x"] == ([4.0, 5.0, 8.0], [3.0, 6.0, 7.0])  # round 0 (values 1, 2) was the warm-up
    assert bar.n == 4
    with pytest.raises(ValueError):
        interleave({"x": (side("a"), side("b"))}, pairs=1)


def test_round_robin_runs_every_side_once_per_round_reversing_the_order_and_pairs_any_two():
    log, side = _logged_sides()
    times = round_robin({n: side(n) for n in "abc"}, pairs=2, warmup=1)
    assert log == list("abc" + "cba" + "abc")
    assert times == {"a": [6.0, 7.0], "b": [5.0, 8.0], "c": [4.0, 9.0]}
    raw = pairs_of(times, {"a_vs_c": ("a", "c"), "a_vs_z": ("a", "z")})
    assert raw == {"a_vs_c": ([6.0, 7.0], [4.0, 9.0])}
    doc = paired_report(raw, sides={"a_vs_c": ("a", "c")})
    assert doc["ratios"]["a_vs_c"]["median"] == pytest.approx(statistics.median([6 / 4, 7 / 9]), abs=1e-4)
    with pytest.raises(ValueError):
        round_robin({"a": side("a")}, pairs=1)


def test_report_keeps_raw_times_under_side_names_and_lists_warnings():
    raw = {"fast_vs_slow": ([1.0] * 9, [2.0] * 9), "noisy": ([0.3, 0.9, 0.5, 1.1, 0.4, 0.8, 0.6, 0.35, 1.0], [1.0] * 9)}
    doc = paired_report(raw, sides={"fast_vs_slow": ("fast", "slow")})
    assert doc["clock"] == "wall"
    assert doc["ratios"]["fast_vs_slow"] == {
        "median": 0.5,
        "ci95": [0.5, 0.5],
        "n_pairs": 9,
        "width": 0.0,
        "warning": None,
    }
    assert doc["raw_s"]["fast_vs_slow"] == {"wall": {"fast": [1.0] * 9, "slow": [2.0] * 9}}
    assert doc["raw_s"]["noisy"]["wall"]["denominator"] == [1.0] * 9
    assert len(doc["warnings"]) == 1 and doc["warnings"][0].startswith("noisy:")


def test_report_gives_each_clock_its_own_figure_and_uses_the_chosen_one():
    # wall time doubled by a busy neighbour in two pairs; CPU time did not move
    wall_a, wall_b = [1, 1, 2, 1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2, 4, 2, 2]
    cpu_a, cpu_b = [1.0] * 9, [4.0] * 9
    num = [{"wall": w, "cpu": c} for w, c in zip(wall_a, cpu_a)]
    den = [{"wall": w, "cpu": c} for w, c in zip(wall_b, cpu_b)]
    doc = paired_report({"x": (num, den)}, clock="cpu")
    assert doc["ratios"]["x"]["median"] == 0.25
    assert doc["ratios_by_clock"]["cpu"]["x"]["median"] == 0.25
    assert doc["ratios_by_clock"]["wall"]["x"]["median"] == statistics.median(a / b for a, b in zip(wall_a, wall_b))
    assert doc["raw_s"]["x"]["cpu"]["numerator"] == cpu_a
    with pytest.raises(ValueError):
        paired_report({"x": ([1.0] * 3, [1.0] * 3)}, clock="cpu")  # only wall times were measured


def test_timed_runs_setup_before_the_clocks_start():
    calls, marks = [], {}

    def setup():
        calls.append("setup")
        time.sleep(0.05)  # a setup inside the clocks would show in the wall time
        marks["setup_done"] = time.perf_counter()

    side = timed(lambda: calls.append("fn"), sync=lambda: calls.append("sync"), setup=setup)
    m = side()
    returned = time.perf_counter()
    assert calls == ["setup", "sync", "fn", "sync"]
    # the clocks stopped before `returned`, so they started after the setup ended
    assert m["wall"] <= returned - marks["setup_done"]


def test_timed_measures_both_clocks_and_the_default_clock_follows_the_device():
    calls = []
    side = timed(lambda: calls.append(sum(range(20000))), sync=lambda: calls.append("sync"))
    m = side()
    assert set(m) == {"wall", "cpu"} and m["wall"] >= 0 and m["cpu"] >= 0
    assert calls[0] == "sync" and calls[-1] == "sync" and len(calls) == 3
    assert default_clock("cpu") == "cpu" and default_clock("cuda:0") == "wall"
