"""Run every probe over documents with one attention source; returns the three probe tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document
from aah_viz.probes.coref import CorefScorer, bucket_edges, coref_queries
from aah_viz.probes.predict import JSAccumulator, predict_document
from aah_viz.probes.sufficiency import dependency_lengths, sufficiency_rows
from aah_viz.probes.syntax import DEFAULT_MIN_COUNT, SyntaxScorer


@dataclass
class ProbeResult:
    probe_heads: pd.DataFrame
    probe_relations: pd.DataFrame
    probe_coref: pd.DataFrame
    js_distance: np.ndarray  # (n_heads, n_heads) mean JS divergence between heads' attention rows
    n_syntax_docs: int
    n_coref_docs: int

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "probe_heads": self.probe_heads,
            "probe_relations": self.probe_relations,
            "probe_coref": self.probe_coref,
        }


def js_rows(step: int, js: np.ndarray, n_head: int, windows: np.ndarray) -> list[dict]:
    """probe_heads rows (probe ``attention_js``, metric ``js:LAYER:HEAD``): the mean Jensen-Shannon
    divergence from this head's attention to that head's, what Clark's head clustering uses."""
    rows = []
    n = js.shape[0]
    for i in range(n):
        li, hi = divmod(i, n_head)
        for j in range(n):
            lj, hj = divmod(j, n_head)
            rows.append(
                {
                    "step": step,
                    "layer": li,
                    "head": hi,
                    "probe": "attention_js",
                    "metric": f"js:{lj}:{hj}",
                    "value": float(js[i, j]),
                    "window": int(windows[li, hi]),
                }
            )
    return rows


def run_probes(
    source,
    syntax_docs: Sequence[Document] = (),
    coref_docs: Sequence[Document] = (),
    *,
    step: int = 0,
    windows: np.ndarray | None = None,
    candidate_windows: Sequence[int] = (),
    min_count: int = DEFAULT_MIN_COUNT,
    progress: bool = False,
    batch_size: int = 16,
) -> ProbeResult:
    """Score ``source`` (see :mod:`aah_viz.probes.predict`) on the syntax and coreference documents.

    ``windows`` (n_layer, n_head) is the window each head had (default: ``source.max_len`` for
    all). Distance buckets have edges at 1, 4, 8, 16, every candidate window and every head window.
    A document in both lists (same text) is run through the model once.
    """
    n_layer, n_head = int(source.n_layer), int(source.n_head)
    if windows is None:
        windows = np.full((n_layer, n_head), int(source.max_len), dtype=np.int64)
    windows = np.asarray(windows, dtype=np.int64)
    if windows.shape != (n_layer, n_head):
        raise ValueError(f"windows has shape {windows.shape}, the model has ({n_layer}, {n_head}) heads")
    edges = bucket_edges(list(candidate_windows) + [int(w) for w in np.unique(windows)])
    syntax = SyntaxScorer(n_layer, n_head)
    coref = CorefScorer(n_layer, n_head, edges)
    js = JSAccumulator(n_layer * n_head)
    syntax_lengths: list[np.ndarray] = []

    jobs: dict[str, list] = {}  # text -> [syntax doc or None, coref doc or None]
    for doc in syntax_docs:
        jobs.setdefault(doc.text, [None, None])[0] = doc
    for doc in coref_docs:
        jobs.setdefault(doc.text, [None, None])[1] = doc
    items = list(jobs.values())
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="probing", unit="doc")
    for syn_doc, cor_doc in items:
        shared = syn_doc is not None and cor_doc is not None and _same_words(syn_doc, cor_doc)
        if syn_doc is not None:
            queries = coref_queries(cor_doc) if shared else None
            preds = predict_document(syn_doc, source, queries=queries, js=js, batch_size=batch_size)
            syntax.add(syn_doc, preds.dep2head, preds.head2dep)
            syntax_lengths.append(dependency_lengths(syn_doc, preds.alignment))
            if shared:
                coref.add(cor_doc, preds)
        if cor_doc is not None and not shared:
            preds = predict_document(
                cor_doc,
                source,
                queries=coref_queries(cor_doc),
                batch_size=batch_size,
                js=js if syn_doc is None else None,
                need_syntax=False,
            )
            coref.add(cor_doc, preds)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()

    heads_rows = []
    if syntax_docs:
        heads_rows += [dict(r, window=int(windows[r["layer"], r["head"]])) for r in syntax.head_rows(step, min_count)]
    if coref_docs:
        heads_rows += coref.head_rows(step, windows)
    lengths = np.concatenate(syntax_lengths) if syntax_lengths else np.zeros(0, dtype=np.int64)
    heads_rows += sufficiency_rows(step, windows, lengths, np.array(coref.distances, dtype=np.int64))
    js_matrix = js.mean()
    if js.count:
        heads_rows += js_rows(step, js_matrix, n_head, windows)
    return ProbeResult(
        probe_heads=pd.DataFrame(heads_rows),
        probe_relations=syntax.relations_table(step, min_count),
        probe_coref=coref.coref_table(step, windows) if coref_docs else pd.DataFrame(),
        js_distance=js_matrix,
        n_syntax_docs=len(syntax_docs),
        n_coref_docs=len(coref_docs),
    )


def _same_words(a: Document, b: Document) -> bool:
    """The coreference document's word indices mean the same words as the syntax document's."""
    return [(w.start, w.end) for w in a.words] == [(w.start, w.end) for w in b.words]
