"""The syntactic probe (Clark et al. 2019): does a head attend from a word to its syntactic head?

Per head and direction a word's predicted head is the most-attended word (diagonal zeroed):

- ``dep2head``: the word the dependent attends to most;
- ``head2dep``: the word that attends most to the dependent.

Accuracy per relation is the share of words with that relation whose prediction is the gold
head. Per relation the table gives the best (layer, head, direction) beside the best
fixed-offset baseline (always the word at relative offset -3, -2, -1, +1 or +2 in the sentence).
Relations rarer than ``min_count``, ``root`` and ``punct`` are left out of the table.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document

DIRECTIONS = ("dep2head", "head2dep")
EXCLUDED_RELATIONS = ("root", "punct")
OFFSETS = (-3, -2, -1, 1, 2)
DEFAULT_MIN_COUNT = 100


def is_excluded(relation: str) -> bool:
    return relation.split(":", 1)[0] in EXCLUDED_RELATIONS


@dataclass
class Gold:
    dependent: np.ndarray  # document-level word index
    head: np.ndarray  # document-level word index of the gold head
    relation: np.ndarray  # str
    sentence_start: np.ndarray  # document-level index of the dependent's sentence's first word
    sentence_len: np.ndarray


def gold_links(doc: Document) -> Gold:
    """Every word with a gold head (the root and words without a tree left out)."""
    dep, head, rel, s_start, s_len = [], [], [], [], []
    for sentence, base in zip(doc.sentences, doc.sentence_offsets):
        for i, word in enumerate(sentence.words):
            if word.head is None or word.head == 0:
                continue
            dep.append(base + i)
            head.append(base + word.head - 1)
            rel.append(word.deprel or "_")
            s_start.append(base)
            s_len.append(len(sentence.words))
    return Gold(
        np.array(dep, dtype=np.int64),
        np.array(head, dtype=np.int64),
        np.array(rel, dtype=object),
        np.array(s_start, dtype=np.int64),
        np.array(s_len, dtype=np.int64),
    )


def offset_baseline_counts(docs: list[Document]) -> dict[str, dict[int, list[int]]]:
    """relation -> offset -> [correct, count] for the fixed-offset baselines (no model involved)."""
    table: dict[str, dict[int, list[int]]] = defaultdict(lambda: {k: [0, 0] for k in OFFSETS})
    for doc in docs:
        gold = gold_links(doc)
        position = gold.dependent - gold.sentence_start
        for k in OFFSETS:
            target = position + k
            inside = (target >= 0) & (target < gold.sentence_len)
            hit = inside & (gold.sentence_start + target == gold.head)
            for rel, h in zip(gold.relation, hit):
                cell = table[rel][k]
                cell[0] += int(h)
                cell[1] += 1
    return dict(table)


class SyntaxScorer:
    """Accumulates per-head, per-direction, per-relation correct counts over documents."""

    def __init__(self, n_layer: int, n_head: int):
        self.n_layer, self.n_head = n_layer, n_head
        self.correct: dict[str, np.ndarray] = {}  # relation -> (2, n_layer*n_head)
        self.count: dict[str, int] = defaultdict(int)
        self.docs: list[Document] = []

    def add(self, doc: Document, dep2head: np.ndarray, head2dep: np.ndarray) -> None:
        gold = gold_links(doc)
        self.docs.append(doc)
        if len(gold.dependent) == 0:
            return
        hits = np.stack(
            [dep2head[:, gold.dependent] == gold.head[None], head2dep[:, gold.dependent] == gold.head[None]]
        )  # (2, n_heads, n_links)
        for rel in set(gold.relation):
            mask = gold.relation == rel
            counts = hits[:, :, mask].sum(axis=2)
            if rel in self.correct:
                self.correct[rel] += counts
            else:
                self.correct[rel] = counts.astype(np.int64)
            self.count[rel] += int(mask.sum())

    def included_relations(self, min_count: int) -> list[str]:
        return sorted(r for r, n in self.count.items() if n >= min_count and not is_excluded(r))

    def relations_table(self, step: int, min_count: int = DEFAULT_MIN_COUNT) -> pd.DataFrame:
        baselines = offset_baseline_counts(self.docs)
        rows = []
        for rel in self.included_relations(min_count):
            acc = self.correct[rel] / self.count[rel]  # (2, n_heads)
            d, flat = np.unravel_index(int(np.argmax(acc)), acc.shape)  # ties: dep2head, low layer/head first
            base = baselines[rel]
            base_acc = {k: base[k][0] / base[k][1] for k in OFFSETS}
            best_k = max(OFFSETS, key=lambda k: (base_acc[k], -OFFSETS.index(k)))
            rows.append(
                {
                    "step": step,
                    "relation": rel,
                    "count": self.count[rel],
                    "best_layer": int(flat // self.n_head),
                    "best_head": int(flat % self.n_head),
                    "direction": DIRECTIONS[d],
                    "best_acc": float(acc[d, flat]),
                    "baseline_offset": best_k,
                    "baseline_acc": float(base_acc[best_k]),
                }
            )
        return pd.DataFrame(
            rows,
            columns=[
                "step",
                "relation",
                "count",
                "best_layer",
                "best_head",
                "direction",
                "best_acc",
                "baseline_offset",
                "baseline_acc",
            ],
        )

    def head_rows(self, step: int, min_count: int = DEFAULT_MIN_COUNT) -> list[dict]:
        """probe_heads rows: ``REL:DIRECTION`` per included relation, ``all:DIRECTION`` over every
        non-excluded word, and ``score``: the mean over included relations of the better direction."""
        n_heads = self.n_layer * self.n_head
        included = self.included_relations(min_count)
        all_rel = [r for r in self.count if not is_excluded(r)]
        total = sum(self.count[r] for r in all_rel)
        all_correct = sum((self.correct[r] for r in all_rel), np.zeros((2, n_heads), dtype=np.int64))
        rows = []
        for flat in range(n_heads):
            layer, head = divmod(flat, self.n_head)

            def row(metric, value):
                rows.append(
                    {
                        "step": step,
                        "layer": layer,
                        "head": head,
                        "probe": "syntax",
                        "metric": metric,
                        "value": float(value),
                    }
                )

            best = []
            for rel in included:
                acc = self.correct[rel][:, flat] / self.count[rel]
                row(f"{rel}:dep2head", acc[0])
                row(f"{rel}:head2dep", acc[1])
                best.append(acc.max())
            if total:
                row("all:dep2head", all_correct[0, flat] / total)
                row("all:head2dep", all_correct[1, flat] / total)
            row("score", np.mean(best) if best else np.nan)
        return rows
