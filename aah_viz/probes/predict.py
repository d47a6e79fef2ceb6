"""Run an attention source over documents and keep, per head, what each word attends to most.

The attention source is any object with (duck-typed, so this module needs no torch):

- ``encode(text) -> (ids, offsets)``: token ids and each token's character span, without the
  model's special tokens; optionally ``encode_words(text, word_spans)``, the same with no token
  crossing a word boundary (used when present);
- ``max_len``: the most text tokens one input takes (room for special tokens already left);
  ``n_layer``, ``n_head``;
- ``attend(batch) -> ndarray (B, n_layer, n_head, T, T)``: attention probabilities among the
  text tokens of a batch of id lists, padded at the end to the longest (``T``). A source that
  adds special tokens ([CLS] ... [SEP]) removes their rows and columns before returning, so
  word aggregation sees the text only (Clark et al. 2019).

``instrumentation.measure.probe_extract`` provides sources for AAH checkpoints and Hugging Face models.

The syntactic argmax runs over the other words of the word's own sentence, in both directions,
whatever the input held (one sentence, or a whole document); the coreference argmax over the
words of earlier mentions. With ``causal`` (a decoder) only the earlier words of the sentence
are candidates, and each word has one prediction, ``dep2head``: the earlier word it attends to
most (``aah_viz.probes.syntax_causal``); ``head2dep`` is not computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from aah_viz.corpus.document import Document
from aah_viz.probes.alignment import Alignment, align_words, plan_chunks, word_attention
from aah_viz.probes.distance import DistanceProfile


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
    dep2head: np.ndarray  # (n_layer*n_head, n_words): most-attended word of the sentence from each word, -1 none
    # (causal: the most-attended earlier word of the sentence)
    head2dep: np.ndarray  # (n_layer*n_head, n_words): the word of the sentence that attends most to it, -1 none
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


def _normalised(rows: np.ndarray) -> np.ndarray:
    """Rows rescaled to sum to one (the text's share of attention, special tokens left out)."""
    total = rows.sum(axis=-1, keepdims=True)
    return rows / np.where(total > 0, total, 1.0)


class DocumentPredictor:
    """One document's chunks (``requests``), consumed one attention array at a time."""

    def __init__(
        self,
        doc: Document,
        source,
        queries: list[CorefQuery] | None = None,
        js: JSAccumulator | None = None,
        distance: DistanceProfile | None = None,
        need_syntax: bool = True,
        causal: bool = False,
    ):
        self.doc, self.js, self.distance, self.need_syntax = doc, js, distance, need_syntax
        self.causal = causal
        words = doc.words
        spans = [(w.start, w.end) for w in words]
        encode_words = getattr(source, "encode_words", None)  # tokens cut at word boundaries when the source can
        ids, offsets = encode_words(doc.text, spans) if encode_words is not None else source.encode(doc.text)
        self.alignment = align_words(offsets, spans)
        n_heads = int(source.n_layer) * int(source.n_head)
        self.n_heads, self.n_words = n_heads, len(words)
        self.queries = queries or []
        self.dep2head = np.full((n_heads, self.n_words), -1, dtype=np.int64)
        self.head2dep = np.full((n_heads, self.n_words), -1, dtype=np.int64)
        self.coref = np.full((n_heads, len(self.queries)), -1, dtype=np.int64)
        units = self.alignment.unit_of_token
        self.unit_last = np.full(self.alignment.n_units, -1, dtype=np.int64)  # last token of every unit
        self.unit_last[units] = np.arange(len(units))
        # the sentence of every unit; gaps (-1) are never candidates of the syntactic argmax
        self.sentence_of_unit = np.full(self.alignment.n_units, -1, dtype=np.int64)
        self.sentence_of_unit[: self.n_words] = np.repeat(
            np.arange(len(doc.sentences)), [len(s.words) for s in doc.sentences]
        )
        # head2dep: per unit, the largest attention any other word of its sentence gives it, and whose row
        self.best_val = np.zeros((n_heads, self.alignment.n_units), dtype=np.float64)
        self.best_row = np.full((n_heads, self.alignment.n_units), -1, dtype=np.int64)
        self.query_heads = np.array([q.head for q in self.queries], dtype=np.int64)
        self.chunks = plan_chunks(len(ids), int(source.max_len)) if ids else []
        self.requests = [ids[c.start : c.end] for c in self.chunks]
        self.consumed = 0

    def consume(self, index: int, att: np.ndarray) -> None:
        """``att``: (n_layer, n_head, >=n, >=n) attention of chunk ``index`` (padding beyond n ignored)."""
        self.consumed += 1  # a begun document has added to the shared profiles (JS, distance)
        chunk = self.chunks[index]
        al, n_words = self.alignment, self.n_words
        n = chunk.end - chunk.start
        tok_att = np.asarray(att)[:, :, :n, :n].reshape(self.n_heads, n, n)
        if self.distance is not None:
            self.distance.add(tok_att, chunk.score_lo - chunk.start, chunk.score_hi - chunk.start)
        present, local = np.unique(al.unit_of_token[chunk.start : chunk.end], return_inverse=True)
        unit_att = word_attention(tok_att, local, len(present))  # (n_heads, Uc, Uc)
        to_local = np.full(al.n_units, -1, dtype=np.int64)
        to_local[present] = np.arange(len(present))
        # each unit's row is read in exactly one chunk: the one its last token is scored in
        last = self.unit_last[present]
        rows_here = present[(last >= chunk.score_lo) & (last < chunk.score_hi)]
        if len(rows_here) == 0:
            return
        rows_local = to_local[rows_here]
        scored = rows_here[rows_here < n_words]  # the words among them
        scored_local = to_local[scored]
        if self.js is not None and len(scored):
            step = max(1, len(scored) // self.js.rows_per_chunk)
            self.js.add(_normalised(unit_att[:, scored_local[::step][: self.js.rows_per_chunk], :]))
        diag = np.arange(len(present))
        unit_att[:, diag, diag] = 0.0  # a word attending to itself predicts nothing
        back = np.where(present < n_words, present, -1)  # local unit -> word (gaps: -1)
        if self.need_syntax:
            sent = self.sentence_of_unit[present]
            same = (sent[:, None] == sent[None, :]) & (sent[:, None] >= 0)  # (Uc, Uc) same sentence, words only
            if self.causal:  # only earlier words (word units are numbered in text order; gaps are out already)
                same &= present[None, :] < present[:, None]
            if len(scored):
                masked = unit_att[:, scored_local, :] * same[scored_local][None]
                rows = _argmax_or_none(masked, axis=2)  # (n_heads, n_scored)
                self.dep2head[:, scored] = np.where(rows >= 0, back[np.maximum(rows, 0)], -1)
            if not self.causal:  # head2dep: the word of the sentence that attends most to each word
                block = unit_att[:, rows_local, :] * same[rows_local][None]  # (n_heads, n_rows, Uc)
                col_val = block.max(axis=1)
                col_row = rows_here[block.argmax(axis=1)]  # (n_heads, Uc) global unit of the best row
                better = col_val > self.best_val[:, present]
                self.best_val[:, present] = np.where(better, col_val, self.best_val[:, present])
                self.best_row[:, present] = np.where(better, col_row, self.best_row[:, present])
        if self.queries:
            last_tok = al.word_last_token
            in_chunk = np.nonzero(
                (last_tok[self.query_heads] >= chunk.score_lo) & (last_tok[self.query_heads] < chunk.score_hi)
            )[0]
            for qi in in_chunk:
                q = self.queries[qi]
                cand_local = to_local[q.candidates]
                keep = cand_local >= 0
                if not keep.any():
                    continue
                scores = unit_att[:, to_local[q.head], cand_local[keep]]  # (n_heads, n_cand)
                best = _argmax_or_none(scores, axis=1)
                self.coref[:, qi] = np.where(best >= 0, q.candidates[keep][np.maximum(best, 0)], -1)

    def result(self) -> DocPredictions:
        if self.need_syntax and self.n_words and not self.causal:
            rows = self.best_row[:, : self.n_words]
            ok = (self.best_val[:, : self.n_words] > 0) & (rows >= 0) & (rows < self.n_words)
            self.head2dep[:] = np.where(ok, rows, -1)
        return DocPredictions(self.doc, self.alignment, self.dep2head, self.head2dep, self.coref, self.queries)


def predict_documents(
    predictors: Iterable[DocumentPredictor], source, batch_size: int = 16
) -> Iterator[DocPredictions]:
    """Every predictor's chunks through ``source.attend`` in batches of up to ``batch_size`` inputs
    (across documents, so short inputs such as single sentences share a forward pass); yields each
    document's predictions, in order, once all its chunks are consumed."""
    pending: list[tuple[DocumentPredictor, int]] = []
    open_docs: list[DocumentPredictor] = []

    def run_batch():
        att = np.asarray(source.attend([p.requests[k] for p, k in pending]))
        for b, (p, k) in enumerate(pending):
            p.consume(k, att[b])
        pending.clear()

    for predictor in predictors:
        open_docs.append(predictor)
        for k in range(len(predictor.requests)):
            pending.append((predictor, k))
            if len(pending) >= batch_size:
                run_batch()
        while open_docs and not any(p is open_docs[0] for p, _ in pending):
            yield open_docs.pop(0).result()
    if pending:
        run_batch()
    for predictor in open_docs:
        yield predictor.result()


def predict_document(
    doc: Document,
    source,
    queries: list[CorefQuery] | None = None,
    js: JSAccumulator | None = None,
    batch_size: int = 16,
    need_syntax: bool = True,
    distance: DistanceProfile | None = None,
    causal: bool = False,
) -> DocPredictions:
    """One document's predictions (see :func:`predict_documents` for many)."""
    predictor = DocumentPredictor(doc, source, queries, js, distance, need_syntax, causal)
    return next(predict_documents([predictor], source, batch_size))
