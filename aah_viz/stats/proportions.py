"""A share of successes with its interval (Wilson's score interval)."""

from __future__ import annotations

import math
from statistics import NormalDist

from aah_viz.stats.resampling import LEVEL


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of ``successes / n``: inside [0, 1] and not empty at 0 or n successes,
    unlike the normal approximation (a small n of retrieval questions is where that matters).

    Written out with the standard library's normal quantile rather than through scipy.stats (its
    distributions go through scipy's array-API layer, which looks for torch: the light side runs
    where torch is absent or hidden)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
