"""Run an attention source over a document and keep, per head, what each word attends to most.

The attention source is any object with (duck-typed, so this module needs no torch):

- ``encode(text) -> (ids, offsets)``: token ids and each token's character span;
- ``max_len``: the longest sequence it takes; ``n_layer``, ``n_head``;
- ``attend(batch) -> ndarray (B, n_layer, n_head, T, T)``: attention probabilities of a batch
  of id lists, padded at the end to the longest (``T``).

``instrumentation.probe_extract`` provides sources for AAH checkpoints and Hugging Face models.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aah_viz.corpus.document import Document
from aah_viz.probes.alignment import Alignment, align_words, plan_chunks, word_attention


@dataclass
class CorefQuery:
    """A mention with an earlier antecedent, as the coreference probe asks it."""

    mention: int  # index into the document's flat mention list
    head: int  # the mention's head word (the query)
    candidates: np.ndarray  # words of every mention that ends before this one starts
    correct: np.ndarray  # bool per candidate: it lies in an earlier mention of the same chain
    antecedent_head: int  # head word of the nearest earlier mention of the same chain


@dataclass
class DocPredictions:
    doc: Document
    alignment: Alignment
    dep2head: np.ndarray  # (n_layer*n_head, n_words): most-attended word from each word, -1 none
    head2dep: np.ndarray  # (n_layer*n_head, n_words): the word that attends most to each word, -1 none
    # (every row read with its own left context, so a head to the right of a chunk's end still counts)
    coref: np.ndarray  # (n_layer*n_head, n_queries): chosen candidate word, -1 none
    queries: list[CorefQuery] = field(default_factory=list)


def xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * log(y), 0 where x == 0 (as scipy.special.xlogy)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


class JSAccumulator:
    """Mean Jensen-Shannon divergence (base 2) between heads' word-level attention rows (Clark et al.)."""

    def __init__(self, n_heads: int, rows_per_chunk: int = 4):
        self.total = np.zeros((n_heads, n_heads))
        self.count = 0
        self.rows_per_chunk = rows_per_chunk

    def add(self, rows: np.ndarray) -> None:
        """``rows``: (n_heads, r, U) attention distributions of the same r query words."""
        if rows.shape[1] == 0:
            return
        p = rows.astype(np.float64)
        entropy = -xlogy(p, p).sum(-1)  # (n_heads, r), nats
        n = p.shape[0]
        for i in range(n):  # JS(p, q) = H((p + q) / 2) - (H(p) + H(q)) / 2, upper triangle only
            m = 0.5 * (p[i][None] + p[i:])
            mixed = -(m * np.log(m + 1e-300)).sum(-1)
            js = (mixed - 0.5 * (entropy[i][None] + entropy[i:])).sum(-1) / np.log(2.0)
            self.total[i, i + 1 :] += js[1:]
            self.total[i + 1 :, i] += js[1:]
        self.count += p.shape[1]

    def mean(self) -> np.ndarray:
        return self.total / max(self.count, 1)


def _argmax_or_none(values: np.ndarray, axis: int) -> np.ndarray:
    best = values.argmax(axis=axis)
    top = np.take_along_axis(values, np.expand_dims(best, axis), axis).squeeze(axis)
    return np.where(top > 0, best, -1)


def predict_document(
    doc: Document,
    source,
    queries: list[CorefQuery] | None = None,
    js: JSAccumulator | None = None,
    batch_size: int = 16,
    need_syntax: bool = True,
) -> DocPredictions:
    ids, offsets = source.encode(doc.text)
    words = doc.words
    alignment = align_words(offsets, [(w.start, w.end) for w in words])
    n_heads = int(source.n_layer) * int(source.n_head)
    n_words = len(words)
    queries = queries or []
    dep2head = np.full((n_heads, n_words), -1, dtype=np.int64)
    head2dep = np.full((n_heads, n_words), -1, dtype=np.int64)
    coref = np.full((n_heads, len(queries)), -1, dtype=np.int64)
    units = alignment.unit_of_token
    last_tok = alignment.word_last_token
    unit_last = np.full(alignment.n_units, -1, dtype=np.int64)  # last token of every unit, gaps included
    unit_last[units] = np.arange(len(units))
    # head2dep: per unit, the largest attention any other unit's row gives it, and whose row it is
    best_val = np.zeros((n_heads, alignment.n_units), dtype=np.float64)
    best_row = np.full((n_heads, alignment.n_units), -1, dtype=np.int64)
    query_heads = np.array([q.head for q in queries], dtype=np.int64)
    chunks = plan_chunks(len(ids), int(source.max_len)) if ids else []
    for b0 in range(0, len(chunks), batch_size):
        batch = chunks[b0 : b0 + batch_size]
        att = np.asarray(source.attend([ids[c.start : c.end] for c in batch]))
        for k, chunk in enumerate(batch):
            n = chunk.end - chunk.start
            tok_att = att[k, :, :, :n, :n].reshape(n_heads, n, n)
            present, local = np.unique(units[chunk.start : chunk.end], return_inverse=True)
            unit_att = word_attention(tok_att, local, len(present))  # (n_heads, Uc, Uc)
            to_local = np.full(alignment.n_units, -1, dtype=np.int64)
            to_local[present] = np.arange(len(present))
            # each unit's row is read in exactly one chunk: the one its last token is scored in
            rows_here = present[(unit_last[present] >= chunk.score_lo) & (unit_last[present] < chunk.score_hi)]
            if len(rows_here) == 0:
                continue
            rows_local = to_local[rows_here]
            scored = rows_here[rows_here < n_words]  # the words among them
            scored_local = to_local[scored]
            if js is not None and len(scored):
                step = max(1, len(scored) // js.rows_per_chunk)
                js.add(unit_att[:, scored_local[::step][: js.rows_per_chunk], :])
            diag = np.arange(len(present))
            unit_att[:, diag, diag] = 0.0  # a word attending to itself predicts nothing
            back = np.where(present < n_words, present, -1)  # local unit -> word (gaps: -1)
            if need_syntax:
                if len(scored):
                    rows = _argmax_or_none(unit_att[:, scored_local, :], axis=2)  # (n_heads, n_scored)
                    dep2head[:, scored] = np.where(rows >= 0, back[np.maximum(rows, 0)], -1)
                block = unit_att[:, rows_local, :]  # (n_heads, n_rows, Uc)
                col_val = block.max(axis=1)
                col_row = rows_here[block.argmax(axis=1)]  # (n_heads, Uc) global unit of the best row
                better = col_val > best_val[:, present]
                best_val[:, present] = np.where(better, col_val, best_val[:, present])
                best_row[:, present] = np.where(better, col_row, best_row[:, present])
            if queries:
                in_chunk = np.nonzero(
                    (last_tok[query_heads] >= chunk.score_lo) & (last_tok[query_heads] < chunk.score_hi)
                )[0]
                for qi in in_chunk:
                    q = queries[qi]
                    cand_local = to_local[q.candidates]
                    keep = cand_local >= 0
                    if not keep.any():
                        continue
                    scores = unit_att[:, to_local[q.head], cand_local[keep]]  # (n_heads, n_cand)
                    best = _argmax_or_none(scores, axis=1)
                    coref[:, qi] = np.where(best >= 0, q.candidates[keep][np.maximum(best, 0)], -1)
    if need_syntax and n_words:
        rows = best_row[:, :n_words]
        head2dep[:] = np.where((best_val[:, :n_words] > 0) & (rows >= 0) & (rows < n_words), rows, -1)
    return DocPredictions(doc, alignment, dep2head, head2dep, coref, queries)
