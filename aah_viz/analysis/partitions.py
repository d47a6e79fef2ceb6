"""Vectorised partition comparisons over many rows at once.

A partition is a row of integer labels, one per head. ``a`` and ``b`` are (M, n) arrays: row i of
``a`` is compared with row i of ``b``. Comparing thousands of routing updates one by one through
scikit-learn costs seconds; a batched contingency table costs milliseconds and gives the same
adjusted Rand index (tests check equality with ``sklearn.metrics.adjusted_rand_score``).
"""

from __future__ import annotations

import numpy as np


def _dense_labels(labels: np.ndarray) -> np.ndarray:
    """Map arbitrary labels (nulls as -1 included) to 0..k-1 per row, preserving equality."""
    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels must be a 2-D array (rows x heads), got shape {labels.shape}")
    if labels.size == 0:
        return labels.astype(np.int64)
    # rank within each row: equal labels get equal ranks
    order = np.argsort(labels, axis=1, kind="stable")
    sorted_vals = np.take_along_axis(labels, order, axis=1)
    new_group = np.ones_like(sorted_vals, dtype=bool)
    new_group[:, 1:] = sorted_vals[:, 1:] != sorted_vals[:, :-1]
    ranks_sorted = np.cumsum(new_group, axis=1) - 1
    dense = np.empty_like(ranks_sorted)
    np.put_along_axis(dense, order, ranks_sorted, axis=1)
    return dense.astype(np.int64)


