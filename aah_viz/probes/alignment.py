"""From tokens to words: which word each token belongs to, and how long documents are chunked.

A token belongs to the word that shares most of its characters (a fast tokenizer's token may
carry a leading space). Tokens that belong to no word (the spaces between words of the byte
tokenizer, say) form *gap units*: one per run of such tokens. Gaps take part in the word-level
attention like words do, so every row still sums to one, but a prediction that lands on a gap is
never a word and so never right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Alignment:
    unit_of_token: np.ndarray  # (n_tokens,) unit index; units 0..n_words-1 are the words
    n_words: int
    n_units: int
    word_first_token: np.ndarray  # (n_words,) first token of each word, -1 for a word without tokens
    word_last_token: np.ndarray  # (n_words,) last token, -1 for a word without tokens


def align_words(offsets: list[tuple[int, int]], word_spans: list[tuple[int, int]]) -> Alignment:
    """Assign tokens (character ``offsets``) to words (character spans, in order, not overlapping)."""
    n_tokens, n_words = len(offsets), len(word_spans)
    unit = np.full(n_tokens, -1, dtype=np.int64)
    starts = np.array([s for s, _ in word_spans], dtype=np.int64)
    ends = np.array([e for _, e in word_spans], dtype=np.int64)
    for t, (a, b) in enumerate(offsets):
        if b <= a:
            continue
        # candidate words overlapping [a, b): words whose start < b and end > a
        hi = int(np.searchsorted(starts, b, side="left"))
        lo = int(np.searchsorted(ends, a, side="right"))
        best, best_overlap = -1, 0
        for w in range(lo, hi):
            overlap = min(b, ends[w]) - max(a, starts[w])
            if overlap > best_overlap:
                best, best_overlap = w, overlap
        unit[t] = best
    # gap units: one per maximal run of unaligned tokens
    n_units = n_words
    previous_gap = False
    for t in range(n_tokens):
        if unit[t] < 0:
            if not previous_gap:
                n_units += 1
            unit[t] = n_units - 1
            previous_gap = True
        else:
            previous_gap = False
    first = np.full(n_words, -1, dtype=np.int64)
    last = np.full(n_words, -1, dtype=np.int64)
    for t in range(n_tokens - 1, -1, -1):
        if unit[t] < n_words:
            first[unit[t]] = t
    for t in range(n_tokens):
        if unit[t] < n_words:
            last[unit[t]] = t
    return Alignment(unit, n_words, n_units, first, last)


def word_segments(text: str, word_spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans to tokenise one by one so that no token crosses a word boundary.

    Each word is one segment together with the whitespace right before it (so a BPE tokenizer
    still sees " word" as it would in running text); text between words that is not whitespace
    is a segment of its own, as is text after the last word. A contraction the treebank splits
    ("do" + "n't") is then tokenised as its two words, as Clark et al. tokenised word by word.
    """
    segments = []
    pos = 0
    for start, end in word_spans:
        between = text[pos:start]
        lead = len(between) - len(between.rstrip())  # whitespace right before the word
        if between[: len(between) - lead].strip():
            segments.append((pos, start - lead))
        segments.append((start - lead, end))
        pos = max(pos, end)
    if text[pos:].strip():
        segments.append((pos, len(text)))
    return segments


@dataclass(frozen=True)
class Chunk:
    start: int  # first token fed to the model
    end: int  # one past the last token fed
    score_lo: int  # words whose last token lies in [score_lo, score_hi) are scored in this chunk
    score_hi: int


def plan_chunks(n_tokens: int, max_len: int) -> list[Chunk]:
    """Windows of ``max_len`` tokens with stride ``max_len // 2``.

    A document longer than the model's context is read in overlapping chunks. Each word is scored
    in exactly one chunk: the first chunk scores its whole span, every later one its second half,
    so every scored word has at least ``max_len // 2`` tokens of left context (or the document's
    start). For a causal model what follows a word in its chunk does not change its attention.
    """
    if max_len < 2:
        raise ValueError("max_len must be at least 2")
    if n_tokens <= max_len:
        return [Chunk(0, n_tokens, 0, n_tokens)]
    stride = max_len // 2
    chunks = [Chunk(0, max_len, 0, max_len)]
    start = stride
    while True:
        end = min(start + max_len, n_tokens)
        chunks.append(Chunk(start, end, chunks[-1].score_hi, end))
        if end >= n_tokens:
            return chunks
        start += stride


def word_attention(attention: np.ndarray, units: np.ndarray, n_units: int) -> np.ndarray:
    """Word-level attention (Clark et al. 2019) from token attention ``(..., T, T)``.

    Attention *to* a unit is the sum over its tokens (columns); attention *from* a unit is the
    mean over its tokens (rows). Rows of the result sum to one when token rows do. Units without
    tokens here get zero rows and columns. Returns ``(..., n_units, n_units)``.

    Sums over runs of tokens (``np.add.reduceat`` on tokens ordered by unit), never a product with
    a (T, U) indicator matrix: that costs T*T*U per head and was half of a long probe's time.
    """
    units = np.asarray(units, dtype=np.int64)
    T = attention.shape[-1]
    if units.shape != (T,):
        raise ValueError(f"units has shape {units.shape}, expected ({T},)")
    if T == 0:
        return np.zeros((*attention.shape[:-2], n_units, n_units), dtype=attention.dtype)
    order = np.argsort(units, kind="stable")  # a word's tokens are consecutive already: usually no reorder
    ordered = units[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    present = ordered[starts]
    counts = np.diff(np.r_[starts, T]).astype(attention.dtype)
    if not np.array_equal(order, np.arange(T)):
        attention = attention[..., order, :][..., :, order]
    # rows first (whole rows added: contiguous memory), then the columns of the smaller result
    from_units = np.add.reduceat(attention, starts, axis=-2) / counts[:, None]  # (..., P, T)
    from_units = np.add.reduceat(from_units, starts, axis=-1)  # (..., P, P)
    if len(present) == n_units:  # every unit has tokens here (present is 0..n_units-1)
        return from_units
    out = np.zeros((*attention.shape[:-2], n_units, n_units), dtype=attention.dtype)
    out[..., present[:, None], present[None, :]] = from_units
    return out
