"""The syntactic probe (Clark et al. 2019): does a head attend from a word to its syntactic head?

Per head and direction a word's predicted head is the most-attended other word of its own
sentence (:mod:`aah_viz.probes.predict` restricts the argmax):

- ``dep2head``: the word the dependent attends to most;
- ``head2dep``: the word that attends most to the dependent.

Accuracy per relation is the share of words with that relation whose prediction is the gold
head. Per relation the table gives the best (layer, head, direction) beside the best
fixed-offset baseline (always the word at relative offset -3, -2, -1, +1 or +2 in the sentence),
the difference with a bootstrap interval over sentences, and whether the best head is
*positional* (most of its predictions, over every word, sit at one fixed offset). Relations are
universal (``nmod:poss`` counts as ``nmod``) or full labels; those rarer than ``min_count``,
``root`` and ``punct`` are left out of the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document
from aah_viz.probes.baselines import choice_index_other, nearest_category_either, upos_codes
from aah_viz.probes.claims import (
    CLAIM_COLUMNS,
    DEFAULT_SETTINGS,
    POSITIONAL_SHARE,
    Items,
    Settings,
    claim,
    interval_rows,
    split_claim,
    syntax_claim,
)
from aah_viz.stats.resampling import cluster_mean_interval

DIRECTIONS = ("dep2head", "head2dep")
EXCLUDED_RELATIONS = ("root", "punct")
OFFSETS = (-3, -2, -1, 1, 2)
DEFAULT_MIN_COUNT = 100
RELATION_LABELS = ("universal", "full")
MAX_OFFSET = 8  # predicted offsets counted for the positional label: -8..8
DEFAULT_BOOT = 1000

RELATION_COLUMNS = [
    "step",
    "relation",
    "count",
    "best_layer",
    "best_head",
    "direction",
    "best_acc",
    "baseline_offset",
    "baseline_acc",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
    "positional",
    "positional_offset",
    "positional_share",
    "n_sentences",
    "labels",
    "context",
]


def relation_label(deprel: str | None, labels: str = "universal") -> str:
    """The relation a word is counted under: ``nmod:poss`` -> ``nmod`` for universal labels."""
    if labels not in RELATION_LABELS:
        raise ValueError(f"relation labels must be one of {RELATION_LABELS}, got {labels!r}")
    rel = deprel or "_"
    return rel.split(":", 1)[0] if labels == "universal" else rel


def is_excluded(relation: str) -> bool:
    return relation.split(":", 1)[0] in EXCLUDED_RELATIONS


@dataclass
class Gold:
    dependent: np.ndarray  # document-level word index
    head: np.ndarray  # document-level word index of the gold head
    relation: np.ndarray  # str
    sentence_start: np.ndarray  # document-level index of the dependent's sentence's first word
    sentence_len: np.ndarray
    sentence: np.ndarray  # index of the dependent's sentence in the document


def gold_links(doc: Document, labels: str = "full") -> Gold:
    """Every word with a gold head (the root and words without a tree left out)."""
    dep, head, rel, s_start, s_len, s_index = [], [], [], [], [], []
    for k, (sentence, base) in enumerate(zip(doc.sentences, doc.sentence_offsets)):
        for i, word in enumerate(sentence.words):
            if word.head is None or word.head == 0:
                continue
            dep.append(base + i)
            head.append(base + word.head - 1)
            rel.append(relation_label(word.deprel, labels))
            s_start.append(base)
            s_len.append(len(sentence.words))
            s_index.append(k)
    return Gold(
        np.array(dep, dtype=np.int64),
        np.array(head, dtype=np.int64),
        np.array(rel, dtype=object),
        np.array(s_start, dtype=np.int64),
        np.array(s_len, dtype=np.int64),
        np.array(s_index, dtype=np.int64),
    )


def offset_hits(gold: Gold) -> np.ndarray:
    """(n_links, len(OFFSETS)) bool: the word at each fixed offset in the sentence is the gold head."""
    position = gold.dependent - gold.sentence_start
    target = position[:, None] + np.array(OFFSETS)[None, :]
    inside = (target >= 0) & (target < gold.sentence_len[:, None])
    return inside & (gold.sentence_start[:, None] + target == gold.head[:, None])


def offset_baseline_counts(docs: list[Document], labels: str = "full") -> dict[str, dict[int, list[int]]]:
    """relation -> offset -> [correct, count] for the fixed-offset baselines (no model involved)."""
    table: dict[str, dict[int, list[int]]] = {}
    for doc in docs:
        gold = gold_links(doc, labels)
        hits = offset_hits(gold)
        for rel, row in zip(gold.relation, hits):
            cells = table.setdefault(rel, {k: [0, 0] for k in OFFSETS})
            for k, h in zip(OFFSETS, row):
                cells[k][0] += int(h)
                cells[k][1] += 1
    return table


def count_prediction_offsets(counts: np.ndarray, predicted: np.ndarray, pred: np.ndarray) -> None:
    """Add, per head, the offset in words of each prediction ``pred`` ((n_heads, n_words), -1: none)
    to ``counts`` ((n_heads, 2 * MAX_OFFSET + 1), offsets beyond MAX_OFFSET not counted) and the
    number of predictions made to ``predicted`` (n_heads,), both in place."""
    ok = pred >= 0
    offset = np.where(ok, pred - np.arange(pred.shape[1])[None, :], 0)
    counted = ok & (np.abs(offset) <= MAX_OFFSET)
    predicted += ok.sum(axis=1)
    flat = np.nonzero(counted)
    np.add.at(counts, (flat[0], offset[flat] + MAX_OFFSET), 1)


def modal_offsets(counts: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The modal non-zero offset of each head's predictions and its share of them (any leading shape)."""
    counts = counts.copy()
    counts[..., MAX_OFFSET] = 0  # offset 0 cannot be predicted (the diagonal is zeroed)
    modal = counts.argmax(axis=-1)
    share = np.take_along_axis(counts, modal[..., None], axis=-1)[..., 0] / np.maximum(predicted, 1)
    return modal - MAX_OFFSET, share


