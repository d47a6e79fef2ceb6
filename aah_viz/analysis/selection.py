"""Statistics for claims about the *best* of many heads: selection-aware scores and nulls.

A probe scores every head on the same items and reports the best one. The best of 270 noisy
accuracies is optimistic, so a claim about it needs statistics that know a head was chosen (the
interval of every head's accuracy is ``aah_viz.stats.resampling.cluster_bootstrap_interval``, the
adjusted p ``aah_viz.stats.significance.adjusted_p``):

- :func:`split_half_best`: the best column chosen on a random half of the clusters and scored on the
  other half (both ways round, averaged over splits): an honest estimate of what the chosen head does
  on items it was not chosen on;
- :func:`max_null`: a permutation null for the best column. Within each item the gold label is moved
  at random among the item's choices (which candidate is right is shuffled, what each head picked is
  kept), every head is rescored and the best of all heads taken, per draw. The adjusted p of the
  observed best accuracy then accounts for the choice among all heads.

Pure numpy and scipy; every random draw comes from the generator passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from aah_viz.stats.resampling import as_columns, cluster_sums

DEFAULT_SPLITS = 20
DEFAULT_NULL_DRAWS = 200


@dataclass(frozen=True)
class SplitHalf:
    score: float  # the mean over splits (both halves each) of the chosen column's held-out mean
    chosen_share: float  # how often the column best on all items was the one chosen
    n_splits: int


def split_half_best(
    clusters: np.ndarray, values: np.ndarray, rng: np.random.Generator, n_splits: int = DEFAULT_SPLITS
) -> SplitHalf:
    """The best column chosen on half of the clusters, scored on the other half (and the other way
    round), averaged over ``n_splits`` random halvings. Ties go to the first column, as the probe's."""
    values = as_columns(values)
    sums, counts = cluster_sums(np.asarray(clusters), values)
    n = len(counts)
    if n < 2 or n_splits < 1:
        return SplitHalf(np.nan, np.nan, 0)
    overall = int(np.argmax(sums.sum(0) / counts.sum()))
    scores, same = [], 0
    for _ in range(n_splits):
        half = np.zeros(n, dtype=bool)
        half[rng.permutation(n)[: n // 2]] = True
        for pick, score_on in ((half, ~half), (~half, half)):
            chosen = int(np.argmax(sums[pick].sum(0) / counts[pick].sum()))
            scores.append(sums[score_on, chosen].sum() / counts[score_on].sum())
            same += chosen == overall
    return SplitHalf(float(np.mean(scores)), same / (2 * n_splits), n_splits)


def _choice_matrix(n_choices: np.ndarray, choice: np.ndarray) -> tuple[sparse.csc_matrix, np.ndarray]:
    """(sum n_choices, k) 0/1: row (item, group) has a 1 in the columns that picked that group."""
    offsets = np.concatenate([[0], np.cumsum(n_choices)[:-1]]).astype(np.int64)
    item, col = np.nonzero(choice >= 0)
    rows = offsets[item] + choice[item, col]
    total = int(n_choices.sum())
    m = sparse.csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, col)), shape=(total, choice.shape[1]))
    return m, offsets


def max_null(
    n_choices: np.ndarray,
    n_correct: np.ndarray,
    choice: np.ndarray,
    n_draws: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The best column's accuracy under the within-item label shuffle, one value per draw.

    Item ``i`` has ``n_choices[i]`` candidate groups (words, mentions), ``n_correct[i]`` of them right;
    ``choice[i, h]`` is the group column ``h`` picked (-1: none, never right). Each draw makes a random
    ``n_correct[i]``-subset of the groups right, independently per item, and takes the best column's
    share of items whose picked group is right."""
    n_choices = np.asarray(n_choices, dtype=np.int64)
    n_correct = np.minimum(np.asarray(n_correct, dtype=np.int64), n_choices)
    choice = np.asarray(choice, dtype=np.int64)
    n_items = len(n_choices)
    if n_items == 0 or n_draws < 1:
        return np.zeros(0)
    if np.any(choice >= n_choices[:, None]):
        raise ValueError("a choice index is not below its item's number of choices")
    m, offsets = _choice_matrix(n_choices, choice)
    one = np.nonzero(n_correct == 1)[0]
    many = np.nonzero(n_correct > 1)[0]
    rows, cols = [], []
    draws = np.arange(n_draws)
    if len(one):  # the common case (one gold head word, one gold name): one uniform group per item
        picked = offsets[one][None, :] + (rng.random((n_draws, len(one))) * n_choices[one][None, :]).astype(np.int64)
        rows.append(np.repeat(draws, len(one)))
        cols.append(picked.ravel())
    for i in many:  # several right groups: a random subset of that size, per draw
        keys = rng.random((n_draws, n_choices[i]))
        picked = np.argsort(keys, axis=1)[:, : n_correct[i]] + offsets[i]
        rows.append(np.repeat(draws, n_correct[i]))
        cols.append(picked.ravel())
    if not rows:
        return np.zeros(n_draws)
    r, c = np.concatenate(rows), np.concatenate(cols)
    order = np.argsort(r, kind="stable")  # rows in draw order: the CSR structure directly, no conversion
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_draws))])
    select = sparse.csr_matrix((np.ones(len(r)), c[order], indptr), shape=(n_draws, int(n_choices.sum())))
    hits = (select @ m).toarray()  # (n_draws, k): items each column gets right under this draw
    return hits.max(axis=1) / n_items
