"""Partition agreement for many labelings at once: ARI, NMI and V-measure as scikit-learn defines them.

A permutation null needs hundreds of scores per comparison; calling scikit-learn for each costs
seconds, one batched contingency table costs milliseconds. Tests check equality with
``sklearn.metrics`` (including its conventions for one-cluster and all-singleton partitions).
"""

from __future__ import annotations

import numpy as np

from aah_viz.analysis.partitions import ari_from_contingency


def _dense(labels: np.ndarray) -> tuple[np.ndarray, int]:
    _, inverse = np.unique(labels, return_inverse=True)
    return inverse.reshape(labels.shape), int(inverse.max()) + 1 if inverse.size else 0


def contingency(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(P, ka, kb) counts for rows of ``a`` (P, n) against one labeling ``b`` (n,)."""
    a = np.atleast_2d(a)
    da, ka = _dense(a)
    db, kb = _dense(np.asarray(b))
    onehot_a = np.eye(ka, dtype=np.float64)[da]  # (P, n, ka)
    onehot_b = np.eye(kb, dtype=np.float64)[db]  # (n, kb)
    return np.einsum("pnk,nj->pkj", onehot_a, onehot_b)


def _entropy(counts: np.ndarray, n: float) -> np.ndarray:
    p = counts / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0.0), axis=-1)


def scores(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """ARI, NMI (arithmetic mean) and V-measure of each row of ``a`` (labels_true) against ``b``."""
    c = contingency(a, b)
    n = float(c[0].sum())
    rows, cols = c.sum(axis=2), c.sum(axis=1)  # (P, ka), (P, kb)
    ari = ari_from_contingency(c, int(n))  # the one ARI of the toolkit (analysis.partitions)
    # mutual information and entropies
    with np.errstate(divide="ignore", invalid="ignore"):
        outer = rows[:, :, None] * cols[:, None, :]
        term = np.where(c > 0, (c / n) * np.log(np.where(c > 0, c * n, 1) / np.where(outer > 0, outer, 1)), 0.0)
    mi = np.maximum(term.sum(axis=(1, 2)), 0.0)
    h_a, h_b = _entropy(rows, n), _entropy(cols, n)
    ka = (rows > 0).sum(axis=1)
    kb = (cols > 0).sum(axis=1)
    both_single = (ka == 1) & (kb == 1)
    normalizer = np.maximum((h_a + h_b) / 2.0, np.finfo(np.float64).eps)
    nmi = np.where(both_single, 1.0, mi / normalizer)
    with np.errstate(divide="ignore", invalid="ignore"):
        homogeneity = np.where(h_a == 0, 1.0, mi / np.where(h_a == 0, 1, h_a))
        completeness = np.where(h_b == 0, 1.0, mi / np.where(h_b == 0, 1, h_b))
        v = np.where(
            homogeneity + completeness == 0,
            0.0,
            2 * homogeneity * completeness / np.where(homogeneity + completeness == 0, 1, homogeneity + completeness),
        )
    return {"ari": ari, "nmi": nmi, "v_measure": v}