class SyntaxScorer:
    """Keeps, per gold link, whether every head (both directions) and every offset baseline got it
    right, and per head the offsets of its predictions over every word (the positional label)."""

    def __init__(self, n_layer: int, n_head: int, labels: str = "universal", context: str = "sentence"):
        relation_label("", labels)  # validates
        self.n_layer, self.n_head = n_layer, n_head
        self.labels, self.context = labels, context
        n_heads = n_layer * n_head
        self._relation: list[np.ndarray] = []
        self._sentence: list[np.ndarray] = []
        self._hits: list[np.ndarray] = []  # (n_links, 2, n_heads)
        self._base: list[np.ndarray] = []  # (n_links, len(OFFSETS))
        self._choice: list[np.ndarray] = []  # (n_links, 2 * n_heads) index of the picked word among the others
        self._n_choices: list[np.ndarray] = []  # (n_links,) other words of the sentence
        self._pos: list[np.ndarray] = []  # (n_links,) the nearest word of the head's UPOS is the head
        self._position: list[np.ndarray] = []  # (n_links,) the dependent's index in its sentence
        self.offset_counts = np.zeros((2, n_heads, 2 * MAX_OFFSET + 1), dtype=np.int64)
        self.predicted = np.zeros((2, n_heads), dtype=np.int64)  # words with any prediction
        self.n_sentences = 0
        self.n_docs = 0

    def add(self, doc: Document, dep2head: np.ndarray, head2dep: np.ndarray, first_sentence: int | None = None) -> None:
        """One document's predictions; its sentences are numbered from ``first_sentence`` (default: after
        the ones added so far), so that the bootstrap sees the same sentences in any order of adding."""
        gold = gold_links(doc, self.labels)
        self.n_docs += 1
        for d, pred in enumerate((dep2head, head2dep)):  # positional profile over every word
            count_prediction_offsets(self.offset_counts[d], self.predicted[d], pred)
        if len(gold.dependent):
            hits = np.stack([dep2head[:, gold.dependent], head2dep[:, gold.dependent]]) == gold.head[None, None]
            self._hits.append(np.transpose(hits, (2, 0, 1)))
            self._relation.append(gold.relation)
            self._sentence.append(gold.sentence + (self.n_sentences if first_sentence is None else first_sentence))
            self._base.append(offset_hits(gold))
            picks = [
                choice_index_other(p[:, gold.dependent], gold.dependent, gold.sentence_start)
                for p in (dep2head, head2dep)
            ]
            self._choice.append(np.concatenate(picks).T.astype(np.int16))
            self._n_choices.append(gold.sentence_len - 1)
            self._position.append(gold.dependent - gold.sentence_start)
            self._pos.append(
                nearest_category_either(
                    upos_codes(doc), gold.dependent, gold.head, gold.sentence_start, gold.sentence_len
                )
            )
        self.n_sentences += len(doc.sentences)

    # ----------------------------------------------------------------------------- accumulated views
    def _links(self):
        n_heads = self.n_layer * self.n_head
        if not self._hits:
            return (
                np.zeros(0, dtype=object),
                np.zeros(0, dtype=np.int64),
                np.zeros((0, 2, n_heads), dtype=bool),
                np.zeros((0, len(OFFSETS)), dtype=bool),
            )
        return (
            np.concatenate(self._relation),
            np.concatenate(self._sentence),
            np.concatenate(self._hits),
            np.concatenate(self._base),
        )

    @property
    def count(self) -> dict[str, int]:
        relation = self._links()[0]
        names, counts = np.unique(relation.astype(str), return_counts=True) if len(relation) else ([], [])
        return {str(r): int(c) for r, c in zip(names, counts)}

    def included_relations(self, min_count: int) -> list[str]:
        return sorted(r for r, n in self.count.items() if n >= min_count and not is_excluded(r))

    def positional(self) -> tuple[np.ndarray, np.ndarray]:
        """(2, n_heads) modal non-zero offset of each head's predictions and its share of them."""
        return modal_offsets(self.offset_counts, self.predicted)

    def relations_table(
        self, step: int, min_count: int = DEFAULT_MIN_COUNT, n_boot: int = DEFAULT_BOOT, seed: int = 0
    ) -> pd.DataFrame:
        rel, sentence, hits, base = self._links()
        offset, share = self.positional()
        rng = np.random.default_rng(seed)
        rows = []
        for name in self.included_relations(min_count):
            mask = rel == name
            acc = hits[mask].mean(axis=0)  # (2, n_heads)
            d, flat = np.unravel_index(int(np.argmax(acc)), acc.shape)  # ties: dep2head, low layer/head first
            base_acc = base[mask].mean(axis=0)
            k = int(np.argmax(base_acc))  # ties: the first offset in OFFSETS order
            diff = hits[mask, d, flat].astype(np.int64) - base[mask, k].astype(np.int64)
            lo, hi = cluster_mean_interval(sentence[mask], diff, n_boot, rng)
            rows.append(
                {
                    "step": step,
                    "relation": name,
                    "count": int(mask.sum()),
                    "best_layer": int(flat // self.n_head),
                    "best_head": int(flat % self.n_head),
                    "direction": DIRECTIONS[d],
                    "best_acc": float(acc[d, flat]),
                    "baseline_offset": OFFSETS[k],
                    "baseline_acc": float(base_acc[k]),
                    "delta": float(acc[d, flat] - base_acc[k]),
                    "delta_ci_low": lo,
                    "delta_ci_high": hi,
                    "positional": bool(share[d, flat] >= POSITIONAL_SHARE),
                    "positional_offset": int(offset[d, flat]),
                    "positional_share": float(share[d, flat]),
                    "n_sentences": int(len(np.unique(sentence[mask]))),
                    "labels": self.labels,
                    "context": self.context,
                }
            )
        return pd.DataFrame(rows, columns=RELATION_COLUMNS)

    def _choices(self):
        if not self._choice:
            n_heads = self.n_layer * self.n_head
            return np.zeros((0, 2 * n_heads), dtype=np.int16), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        return tuple(np.concatenate(x) for x in (self._choice, self._n_choices, self._pos))

    def claims(
        self, step: int, min_count: int = DEFAULT_MIN_COUNT, settings: Settings = DEFAULT_SETTINGS
    ) -> tuple[pd.DataFrame, list[dict]]:
        """``probe_claims`` rows (``aah_viz.probes.claims``), one per relation: the best of every head in
        both directions; baselines the offsets and ``pos`` (nearest word of the head's UPOS). And the
        probe_heads rows of every head's interval per relation and direction (``REL:DIRECTION:low`` / ``:high``)."""
        rel, sentence, hits, base = self._links()
        choice, n_choices, pos = self._choices()
        n_heads = self.n_layer * self.n_head
        rows, intervals = [], []
        for name in self.included_relations(min_count):
            mask = rel == name
            flat_hits = hits[mask].reshape(int(mask.sum()), 2 * n_heads)  # dep2head columns first
            baselines = {f"offset:{k}": base[mask, i] for i, k in enumerate(OFFSETS)}
            baselines["pos"] = pos[mask]
            items = Items(sentence[mask], flat_hits, choice[mask], n_choices[mask], np.ones(int(mask.sum())), baselines)
            row = claim(items, settings)
            best, low, high = split_claim(row)
            d, flat = divmod(best, n_heads)

            def metric_of(col, name=name):
                return f"{name}:{DIRECTIONS[col // n_heads]}", col % n_heads

            intervals += interval_rows(step, metric_of, low, high, self.n_head)
            offsets = base[mask].mean(axis=0)
            k = int(np.argmax(offsets))
            # the best head's pick is the word at the best offset: the offset baseline and the head agree
            agree = (choice[mask, d * n_heads + flat] >= 0) & (
                choice[mask, d * n_heads + flat] == self._offset_choice(mask, OFFSETS[k])
            )
            rows.append(
                syntax_claim(
                    row,
                    step=step,
                    relation=name,
                    direction=None,
                    best_direction=DIRECTIONS[d],
                    flat=flat,
                    n_head=self.n_head,
                    offset_acc=float(offsets[k]),
                    pos_acc=float(pos[mask].mean()),
                    offset_share=float(agree.mean()),
                )
            )
        return pd.DataFrame(rows, columns=CLAIM_COLUMNS), intervals

    def _offset_choice(self, mask: np.ndarray, offset: int) -> np.ndarray:
        """Per link of ``mask``: the index (among the sentence's other words) of the word at ``offset``
        from the dependent, -1 outside the sentence."""
        position = np.concatenate(self._position)[mask]
        length = np.concatenate(self._n_choices)[mask] + 1
        target = position + offset
        inside = (target >= 0) & (target < length)
        return np.where(inside, np.where(target > position, target - 1, target), -2)

    def head_rows(self, step: int, min_count: int = DEFAULT_MIN_COUNT) -> list[dict]:
        """probe_heads rows.

        Probe ``syntax``: ``REL:DIRECTION`` per included relation, ``all:DIRECTION`` over every
        non-excluded word, ``score`` (the mean over included relations of the better direction)
        and ``score_minus_baseline`` (the mean over included relations of the better direction's
        accuracy minus the relation's best offset baseline). Probe ``positional``:
        ``share:DIRECTION`` and ``offset:DIRECTION``, the modal offset of the head's predictions
        over every word and the share of predictions at it.
        """
        rel, _, hits, base = self._links()
        included = self.included_relations(min_count)
        keep = np.array([not is_excluded(r) for r in rel], dtype=bool)
        all_acc = hits[keep].mean(axis=0) if keep.any() else None  # (2, n_heads)
        per_rel = {r: hits[rel == r].mean(axis=0) for r in included}
        baseline = {r: base[rel == r].mean(axis=0).max() for r in included}
        offset, share = self.positional()
        rows = []
        for flat in range(self.n_layer * self.n_head):
            layer, head = divmod(flat, self.n_head)

            def row(probe, metric, value):
                rows.append(dict(step=step, layer=layer, head=head, probe=probe, metric=metric, value=float(value)))

            best, gain = [], []
            for r in included:
                acc = per_rel[r][:, flat]
                row("syntax", f"{r}:dep2head", acc[0])
                row("syntax", f"{r}:head2dep", acc[1])
                best.append(acc.max())
                gain.append(acc.max() - baseline[r])
            if all_acc is not None:
                row("syntax", "all:dep2head", all_acc[0, flat])
                row("syntax", "all:head2dep", all_acc[1, flat])
            row("syntax", "score", np.mean(best) if best else np.nan)
            row("syntax", "score_minus_baseline", np.mean(gain) if gain else np.nan)
            for d, direction in enumerate(DIRECTIONS):
                if self.predicted[d, flat]:
                    row("positional", f"share:{direction}", share[d, flat])
                    row("positional", f"offset:{direction}", offset[d, flat])
        return rows
