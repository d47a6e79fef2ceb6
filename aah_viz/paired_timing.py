"""Paired, interleaved timing: the figure every ``aah-viz bench`` reports.

On a shared machine a single time says more about the neighbours than about the code. A
*pair* runs the two sides of a comparison back to back (the order alternating from pair to
pair), so both see nearly the same load; the figure is the **median of the per-pair ratios**,
with a seeded percentile-bootstrap 95% interval of that median and the number of pairs. An
interval wider than ``MAX_WIDTH`` comes with a warning: the machine was too busy for the figure
to be trusted, and more pairs (``--pairs``) or a quieter machine are needed.

Pure and torch-free: the sides are callables that return the seconds they measured (the caller
decides what is timed and how a device is synchronised); :func:`timed` wraps a plain call.

    from aah_viz.paired_timing import interleave, paired_report, timed

    raw = interleave({"fast_vs_slow": (timed(fast), timed(slow))}, pairs=9)
    doc = paired_report(raw, sides={"fast_vs_slow": ("fast", "slow")})
    doc["ratios"]["fast_vs_slow"]  # {"median", "ci95", "n_pairs", "width", "warning"}
    doc["raw_s"]["fast_vs_slow"]  # {"fast": [s, ...], "slow": [s, ...]}: every pair's times
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_PAIRS = 9
MIN_PAIRS = 2
MAX_WIDTH = 0.1  # a wider 95% interval is reported as untrustworthy
LEVEL = 0.95
N_BOOT = 4000
SEED = 0

Side = Callable[[], float]


@dataclass(frozen=True)
class PairedRatio:
    """Median of per-pair ratios numerator / denominator, its bootstrap interval and the pair count."""

    median: float
    ci_low: float
    ci_high: float
    n_pairs: int
    warning: str | None = None
    level: float = LEVEL

    @property
    def width(self) -> float:
        return self.ci_high - self.ci_low

    def to_json(self, digits: int = 4) -> dict:
        def r(x: float) -> float | None:
            return None if not math.isfinite(x) else round(x, digits)

        return {
            "median": r(self.median),
            "ci95": [r(self.ci_low), r(self.ci_high)],
            "n_pairs": self.n_pairs,
            "width": r(self.width),
            "warning": self.warning,
        }


def pair_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> np.ndarray:
    """Ratio of each pair, in order; the two sequences must have one time per pair each."""
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired times need equal lengths, got {a.shape} and {b.shape}")
    return a / b


def bootstrap_median_ci(
    values: Sequence[float], *, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median (resampling with replacement, ``default_rng(seed)``)."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    medians = np.median(arr[rng.integers(0, arr.size, size=(n_boot, arr.size))], axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def paired_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    max_width: float = MAX_WIDTH,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> PairedRatio:
    """The figure of one comparison: median per-pair ratio, bootstrap interval, a warning if it is wide."""
    ratios = pair_ratios(numerator, denominator)
    n = int(ratios.size)
    if n == 0:
        return PairedRatio(math.nan, math.nan, math.nan, 0, "no pairs measured", level)
    lo, hi = bootstrap_median_ci(ratios, n_boot=n_boot, level=level, seed=seed)
    warning = None
    if n < DEFAULT_PAIRS:
        warning = f"only {n} pairs (at least {DEFAULT_PAIRS} recommended)"
    elif hi - lo > max_width:
        warning = f"95% interval [{lo:.3f}, {hi:.3f}] is wider than {max_width}: a busy machine; use more pairs"
    return PairedRatio(float(np.median(ratios)), lo, hi, n, warning, level)


def timed(fn: Callable[[], object], *, sync: Callable[[], object] | None = None) -> Side:
    """A side that calls ``fn`` and returns its wall time (``sync`` runs before and after, e.g. a device sync)."""

    def side() -> float:
        if sync is not None:
            sync()
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        return time.perf_counter() - start

    return side


def interleave(
    comparisons: Mapping[str, tuple[Side, Side]],
    *,
    pairs: int = DEFAULT_PAIRS,
    warmup: int = 1,
    progress=None,
) -> dict[str, tuple[list[float], list[float]]]:
    """Run ``pairs`` timed rounds (after ``warmup`` untimed ones); in each round every comparison runs its
    two sides back to back, numerator first in even rounds and denominator first in odd ones.

    Returns comparison -> (numerator times, denominator times), one entry per pair. ``progress``
    (a tqdm-like object) is advanced once per round.
    """
    if pairs < MIN_PAIRS:
        raise ValueError(f"pairs must be at least {MIN_PAIRS}, got {pairs}")
    raw = {name: ([], []) for name in comparisons}
    for rnd in range(warmup + pairs):
        timed_round = rnd >= warmup
        for name, (num, den) in comparisons.items():
            if rnd % 2 == 0:
                a = num()
                b = den()
            else:
                b = den()
                a = num()
            if timed_round:
                raw[name][0].append(float(a))
                raw[name][1].append(float(b))
        if progress is not None:
            progress.update(1)
    return raw


def paired_report(
    raw: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    sides: Mapping[str, tuple[str, str]] | None = None,
    max_width: float = MAX_WIDTH,
    seed: int = SEED,
    digits: int = 4,
) -> dict:
    """JSON-ready figures of every comparison: ``ratios`` (median, ci95, n_pairs, width, warning),
    ``raw_s`` (every pair's times, under the side names of ``sides`` or ``numerator``/``denominator``)
    and ``warnings`` (one line per comparison whose figure cannot be trusted)."""
    ratios, raw_s, warnings = {}, {}, []
    for name, (num, den) in raw.items():
        fig = paired_ratio(num, den, max_width=max_width, seed=seed)
        ratios[name] = fig.to_json(digits)
        a_name, b_name = (sides or {}).get(name, ("numerator", "denominator"))
        raw_s[name] = {a_name: [float(x) for x in num], b_name: [float(x) for x in den]}
        if fig.warning:
            warnings.append(f"{name}: {fig.warning}")
    return {"ratios": ratios, "raw_s": raw_s, "warnings": warnings}


def add_pairs_argument(parser, default: int = DEFAULT_PAIRS) -> None:
    """The ``--pairs`` flag every benchmark shares."""
    parser.add_argument(
        "--pairs",
        type=int,
        default=default,
        help=f"timed pairs per comparison, each running both sides back to back after one untimed round "
        f"(default {default}; the figure is the median per-pair ratio with a bootstrap 95%% interval)",
    )


def check_pairs(pairs: int) -> int:
    """``--pairs`` as given, or a ``ConfigError`` when there are too few to form an interval."""
    if pairs < MIN_PAIRS:
        from aah_viz.errors import ConfigError

        raise ConfigError(f"--pairs {pairs}: at least {MIN_PAIRS} pairs are needed for an interval")
    return pairs
