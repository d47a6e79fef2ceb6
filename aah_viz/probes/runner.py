"""Run every probe over documents with one attention source; returns the probe tables.

Documents are keyed by their position and id, never by their text: two documents with the same
text are both scored. A syntax document and a coreference document are read in one pass only
when they have the same id, text and words (and the context is ``document``).

``context``: ``sentence`` (each sentence of a syntax document is its own model input, as in
Clark et al. 2019) or ``document`` (the whole document, read in chunks). Either way the
syntactic argmax stays inside the dependent's sentence. Coreference documents are always read
whole.

A causal source (``source.causal``: a decoder, such as an AAH checkpoint or a ``*ForCausalLM``)
is probed looking back: every dependency is read at its later word
(:mod:`aah_viz.probes.syntax_causal`) and pronouns before their antecedent are left out of the
coreference probe (:mod:`aah_viz.probes.coref`). Other sources are probed as Clark et al. did.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from aah_viz.analysis.selection import DEFAULT_NULL_DRAWS
from aah_viz.corpus.document import Document, Sentence, Word
from aah_viz.probes.claims import Settings
from aah_viz.probes.coref import bucket_edges, coref_queries
from aah_viz.probes.kinds import PROBE_KINDS, Finish, ScoredInput, Setup
from aah_viz.probes.predict import DocumentPredictor, predict_documents
from aah_viz.probes.progress import ProbeProgress
from aah_viz.probes.syntax import DEFAULT_BOOT, DEFAULT_MIN_COUNT, RELATION_LABELS

CONTEXTS = ("sentence", "document")


@dataclass
class ProbeResult:
    probe_heads: pd.DataFrame
    probe_relations: pd.DataFrame
    probe_coref: pd.DataFrame
    js_distance: np.ndarray  # (n_heads, n_heads) mean JS divergence between heads' attention rows
    n_syntax_docs: int  # syntax documents scored
    n_coref_docs: int  # coreference documents scored
    n_sentences: int = 0  # sentences scored by the syntactic probe
    n_links: int = 0  # gold dependencies scored
    n_coref_queries: int = 0  # mentions with an antecedent scored
    n_long_sentences: int = 0  # sentences left out: more words than the model takes tokens in one input
    causal: bool = False  # probed looking back (a decoder)
    n_cataphora_left_out: int = 0  # causal: pronouns left out because their antecedent comes after them
    direction_counts: dict = field(default_factory=dict)  # causal: relation -> direction -> gold links
    probe_claims: pd.DataFrame = field(default_factory=pd.DataFrame)  # selection-aware statistics per target

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "probe_heads": self.probe_heads,
            "probe_relations": self.probe_relations,
            "probe_coref": self.probe_coref,
            "probe_claims": self.probe_claims,
        }


def sentence_documents(doc: Document) -> list[Document]:
    """One document per sentence: its text, and its words with offsets into that text."""
    out = []
    for sentence in doc.sentences:
        base = sentence.start
        words = tuple(Word(w.form, w.start - base, w.end - base, w.head, w.deprel, w.upos) for w in sentence.words)
        text = doc.text[sentence.start : sentence.end]
        out.append(Document(f"{doc.id}/{sentence.id}", text, [Sentence(sentence.id, 0, len(text), words)]))
    return out


def _same_words(a: Document, b: Document) -> bool:
    """The coreference document's word indices mean the same words as the syntax document's."""
    return a.text == b.text and [(w.start, w.end) for w in a.words] == [(w.start, w.end) for w in b.words]


def too_long(doc: Document, max_words: int | None) -> bool:
    """A sentence of ``doc`` has more words than ``max_words``: every word is at least one token, so the
    model cannot see it whole, and its cost would grow with it for nothing."""
    return max_words is not None and any(len(s.words) > max_words for s in doc.sentences)


def long_sentence_count(syntax_docs: Sequence[Document], max_words: int | None) -> int:
    return sum(1 for doc in syntax_docs for s in doc.sentences if max_words is not None and len(s.words) > max_words)


def sample_documents(docs: Sequence[Document], n: int | None, seed: int = 0) -> list[Document]:
    """``n`` documents drawn without replacement (``numpy.random.default_rng(seed)``), kept in their
    input order; all of them when ``n`` is None or not below their number."""
    if n is None or n >= len(docs):
        return list(docs)
    keep = np.sort(np.random.default_rng(seed).choice(len(docs), size=n, replace=False))
    return [docs[i] for i in keep]


def plan_jobs(
    syntax_docs: Sequence[Document], coref_docs: Sequence[Document], context: str, max_words: int | None = None
) -> list[tuple[Document | None, Document | None]]:
    """(syntax document, coreference document) per model pass; nothing is merged by text. Syntax inputs
    with a sentence of more than ``max_words`` words are left out (the sentence, or in document context
    its document; see :func:`long_sentence_count`)."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if context == "sentence":
        jobs = [(s, None) for doc in syntax_docs for s in sentence_documents(doc) if not too_long(s, max_words)]
        return jobs + [(None, c) for c in coref_docs]
    syntax_docs = [doc for doc in syntax_docs if not too_long(doc, max_words)]
    by_id: dict[str, list[int]] = {}
    for i, doc in enumerate(syntax_docs):
        by_id.setdefault(doc.id, []).append(i)
    partner: dict[int, Document] = {}
    alone = []
    for doc in coref_docs:
        match = next((i for i in by_id.get(doc.id, []) if i not in partner and _same_words(syntax_docs[i], doc)), None)
        if match is None:
            alone.append(doc)
        else:
            partner[match] = doc
    return [(doc, partner.get(i)) for i, doc in enumerate(syntax_docs)] + [(None, c) for c in alone]


