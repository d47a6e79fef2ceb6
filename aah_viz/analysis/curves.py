"""Curves of logged scalars as a researcher compares them: smoothing, other x axes (tokens, wall
time), a y range that outliers cannot flatten, and runs grouped into a mean with a band.

Pure numpy: arrays in, arrays out.
"""

from __future__ import annotations

import warnings

import numpy as np

BANDS = ("minmax", "std", "stderr", "ci95", "none")
BAND_NAMES = {
    "minmax": "min-max",
    "std": "± std dev",
    "stderr": "± std err",
    "ci95": "95% CI of the mean",
    "none": "none",
}
# bands that estimate a spread from the runs: with fewer than 3 runs they say little (Student's t at n = 2
# multiplies the standard error by 12.7)
ESTIMATED_BANDS = ("std", "stderr", "ci95")
FEW_RUNS = 3


def smooth(values, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average (weight 0 = raw values).

    ``ema_k = w·ema_{k-1} + (1-w)·v_k`` from ``ema_0 = 0``, shown as ``ema_k / (1 - w^k)`` (the bias
    of the zero start removed); a non-finite value is skipped and shows the running average.
    """
    values = np.asarray(values, dtype=np.float64)
    if weight <= 0 or len(values) == 0:
        return values
    out = np.empty_like(values)
    last, n = 0.0, 0
    for i, v in enumerate(values):
        if not np.isfinite(v):
            out[i] = last / (1 - weight**n) if n else np.nan
            continue
        last = last * weight + (1 - weight) * v
        n += 1
        out[i] = last / (1 - weight**n)
    return out


def step_bins(steps, max_points: int) -> np.ndarray:
    """Each row's bin: one per distinct step, or ``max_points`` bins of equal width over the steps when
    there are more distinct steps than that (a long run drawn at a bounded number of points)."""
    steps = np.asarray(steps)
    distinct = np.unique(steps)
    if len(distinct) > max_points:
        edges = np.linspace(distinct[0], distinct[-1], max_points + 1)
        return np.clip(np.searchsorted(edges, steps, side="right") - 1, 0, max_points - 1)
    return np.searchsorted(distinct, steps)


def cumulative(steps, per_step, start: int = 0) -> np.ndarray:
    """Running total of a per-step quantity logged at ``steps`` (tokens of a step, its seconds): each
    logged value stands for the steps since the previous logged one, the first for the steps from
    ``start``. Non-finite values count as the previous finite one (or 0)."""
    steps = np.asarray(steps, dtype=np.float64)
    vals = np.asarray(per_step, dtype=np.float64)
    if len(steps) == 0:
        return steps
    finite = np.isfinite(vals)
    if not finite.all():
        idx = np.where(finite, np.arange(len(vals)), -1)
        idx = np.maximum.accumulate(idx)
        vals = np.where(idx >= 0, vals[np.maximum(idx, 0)], 0.0)
    gaps = np.diff(steps, prepend=float(start) - 1.0)
    return np.cumsum(np.maximum(gaps, 0.0) * vals)


def robust_range(arrays, fence: float = 3.0, pad: float = 0.06, log: bool = False):
    """A y range that the few extreme values (the first losses of a run) cannot flatten: every finite
    value inside Tukey's far-out fences (``fence`` interquartile ranges beyond the middle half), the
    range of those values widened by ``pad`` of their span. A series without outliers keeps its
    whole range. None without data.

    On a log axis the fences are taken on log10 of the positive values and the range is in log10,
    as Plotly wants it."""
    parts = [np.asarray(a, dtype=np.float64).ravel() for a in arrays]
    values = np.concatenate(parts) if parts else np.empty(0)
    values = values[np.isfinite(values)]
    if log:
        values = np.log10(values[values > 0])
    if values.size == 0:
        return None
    q1, q3 = np.quantile(values, [0.25, 0.75])
    iqr = q3 - q1
    kept = values[(values >= q1 - fence * iqr) & (values <= q3 + fence * iqr)]
    lo, hi = float(kept.min()), float(kept.max())
    span = hi - lo
    if span <= 0:
        span = abs(hi) * 0.1 or 1.0
    return float(lo - pad * span), float(hi + pad * span)


def group_band(curves, band: str = "minmax", points: int = 400, domain: tuple[float, float] | None = None):
    """Runs of one group as a mean curve with a band, on a shared grid of ``points`` x values.

    ``curves``: list of (x, y) arrays, one per run. Each run is interpolated inside its own x range
    only (no run is extended beyond what it logged), so ``n`` at an x is the number of runs that
    reached it. Returns (x, mean, lower, upper, n); the band is the min and max over the runs
    (``minmax``), the mean ± the sample standard deviation (``std``) or the standard error s/√n
    (``stderr``), the mean ± t·s/√n with the 97.5% Student t quantile (``ci95``); no band where n = 1;
    or none (lower = upper = mean). ``domain`` (lo, hi) clips the band to the values the metric can take
    (a loss is never below 0, a coverage never above 1)."""
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves]
    curves = [(x[np.isfinite(y)], y[np.isfinite(y)]) for x, y in curves]
    curves = [(x[np.argsort(x, kind="stable")], y[np.argsort(x, kind="stable")]) for x, y in curves if len(x)]
    if not curves:
        empty = np.empty(0)
        return empty, empty, empty, empty, np.empty(0, dtype=np.int64)
    lo = min(float(x[0]) for x, _ in curves)
    hi = max(float(x[-1]) for x, _ in curves)
    if len(curves) == 1 and len(curves[0][0]) <= points:
        grid = curves[0][0]  # one run: its own points, not a resampling
    else:
        grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    rows = np.full((len(curves), len(grid)), np.nan)
    for i, (x, y) in enumerate(curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        rows[i, inside] = np.interp(grid[inside], x, y)
    n = np.isfinite(rows).sum(axis=0)
    with warnings.catch_warnings():  # grid points no run reached: 'mean of empty slice'
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(rows, axis=0)
        if band == "minmax":
            lower, upper = np.nanmin(rows, axis=0), np.nanmax(rows, axis=0)
        elif band in ESTIMATED_BANDS:
            sd = np.nanstd(rows, axis=0, ddof=1)
            half = {
                "std": lambda: sd,
                "stderr": lambda: sd / np.sqrt(np.maximum(n, 1)),
                "ci95": lambda: _t975(n) * sd / np.sqrt(np.maximum(n, 1)),
            }[band]()
            half = np.where(n > 1, half, 0.0)
            lower, upper = mean - half, mean + half
        elif band == "none":
            lower, upper = mean, mean
        else:
            raise ValueError(f"band must be one of {BANDS}, got {band!r}")
    if domain is not None:
        lower, upper = np.clip(lower, *domain), np.clip(upper, *domain)
    keep = n > 0
    return grid[keep], mean[keep], lower[keep], upper[keep], n[keep]


def _t975(n: np.ndarray) -> np.ndarray:
    """The 97.5% quantile of Student's t with n - 1 degrees of freedom (scipy's, where n > 1)."""
    from scipy import stats

    df = np.maximum(np.asarray(n, dtype=np.float64) - 1, 1)
    return stats.t.ppf(0.975, df)
