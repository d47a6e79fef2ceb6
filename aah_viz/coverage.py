"""Coverage formulas in pure numpy, each naming its denominator.

* ``acr``: the paper's Attention Coverage Ratio (method §11.1): every head counts a T x w
  rectangle with w = min(T, max(W_min, W)), the baseline counts T x T per head. ACR equals the
  mean of w / T over (layers x) heads; full attention has ACR 1.
* ``causal_coverage``: attended causal query-key pairs over all causal pairs,
  sum_h sum_t min(t + 1, W_h) / (H T (T + 1) / 2). Full causal attention has coverage 1.
* ``flops_ratio_est``: the analytic FLOPs proxy of method §11.1 from an ACR value.
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


def effective_windows(windows: ArrayLike, seq_len: int, w_min: int = 0) -> np.ndarray:
    """w = min(T, max(W_min, W)) elementwise: the accounting windows of method §10.3."""
    arr = _windows_array(windows, allow_empty=True)
    return np.minimum(int(seq_len), np.maximum(int(w_min), arr))


def acr(windows: ArrayLike, seq_len: int, w_min: int = 0) -> float:
    """ACR of method §11.1: sum T*w over heads (and layers) / (heads * T^2) = mean(w) / T.

    ``windows`` holds executed windows in tokens: one per head, or a [layers][heads] table.
    """
    w = effective_windows(_windows_array(windows), seq_len, w_min)
    return float(w.sum() / (w.size * float(seq_len)))


def band_pairs(seq_len: int, windows: ArrayLike) -> np.ndarray:
    """sum_t min(t + 1, W) for each window (clamped to 1..T): the causal pairs a head attends."""
    T = int(seq_len)
    w = np.clip(_windows_array(windows, allow_empty=True), 1, T)
    return w * (w + 1) // 2 + (T - w) * w


def causal_coverage(windows: ArrayLike, seq_len: int) -> float:
    """Attended causal pairs / all causal pairs: sum_h sum_t min(t+1, W_h) / (H T (T+1) / 2)."""
    T = int(seq_len)
    pairs = band_pairs(T, _windows_array(windows))
    return float(pairs.sum() / (pairs.size * (T * (T + 1) / 2.0)))


def flops_ratio_est(acr_value: float, *, seq_len: int, n_embd: int, n_ff: int) -> float:
    """Method §11.1 flops_ratio: (attention estimate + non-attention) / (full attention + non-attention).

    With attention = L*4*B*T^2*d (times ACR) and non-attention = L*(8*B*T*d^2 + 4*B*T*d*n_ff), the
    batch and layer count cancel: ratio = (ACR * r + 1) / (r + 1) with r = T / (2 d + n_ff).
    For the 1B shape at T = 4096, r = 0.4444.
    """
    r = float(seq_len) / (2.0 * n_embd + n_ff)
    return (float(acr_value) * r + 1.0) / (r + 1.0)