def run_probes(
    source,
    syntax_docs: Sequence[Document] = (),
    coref_docs: Sequence[Document] = (),
    *,
    step: int = 0,
    windows: np.ndarray | None = None,
    candidate_windows: Sequence[int] = (),
    min_count: int = DEFAULT_MIN_COUNT,
    context: str = "sentence",
    relations: str = "universal",
    progress: Callable[[int, int], None] | None = None,
    batch_size: int = 16,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    causal: bool | None = None,
    sort_by_length: bool = False,
    saved: ProbeProgress | None = None,
    null_draws: int = DEFAULT_NULL_DRAWS,
) -> ProbeResult:
    """Score ``source`` (see :mod:`aah_viz.probes.predict`) on the syntax and coreference documents.

    ``windows`` (n_layer, n_head) is the window each head had (default: ``source.max_len`` for
    all). Distance buckets have edges at 1, 4, 8, 16, every candidate window and every head window.
    ``relations``: ``universal`` (subtypes stripped) or ``full`` labels. ``n_boot`` resamples of
    sentences give each relation's interval of best head minus baseline. ``causal`` (default: the
    source's ``causal``, else False) probes looking back, as a decoder attends. ``sort_by_length``
    feeds the model its inputs shortest first, so that a batch pads little; the scores are the same
    (sentences keep their numbers for the bootstrap), the attention profiles (JS, distance) are sums
    taken in another order, and the model's float rounding may differ with the padded shapes.
    ``saved`` keeps what is finished on disk (:mod:`aah_viz.probes.progress`): the probe starts after
    the inputs it holds, saves every few minutes, and stops when asked (``saved.stop``, a
    :class:`aah_viz.stop.StopRequest`), saved.
    ``null_draws``: label shuffles of the max-over-heads null behind ``probe_claims``.
    ``progress(done, total)`` hears of the inputs done: once before the first (with those ``saved`` held),
    then after each.
    """
    if relations not in RELATION_LABELS:
        raise ValueError(f"relations must be one of {RELATION_LABELS}, got {relations!r}")
    n_layer, n_head = int(source.n_layer), int(source.n_head)
    if windows is None:
        windows = np.full((n_layer, n_head), int(source.max_len), dtype=np.int64)
    windows = np.asarray(windows, dtype=np.int64)
    if windows.shape != (n_layer, n_head):
        raise ValueError(f"windows has shape {windows.shape}, the model has ({n_layer}, {n_head}) heads")
    edges = bucket_edges(list(candidate_windows) + [int(w) for w in np.unique(windows)])
    if causal is None:
        causal = bool(getattr(source, "causal", False))
    setup = Setup(n_layer, n_head, relations, context, causal, edges, coref_docs)
    state = {kind.name: kind.build(setup) for kind in PROBE_KINDS}  # what a saved probe keeps
    syntax, coref, js, distance, tally = (state[k] for k in ("syntax", "coref", "js", "distance", "tally"))
    jobs = plan_jobs(syntax_docs, coref_docs, context, int(source.max_len))
    done = 0
    if saved is not None:
        saved.total = len(jobs)
        done = saved.restore(state)
    profile_syntax = bool(syntax_docs)  # head profiles (JS, distance) from the syntax inputs when there are any

    first_sentence = np.cumsum([0] + [len(s.sentences) if s is not None else 0 for s, _ in jobs])
    order = list(range(len(jobs)))
    if sort_by_length:  # characters stand in for tokens; ties keep the input order
        order.sort(key=lambda i: len((jobs[i][0] or jobs[i][1]).text))

    begun: deque[DocumentPredictor] = deque()  # the predictors handed out and not yet finished, in order

    def predictors() -> Iterator[DocumentPredictor]:
        for syn_doc, cor_doc in (jobs[i] for i in order[done:]):
            doc = syn_doc if syn_doc is not None else cor_doc
            profile = (syn_doc is not None) == profile_syntax
            begun.append(
                DocumentPredictor(
                    doc,
                    source,
                    queries=coref_queries(cor_doc, causal) if cor_doc is not None else None,
                    js=js if profile else None,
                    distance=distance if profile else None,
                    need_syntax=syn_doc is not None,
                    causal=causal,
                )
            )
            yield begun[-1]

    if progress is not None:
        progress(done, len(jobs))
    for n, (i, preds) in enumerate(zip(order[done:], predict_documents(predictors(), source, batch_size)), 1):
        scored = ScoredInput(i, *jobs[i], preds, int(first_sentence[i]))
        for kind in PROBE_KINDS:
            if kind.add is not None:
                kind.add(state[kind.name], scored)
        if progress is not None:
            progress(done + n, len(jobs))
        begun.popleft()  # this document
        # a state is whole where no later input has begun adding to the shared profiles
        if saved is not None and not any(p.consumed for p in begun):
            saved.checkpoint(done + n, state)

    claims = Settings(n_boot=n_boot, n_draws=null_draws, seed=seed)
    finish = Finish(step, windows, n_head, min_count, claims, bool(syntax_docs), bool(coref_docs))
    heads_rows, claim_tables = [], []
    for kind in PROBE_KINDS:
        rows, table = kind.rows(state[kind.name], finish, state)
        heads_rows += rows
        if table is not None:
            claim_tables.append(table)
    return ProbeResult(
        probe_heads=pd.DataFrame(heads_rows),
        probe_relations=syntax.relations_table(step, min_count, n_boot, seed),
        probe_coref=coref.coref_table(step, windows) if coref_docs else pd.DataFrame(),
        js_distance=js.mean(),
        n_syntax_docs=len(syntax_docs),
        n_coref_docs=tally.n_coref,
        n_sentences=syntax.n_sentences,
        n_links=int(sum(syntax.count.values())),
        n_coref_queries=int(coref.count.sum()),
        n_long_sentences=long_sentence_count(syntax_docs, int(source.max_len)),
        causal=causal,
        n_cataphora_left_out=coref.cataphora_left_out or 0,
        direction_counts=syntax.direction_counts() if causal else {},
        probe_claims=pd.concat([t for t in claim_tables if len(t)], ignore_index=True)
        if any(len(t) for t in claim_tables)
        else pd.DataFrame(),
    )
