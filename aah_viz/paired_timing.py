"""Paired, interleaved timing: the figure every ``aah-viz bench`` reports.

On a shared machine a single time says more about the neighbours than about the code. A
*pair* runs the two sides of a comparison back to back (the order alternating from pair to
pair), so both see nearly the same load; the figure is the **median of the per-pair ratios**,
with a seeded percentile-bootstrap 95% interval of that median and the number of pairs. An
interval wider than ``MAX_WIDTH`` comes with a warning: the machine was too busy for the figure
to be trusted, and more pairs (``--pairs``) or a quieter machine are needed.

Two clocks: ``wall`` (elapsed time) and ``cpu`` (CPU time of the whole process, all its threads).
On a shared CPU the process is descheduled at random, which inflates wall time but not CPU time,
so ``cpu`` is the steadier figure there; on a GPU only ``wall`` (with a device sync) means anything.
:func:`default_clock` picks by device; every report carries the figures of both clocks it has.

Pure and torch-free: the sides are callables that return the seconds they measured, as a float
(wall time) or a mapping ``{"wall": s, "cpu": s}``; :func:`timed` wraps a plain call.

    from aah_viz.paired_timing import interleave, paired_report, timed

    raw = interleave({"fast_vs_slow": (timed(fast), timed(slow))}, pairs=9)
    doc = paired_report(raw, sides={"fast_vs_slow": ("fast", "slow")}, clock="cpu")
    doc["ratios"]["fast_vs_slow"]  # {"median", "ci95", "n_pairs", "width", "warning"}
    doc["raw_s"]["fast_vs_slow"]  # {"wall": {"fast": [s, ...], "slow": [...]}, "cpu": {...}}
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aah_viz.errors import ConfigError
from aah_viz.stats.resampling import bootstrap_ci

DEFAULT_PAIRS = 9
MIN_PAIRS = 2
MAX_WIDTH = 0.1  # a wider 95% interval is reported as untrustworthy
LEVEL = 0.95
N_BOOT = 4000
SEED = 0

CLOCKS = ("wall", "cpu")

Measurement = float | Mapping[str, float]
Side = Callable[[], Measurement]


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
    lo, hi = bootstrap_ci(ratios, statistic=np.median, n_boot=n_boot, level=level, seed=seed)
    warning = None
    if n < DEFAULT_PAIRS:
        warning = f"only {n} pairs (at least {DEFAULT_PAIRS} recommended)"
    elif hi - lo > max_width:
        warning = f"95% interval [{lo:.3f}, {hi:.3f}] is wider than {max_width}: a busy machine; use more pairs"
    return PairedRatio(float(np.median(ratios)), lo, hi, n, warning, level)


def timed(
    fn: Callable[[], object],
    *,
    sync: Callable[[], object] | None = None,
    setup: Callable[[], object] | None = None,
) -> Side:
    """A side that calls ``fn`` and returns its wall and process CPU time (``sync`` runs before and after,
    e.g. a device synchronisation; ``setup`` runs before the clocks start, e.g. to put ``fn``'s inputs in
    the state a real call finds them in)."""

    def side() -> dict:
        if setup is not None:
            setup()
        if sync is not None:
            sync()
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        if sync is not None:
            sync()
        return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}

    return side


def default_clock(device: str = "cpu") -> str:
    """``cpu`` for work on the CPU (steady on a shared machine), ``wall`` for an accelerator."""
    return "cpu" if str(device).split(":")[0] == "cpu" else "wall"


def interleave(
    comparisons: Mapping[str, tuple[Side, Side]],
    *,
    pairs: int = DEFAULT_PAIRS,
    warmup: int = 1,
    progress=None,
) -> dict[str, tuple[list[float], list[float]]]:
    """Run ``pairs`` timed rounds (after ``warmup`` untimed ones); in each round every comparison runs its
    two sides back to back, numerator first in even rounds and denominator first in odd ones.

    Returns comparison -> (numerator measurements, denominator measurements), one per pair. ``progress``
    (a tqdm-like object) is advanced once per round.
    """
    if pairs < MIN_PAIRS:
        raise ValueError(f"pairs must be at least {MIN_PAIRS}, got {pairs}")
    raw: dict[str, tuple[list, list]] = {name: ([], []) for name in comparisons}
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
                raw[name][0].append(a)
                raw[name][1].append(b)
        if progress is not None:
            progress.update(1)
    return raw


def round_robin(
    sides: Mapping[str, Side],
    *,
    pairs: int = DEFAULT_PAIRS,
    warmup: int = 1,
    progress=None,
) -> dict[str, list[Measurement]]:
    """Run every side once per round, in the given order in even rounds and reversed in odd ones, for
    ``pairs`` timed rounds after ``warmup`` untimed ones: any two sides measured in the same round form a
    pair, so one round serves every comparison among them (see :func:`pairs_of`).

    Returns side -> one measurement per timed round. ``progress`` is advanced once per round.
    """
    if pairs < MIN_PAIRS:
        raise ValueError(f"pairs must be at least {MIN_PAIRS}, got {pairs}")
    names = list(sides)
    times: dict[str, list] = {name: [] for name in names}
    for rnd in range(warmup + pairs):
        for name in names if rnd % 2 == 0 else reversed(names):
            m = sides[name]()
            if rnd >= warmup:
                times[name].append(m)
        if progress is not None:
            progress.update(1)
    return times


def pairs_of(
    times: Mapping[str, Sequence[Measurement]], comparisons: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[Sequence[Measurement], Sequence[Measurement]]]:
    """comparison -> (numerator side's times, denominator side's times), for :func:`paired_report`; a
    comparison naming a side that was not measured is left out."""
    return {key: (times[a], times[b]) for key, (a, b) in comparisons.items() if a in times and b in times}


def by_clock(measurements: Sequence[Measurement]) -> dict[str, list[float]]:
    """Per-clock lists of seconds (a bare float is a wall time); only clocks every measurement has."""
    rows = [{"wall": m} if isinstance(m, int | float) else m for m in measurements]
    clocks = [c for c in CLOCKS if rows and all(c in r for r in rows)]
    return {c: [float(r[c]) for r in rows] for c in clocks}


def paired_report(
    raw: Mapping[str, tuple[Sequence[Measurement], Sequence[Measurement]]],
    *,
    sides: Mapping[str, tuple[str, str]] | None = None,
    clock: str = "wall",
    max_width: float = MAX_WIDTH,
    seed: int = SEED,
    digits: int = 4,
) -> dict:
    """JSON-ready figures of every comparison.

    ``ratios``: by ``clock``, each {median, ci95, n_pairs, width, warning}; ``ratios_by_clock``: the
    same for every clock measured; ``raw_s``: every pair's seconds per clock, under the side names of
    ``sides`` (default ``numerator``/``denominator``); ``warnings``: one line per comparison whose
    ``clock`` figure cannot be trusted.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    ratios, raw_s, warnings = {}, {}, []
    ratios_by_clock: dict[str, dict] = {}
    for name, (num, den) in raw.items():
        a_name, b_name = (sides or {}).get(name, ("numerator", "denominator"))
        num_c, den_c = by_clock(num), by_clock(den)
        raw_s[name] = {}
        for c in [c for c in CLOCKS if c in num_c and c in den_c]:
            fig = paired_ratio(num_c[c], den_c[c], max_width=max_width, seed=seed)
            ratios_by_clock.setdefault(c, {})[name] = fig.to_json(digits)
            raw_s[name][c] = {a_name: num_c[c], b_name: den_c[c]}
            if c == clock:
                ratios[name] = fig.to_json(digits)
                if fig.warning:
                    warnings.append(f"{name}: {fig.warning}")
        if name not in ratios:
            raise ValueError(f"{name}: no {clock!r} times measured")
    return {"clock": clock, "ratios": ratios, "ratios_by_clock": ratios_by_clock, "raw_s": raw_s, "warnings": warnings}


def add_pairs_argument(parser, default: int = DEFAULT_PAIRS) -> None:
    """The ``--pairs`` flag every benchmark shares."""
    parser.add_argument(
        "--pairs",
        type=int,
        default=default,
        help=f"timed pairs per comparison, each running both sides back to back after one untimed round "
        f"(default {default}; the figure is the median per-pair ratio with a bootstrap 95%% interval)",
    )


def add_clock_argument(parser) -> None:
    """The ``--clock`` flag every benchmark shares."""
    parser.add_argument(
        "--clock",
        choices=("auto",) + CLOCKS,
        default="auto",
        help="which time the figures use: wall (elapsed) or cpu (process CPU time, steady when other processes "
        "share the cores); auto: cpu on a CPU device, wall on an accelerator (default auto); both are in the JSON",
    )


def resolve_clock(clock: str, device: str = "cpu") -> str:
    return default_clock(device) if clock == "auto" else clock


def check_pairs(pairs: int) -> int:
    """``--pairs`` as given, or a ``ConfigError`` when there are too few to form an interval."""
    if pairs < MIN_PAIRS:
        raise ConfigError(f"--pairs {pairs}: at least {MIN_PAIRS} pairs are needed for an interval")
    return pairs
