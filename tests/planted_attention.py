"""Attention planted from gold structure for the probe tests (no model): a source that answers the probe's
``encode`` and ``attend`` from attention looked up by the input's ids, each word's tokens, and a document's
gold links read from its words."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.probes.alignment import align_words


class PlantedAttentionSource:
    """A probe source over the byte tokenizer: ``planted`` maps an input's ids to its (n_layer, n_head, n, n)
    attention; a subclass fills it."""

    n_layer, n_head = 1, 4

    def __init__(self, max_len: int = 100_000):
        self.tok = ByteTokenizer()
        self.max_len = max_len
        self.planted: dict[tuple, np.ndarray] = {}

    def word_tokens(self, doc):
        """(ids, alignment, tokens_of): the document's token ids, their words, and each word's tokens."""
        ids, offsets = self.tok.encode(doc.text)
        al = align_words(offsets, [(w.start, w.end) for w in doc.words])
        tokens_of = defaultdict(list)
        for t, u in enumerate(al.unit_of_token):
            tokens_of[int(u)].append(t)
        return ids, al, tokens_of

    def encode(self, text):
        return self.tok.encode(text)

    def attend(self, batch):
        T = max(len(b) for b in batch)
        out = np.zeros((len(batch), self.n_layer, self.n_head, T, T), dtype=np.float32)
        for k, ids in enumerate(batch):
            out[k, :, :, : len(ids), : len(ids)] = self.planted[tuple(ids)]
        return out


def gold_links(doc):
    """(head_of, dependents): each word's gold head and each head's dependents, the root's link left out."""
    head_of, deps = {}, defaultdict(list)
    for dep, head, _ in doc.gold_heads():
        if head >= 0:
            head_of[dep] = head
            deps[head].append(dep)
    return head_of, deps