def _comb2(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x * (x - 1.0) / 2.0


def _small_labels(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels as 0..k-1 with k small: shift when they already are small integers (group ids, -1 = null)."""
    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels must be a 2-D array (rows x heads), got shape {labels.shape}")
    if labels.size and np.issubdtype(labels.dtype, np.integer):
        lo, hi = int(labels.min()), int(labels.max())
        if hi - lo < 4 * labels.shape[1] + 4:
            return (labels - lo).astype(np.int64), hi - lo + 1
    return _dense_labels(labels), max(labels.shape[1], 1)


def contingency(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, k, k) contingency tables of row pairs, with the labels used: (cont, a', b')."""
    if np.shape(a) != np.shape(b):
        raise ValueError(f"partitions must have the same shape, got {np.shape(a)} and {np.shape(b)}")
    both, k = (
        _small_labels(np.concatenate([np.asarray(a), np.asarray(b)], axis=1))
        if np.size(a)
        else (np.zeros((0, 0), dtype=np.int64), 1)
    )
    n = np.shape(a)[1] if np.ndim(a) == 2 else 0
    a2, b2 = both[:, :n], both[:, n:]
    m = a2.shape[0]
    idx = (np.arange(m)[:, None] * k * k + a2 * k + b2).ravel()
    cont = np.bincount(idx, minlength=m * k * k).reshape(m, k, k)
    return cont, a2, b2


def ari_from_contingency(cont: np.ndarray, n: int) -> np.ndarray:
    """Adjusted Rand index of each (k, k') contingency table of ``cont`` over ``n`` items (scikit-learn's value)."""
    m = cont.shape[0]
    sum_comb = _comb2(cont).sum(axis=(1, 2))
    sum_a = _comb2(cont.sum(axis=2)).sum(axis=1)
    sum_b = _comb2(cont.sum(axis=1)).sum(axis=1)
    total = _comb2(np.full(m, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.where(total > 0, sum_a * sum_b / np.where(total > 0, total, 1), 0.0)
        max_index = (sum_a + sum_b) / 2.0
        denom = max_index - expected
        ari = np.where(denom != 0, (sum_comb - expected) / np.where(denom != 0, denom, 1), 1.0)
    return ari


def ari_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Adjusted Rand index between row i of ``a`` and row i of ``b`` (same convention as scikit-learn).

    Two partitions that are both all-singletons or both one group score 1.0, as in scikit-learn.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"partitions must be 2-D arrays of the same shape, got {a.shape} and {b.shape}")
    if a.shape[0] == 0:
        return np.zeros(0)
    cont, _, _ = contingency(a, b)
    return ari_from_contingency(cont, a.shape[1])


CHUNK_ROWS = 4096
MAX_MASK_HEADS = 52  # head bitmasks are summed in float64, exact below 2**53


def mate_masks(labels: np.ndarray) -> np.ndarray:
    """(M, n) uint64: bit j of entry (m, i) is set when heads i and j share a group in row m."""
    lab, k = _small_labels(labels)
    m, n = lab.shape
    bits = np.broadcast_to((2.0 ** np.arange(n)), (m, n))
    idx = np.arange(m)[:, None] * k + lab
    per_label = np.bincount(idx.ravel(), weights=bits.ravel(), minlength=m * k)
    return per_label.astype(np.uint64)[idx]


def _compare_by_masks(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = a.shape[1]
    ma, mb = mate_masks(a), mate_masks(b)
    changed = ma != mb
    # every head counts itself once: pairs = (sum of group-mate counts - n) / 2
    both = (np.bitwise_count(ma & mb).sum(axis=1, dtype=np.int64) - n) / 2.0
    sum_a = (np.bitwise_count(ma).sum(axis=1, dtype=np.int64) - n) / 2.0
    sum_b = (np.bitwise_count(mb).sum(axis=1, dtype=np.int64) - n) / 2.0
    total = n * (n - 1) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = sum_a * sum_b / total if total > 0 else np.zeros(len(a))
        denom = (sum_a + sum_b) / 2.0 - expected
        ari = np.where(denom != 0, (both - expected) / np.where(denom != 0, denom, 1), 1.0)
    return ari, changed


def compare_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ARI per row, (M, n) heads whose set of group-mates changed), from co-membership matrices.

    With E_a[i, j] = (a_i == a_j): pairs together in both partitions = (|E_a & E_b| - n) / 2, in
    ``a`` = (|E_a| - n) / 2, in ``b`` likewise, which is all the adjusted Rand index needs; head i
    changed mates when row i of E_a and E_b differ. Rows are processed in chunks to bound memory.
    Equal to :func:`ari_rows` (and scikit-learn) up to rounding.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"partitions must be 2-D arrays of the same shape, got {a.shape} and {b.shape}")
    m, n = a.shape
    if m == 0:
        return np.zeros(0), np.zeros((0, n), dtype=bool)
    if n <= MAX_MASK_HEADS:
        return _compare_by_masks(a, b)
    ari = np.zeros(m)
    changed = np.zeros((m, n), dtype=bool)
    for lo in range(0, m, CHUNK_ROWS):
        hi = min(m, lo + CHUNK_ROWS)
        ea = a[lo:hi, :, None] == a[lo:hi, None, :]
        eb = b[lo:hi, :, None] == b[lo:hi, None, :]
        changed[lo:hi] = (ea != eb).any(axis=2)
        both = (np.count_nonzero(ea & eb, axis=(1, 2)) - n) / 2.0
        sum_a = (np.count_nonzero(ea, axis=(1, 2)) - n) / 2.0
        sum_b = (np.count_nonzero(eb, axis=(1, 2)) - n) / 2.0
        total = n * (n - 1) / 2.0
        with np.errstate(divide="ignore", invalid="ignore"):
            expected = sum_a * sum_b / total if total > 0 else np.zeros(hi - lo)
            denom = (sum_a + sum_b) / 2.0 - expected
            ari[lo:hi] = np.where(denom != 0, (both - expected) / np.where(denom != 0, denom, 1), 1.0)
    return ari, changed


def co_membership(labels: np.ndarray) -> np.ndarray:
    """(M, n, n) booleans: heads i and j share a group in row m."""
    labels = _dense_labels(labels)
    return labels[:, :, None] == labels[:, None, :]


def heads_changing_group(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, n) booleans: the set of a head's group-mates differs between ``a`` and ``b``.

    Label-permutation invariant, unlike comparing raw group ids (which relabelling alone changes).
    """
    return compare_rows(a, b)[1]


def same_partition(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M,) booleans: rows describe the same partition up to relabelling."""
    return ~np.any(heads_changing_group(a, b), axis=1)
