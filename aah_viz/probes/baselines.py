"""Baselines stronger than a fixed offset, and what the null of a probe item needs.

*Nearest word of the right category* (``pos``): at the word whose attention is read, the nearest word
of the sentence whose gold UPOS is that of the true answer. It is told the answer's part of speech, so
it is an upper reference for what "find the nearest noun/verb/..." already gets right, not a rival
model: a head that does no better than it is not shown to track the relation itself.

- causal (looking back from the later word): the nearest *earlier* word of that category; it is right
  exactly when no word between the two has the answer's category;
- encoder (from the dependent): the nearest other word of the sentence of that category, either side,
  the earlier of two at the same distance.

A word without a UPOS (``None`` or ``_``) has no category: the baseline is wrong on it.
"""

from __future__ import annotations

import numpy as np

from aah_viz.corpus.document import Document

NO_UPOS = (None, "_", "")


def upos_codes(doc: Document) -> np.ndarray:
    """(n_words,) one integer per UPOS value, -1 for a word without one."""
    codes: dict[str, int] = {}
    return np.array(
        [-1 if w.upos in NO_UPOS else codes.setdefault(str(w.upos), len(codes)) for w in doc.words], dtype=np.int64
    )


def nearest_category_backward(upos: np.ndarray, later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """(n_links,) bool: the nearest word before ``later`` with ``earlier``'s category is ``earlier``."""
    if len(later) == 0:
        return np.zeros(0, dtype=bool)
    cat = upos[earlier]
    width = int((later - earlier).max())
    between = earlier[:, None] + np.arange(1, width)[None, :]  # the words strictly between, padded
    inside = between < later[:, None]
    same = inside & (upos[np.minimum(between, len(upos) - 1)] == cat[:, None])
    return (cat >= 0) & ~same.any(axis=1)


def nearest_category_either(
    upos: np.ndarray, dependent: np.ndarray, head: np.ndarray, sentence_start: np.ndarray, sentence_len: np.ndarray
) -> np.ndarray:
    """(n_links,) bool: the nearest other word of the dependent's sentence with the head's category is the
    head (either side; at equal distance the earlier wins)."""
    if len(dependent) == 0:
        return np.zeros(0, dtype=bool)
    cat = upos[head]
    words = sentence_start[:, None] + np.arange(int(sentence_len.max()))[None, :]  # the sentence, padded
    inside = words < (sentence_start + sentence_len)[:, None]
    same = inside & (words != dependent[:, None]) & (upos[np.minimum(words, len(upos) - 1)] == cat[:, None])
    distance = np.abs(words - dependent[:, None]) * 2 + (words > dependent[:, None])  # earlier first at a tie
    nearest = words[np.arange(len(dependent)), np.argmin(np.where(same, distance, np.iinfo(np.int64).max), axis=1)]
    return (cat >= 0) & same.any(axis=1) & (nearest == head)


def choice_index_backward(pred: np.ndarray, sentence_start: np.ndarray) -> np.ndarray:
    """(n_heads, n_links) predicted earlier word -> its index among the sentence's words before the later
    word (0 = the sentence's first word); -1 for none."""
    return np.where(pred >= 0, pred - sentence_start[None, :], -1)


def choice_index_other(pred: np.ndarray, dependent: np.ndarray, sentence_start: np.ndarray) -> np.ndarray:
    """(n_heads, n_links) predicted word -> its index among the sentence's words other than the dependent;
    -1 for none."""
    position = pred - sentence_start[None, :]
    own = (dependent - sentence_start)[None, :]
    return np.where(pred >= 0, np.where(position > own, position - 1, position), -1)
