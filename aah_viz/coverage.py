"""Coverage formulas in pure numpy, each naming its denominator.

* ``acr``: the paper's Attention Coverage Ratio (method §11.1): every head counts a T x w
  rectangle with w = min(T, max(W_min, W)), the baseline counts T x T per head. ACR equals the
  mean of w / T over (layers x) heads; full attention has ACR 1.
* ``causal_coverage``: attended causal query-key pairs over all causal pairs,
  sum_h sum_t min(t + 1, W_h) / (H T (T + 1) / 2). Full causal attention has coverage 1.
* ``flops_ratio_est``: the analytic FLOPs proxy of method §11.1 from an ACR value.

``sinks`` (the config key ``sink_tokens``, method §10.4, a named deviation): the first k positions stay visible to every
query besides its window, and each formula counts those pairs too: a windowed head's rectangle is
T x min(T, w + k), its band holds min(k, t - W + 1) more keys for every query t >= W.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ArrayLike = Sequence[int] | Sequence[Sequence[int]] | np.ndarray


def _windows_array(windows: ArrayLike, allow_empty: bool = False) -> np.ndarray:
    arr = np.asarray(windows, dtype=np.int64)
    if arr.size == 0 and not allow_empty:
        raise ValueError("coverage needs at least one window")
    return arr


def effective_windows(windows: ArrayLike, seq_len: int, w_min: int = 0, sinks: int = 0) -> np.ndarray:
    """w = min(T, max(W_min, W) + k) elementwise: the accounting windows of method §10.3, each with the
    ``sinks`` k first positions every query also sees (k = 0: the method's w = min(T, max(W_min, W)))."""
    arr = _windows_array(windows, allow_empty=True)
    w = np.maximum(int(w_min), arr)
    if sinks:
        w = np.where(w >= int(seq_len), w, w + int(sinks))
    return np.minimum(int(seq_len), w)


def acr(windows: ArrayLike, seq_len: int, w_min: int = 0, sinks: int = 0) -> float:
    """ACR of method §11.1: sum T*w over heads (and layers) / (heads * T^2) = mean(w) / T.

    ``windows`` holds executed windows in tokens: one per head, or a [layers][heads] table; with
    ``sinks``, each windowed head counts the first k positions too (``effective_windows``).
    """
    w = effective_windows(_windows_array(windows), seq_len, w_min, sinks)
    return float(w.sum() / (w.size * float(seq_len)))


def sink_pairs(seq_len: int, windows: ArrayLike, sinks: int) -> np.ndarray:
    """Causal pairs the ``sinks`` first positions add outside each band: sum over t >= W of min(k, t - W + 1)."""
    T, k = int(seq_len), max(0, int(sinks))
    w = np.clip(_windows_array(windows, allow_empty=True), 1, T)
    n = T - w  # queries beyond the band's reach of position 0; query W - 1 + j sees j positions left of its band
    low = np.minimum(n, k)
    return low * (low + 1) // 2 + (n - low) * k


def band_pairs(seq_len: int, windows: ArrayLike, sinks: int = 0) -> np.ndarray:
    """sum_t min(t + 1, W) for each window (clamped to 1..T): the causal pairs a head attends; with
    ``sinks``, plus the pairs of the first k positions outside each band (``sink_pairs``)."""
    T = int(seq_len)
    w = np.clip(_windows_array(windows, allow_empty=True), 1, T)
    pairs = w * (w + 1) // 2 + (T - w) * w
    return pairs + sink_pairs(T, w, sinks) if sinks else pairs


def causal_coverage(windows: ArrayLike, seq_len: int, sinks: int = 0) -> float:
    """Attended causal pairs / all causal pairs: sum_h sum_t |band_t(W_h) + sinks| / (H T (T+1) / 2)."""
    T = int(seq_len)
    pairs = band_pairs(T, _windows_array(windows), sinks)
    return float(pairs.sum() / (pairs.size * (T * (T + 1) / 2.0)))


def flops_ratio_est(acr_value: float, *, seq_len: int, n_embd: int, n_ff: int) -> float:
    """Method §11.1 flops_ratio: (attention estimate + non-attention) / (full attention + non-attention).

    With attention = L*4*B*T^2*d (times ACR) and non-attention = L*(8*B*T*d^2 + 4*B*T*d*n_ff), the
    batch and layer count cancel: ratio = (ACR * r + 1) / (r + 1) with r = T / (2 d + n_ff).
    For the 1B shape at T = 4096, r = 0.4444.
    """
    r = float(seq_len) / (2.0 * n_embd + n_ff)
    return (float(acr_value) * r + 1.0) / (r + 1.0)
