"""A share of successes with its interval (scipy's binomial test, Wilson's score interval)."""

from __future__ import annotations

from scipy.stats import binomtest

from aah_viz.stats.resampling import LEVEL


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of ``successes / n``: inside [0, 1] and not empty at 0 or n successes,
    unlike the normal approximation (a small n of retrieval questions is where that matters)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)
