"""The syntactic probe on a causal model: every dependency read at its later word, looking back.

A decoder token attends only to itself and earlier tokens, so of a dependency between words ``a <
b`` only the later word's attention can hold it. Per head, each word's *backward prediction* is
the most-attended earlier word of its own sentence (``aah_viz.probes.predict`` with ``causal``),
and a link is right when the later word's prediction is the earlier word. Each link has one
direction, fixed by the text:

- ``dependent_to_head``: the head word comes first, the dependent attends back to it (``obj``);
- ``head_to_dependent``: the dependent comes first, the head word attends back to it (``det``,
  ``amod``, ``nsubj`` in English).

A word has one argmax, so a head word with several earlier dependents gets at most one of them
right; the baseline has the same limit. Scores are per relation and direction (rarer than
``min_count``, ``root`` and ``punct`` left out). The baseline is the best fixed *backward* offset:
at the later word, always the word 1, 2 or 3 back in the sentence (``baseline_offset`` -1, -2, -3,
relative to the later word; ties go to the first in ``BACKWARD_OFFSETS`` order). A head is
*positional* when at least half of its backward predictions, over every word, sit at one offset.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document
from aah_viz.probes.baselines import choice_index_backward, nearest_category_backward, upos_codes
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
from aah_viz.probes.syntax import (
    DEFAULT_BOOT,
    DEFAULT_MIN_COUNT,
    DIRECTIONS,
    MAX_OFFSET,
    RELATION_COLUMNS,
    count_prediction_offsets,
    gold_links,
    is_excluded,
    modal_offsets,
    relation_label,
)
from aah_viz.stats.resampling import cluster_mean_interval

CAUSAL_DIRECTIONS = ("dependent_to_head", "head_to_dependent")
SYNTAX_DIRECTIONS = DIRECTIONS + CAUSAL_DIRECTIONS  # every direction a probe_heads syntax metric can end in
BACKWARD_OFFSETS = (-3, -2, -1)
BACKWARD = "backward"  # the positional profile's name: one prediction per word, looking back


def causal_links(doc: Document, labels: str = "full"):
    """Every gold link as (later word, earlier word, direction index, relation, sentence index)."""
    gold = gold_links(doc, labels)
    later = np.maximum(gold.dependent, gold.head)
    earlier = np.minimum(gold.dependent, gold.head)
    direction = (gold.head > gold.dependent).astype(np.int64)  # 0 dependent_to_head, 1 head_to_dependent
    return later, earlier, direction, gold.relation, gold.sentence


def backward_offset_hits(later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """(n_links, len(BACKWARD_OFFSETS)) bool: the word at each backward offset from the later word is
    the earlier one. Both words lie in one sentence, so the offset never leaves it."""
    return (earlier[:, None] - later[:, None]) == np.array(BACKWARD_OFFSETS)[None, :]


class CausalSyntaxScorer:
    """Keeps, per gold link, whether every head's backward prediction at the later word found the
    earlier word and whether each backward offset did; per head, the offsets of its predictions."""

    def __init__(self, n_layer: int, n_head: int, labels: str = "universal", context: str = "sentence"):
        relation_label("", labels)  # validates
        self.n_layer, self.n_head = n_layer, n_head
        self.labels, self.context = labels, context
        n_heads = n_layer * n_head
        self._relation: list[np.ndarray] = []
        self._direction: list[np.ndarray] = []
        self._sentence: list[np.ndarray] = []
        self._hits: list[np.ndarray] = []  # (n_links, n_heads)
        self._base: list[np.ndarray] = []  # (n_links, len(BACKWARD_OFFSETS))
        self._choice: list[np.ndarray] = []  # (n_links, n_heads) index of the picked word among the earlier ones
        self._n_choices: list[np.ndarray] = []  # (n_links,) earlier words of the sentence
        self._pos: list[np.ndarray] = []  # (n_links,) the nearest earlier word of the answer's UPOS is right
        self.offset_counts = np.zeros((n_heads, 2 * MAX_OFFSET + 1), dtype=np.int64)
        self.predicted = np.zeros(n_heads, dtype=np.int64)
        self.n_sentences = 0
        self.n_docs = 0

    def add(self, doc: Document, backward: np.ndarray, first_sentence: int | None = None) -> None:
        """``backward``: (n_heads, n_words) the most-attended earlier word of each word's sentence, -1 none;
        the document's sentences are numbered from ``first_sentence`` (default: after those added so far)."""
        later, earlier, direction, relation, sentence = causal_links(doc, self.labels)
        self.n_docs += 1
        count_prediction_offsets(self.offset_counts, self.predicted, backward)  # positional profile, every word
        if len(later):
            self._hits.append((backward[:, later] == earlier[None, :]).T)
            self._relation.append(relation)
            self._direction.append(direction)
            self._sentence.append(sentence + (self.n_sentences if first_sentence is None else first_sentence))
            self._base.append(backward_offset_hits(later, earlier))
            start = gold_links(doc, self.labels).sentence_start
            self._choice.append(choice_index_backward(backward[:, later], start).T.astype(np.int16))
            self._n_choices.append(later - start)
            self._pos.append(nearest_category_backward(upos_codes(doc), later, earlier))
        self.n_sentences += len(doc.sentences)

    # ----------------------------------------------------------------------------- accumulated views
    def _links(self):
        if not self._hits:
            n_heads = self.n_layer * self.n_head
            return (
                np.zeros(0, dtype=object),
                np.zeros(0, dtype=np.int64),
                np.zeros(0, dtype=np.int64),
                np.zeros((0, n_heads), dtype=bool),
                np.zeros((0, len(BACKWARD_OFFSETS)), dtype=bool),
            )
        return tuple(
            np.concatenate(x) for x in (self._relation, self._direction, self._sentence, self._hits, self._base)
        )

    def _choices(self):
        """Per link: every head's picked word among the earlier ones, their number, the ``pos`` baseline."""
        if not self._choice:
            n_heads = self.n_layer * self.n_head
            return np.zeros((0, n_heads), dtype=np.int16), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        return tuple(np.concatenate(x) for x in (self._choice, self._n_choices, self._pos))

    def claims(
        self, step: int, min_count: int = DEFAULT_MIN_COUNT, settings: Settings = DEFAULT_SETTINGS
    ) -> tuple[pd.DataFrame, list[dict]]:
        """``probe_claims`` rows (``aah_viz.probes.claims``), one per relation and direction (the baselines
        are the backward offsets and ``pos``, the nearest earlier word of the answer's UPOS), and the
        probe_heads rows of every head's interval on each (``REL:DIRECTION:low`` / ``:high``)."""
        rel, direction, sentence, hits, base = self._links()
        choice, n_choices, pos = self._choices()
        rows, intervals = [], []
        for name, d in self.included(min_count):
            mask = (rel == name) & (direction == d)
            baselines = {f"offset:{k}": base[mask, i] for i, k in enumerate(BACKWARD_OFFSETS)}
            baselines["pos"] = pos[mask]
            items = Items(
                sentence[mask], hits[mask], choice[mask], n_choices[mask], np.ones(int(mask.sum())), baselines
            )
            row = claim(items, settings)
            flat, low, high = split_claim(row)
            metric = f"{name}:{CAUSAL_DIRECTIONS[d]}"
            intervals += interval_rows(step, lambda col, metric=metric: (metric, col), low, high, self.n_head)
            offsets = base[mask].mean(axis=0)
            k = int(np.argmax(offsets))
            # the later word's prediction sits at the best offset exactly when it picks that earlier word
            at_offset = choice[mask, flat] == n_choices[mask] + BACKWARD_OFFSETS[k]
            rows.append(
                syntax_claim(
                    row,
                    step=step,
                    relation=name,
                    direction=CAUSAL_DIRECTIONS[d],
                    best_direction=CAUSAL_DIRECTIONS[d],
                    flat=flat,
                    n_head=self.n_head,
                    offset_acc=float(offsets[k]),
                    pos_acc=float(pos[mask].mean()),
                    offset_share=float(at_offset.mean()),
                )
            )
        return pd.DataFrame(rows, columns=CLAIM_COLUMNS), intervals

    @property
    def count(self) -> dict[str, int]:
        """Links per relation, both directions together."""
        relation = self._links()[0]
        names, counts = np.unique(relation.astype(str), return_counts=True) if len(relation) else ([], [])
        return {str(r): int(c) for r, c in zip(names, counts)}

    def direction_counts(self) -> dict[str, dict[str, int]]:
        """relation -> direction -> links (``root`` and ``punct`` left out), every relation however rare."""
        rel, direction = self._links()[:2]
        out: dict[str, dict[str, int]] = {}
        for name in sorted({str(r) for r in rel}):
            if is_excluded(name):
                continue
            mask = rel == name
            out[name] = {d: int((direction[mask] == i).sum()) for i, d in enumerate(CAUSAL_DIRECTIONS)}
        return out

    def included(self, min_count: int) -> list[tuple[str, int]]:
        """(relation, direction index) pairs with at least ``min_count`` links."""
        return [
            (r, i)
            for r, per in self.direction_counts().items()
            for i, d in enumerate(CAUSAL_DIRECTIONS)
            if per[d] >= min_count
        ]

    def positional(self) -> tuple[np.ndarray, np.ndarray]:
        """(n_heads,) modal non-zero offset of each head's backward predictions and its share of them."""
        return modal_offsets(self.offset_counts, self.predicted)

    def relations_table(
        self, step: int, min_count: int = DEFAULT_MIN_COUNT, n_boot: int = DEFAULT_BOOT, seed: int = 0
    ) -> pd.DataFrame:
        """One row per relation and direction (``direction`` says which); columns as the encoder's table."""
        rel, direction, sentence, hits, base = self._links()
        offset, share = self.positional()
        rng = np.random.default_rng(seed)
        rows = []
        for name, d in self.included(min_count):
            mask = (rel == name) & (direction == d)
            acc = hits[mask].mean(axis=0)  # (n_heads,)
            flat = int(np.argmax(acc))  # ties: low layer/head first
            base_acc = base[mask].mean(axis=0)
            k = int(np.argmax(base_acc))  # ties: the first offset in BACKWARD_OFFSETS order
            diff = hits[mask, flat].astype(np.int64) - base[mask, k].astype(np.int64)
            lo, hi = cluster_mean_interval(sentence[mask], diff, n_boot, rng)
            rows.append(
                {
                    "step": step,
                    "relation": name,
                    "count": int(mask.sum()),
                    "best_layer": flat // self.n_head,
                    "best_head": flat % self.n_head,
                    "direction": CAUSAL_DIRECTIONS[d],
                    "best_acc": float(acc[flat]),
                    "baseline_offset": BACKWARD_OFFSETS[k],
                    "baseline_acc": float(base_acc[k]),
                    "delta": float(acc[flat] - base_acc[k]),
                    "delta_ci_low": lo,
                    "delta_ci_high": hi,
                    "positional": bool(share[flat] >= POSITIONAL_SHARE),
                    "positional_offset": int(offset[flat]),
                    "positional_share": float(share[flat]),
                    "n_sentences": int(len(np.unique(sentence[mask]))),
                    "labels": self.labels,
                    "context": self.context,
                }
            )
        return pd.DataFrame(rows, columns=RELATION_COLUMNS)

    def head_rows(self, step: int, min_count: int = DEFAULT_MIN_COUNT) -> list[dict]:
        """probe_heads rows.

        Probe ``syntax``: ``REL:DIRECTION`` per relation and direction with ``min_count`` links,
        ``all:DIRECTION`` over every link of that direction but ``root``/``punct``, ``score`` (the
        mean over the listed relation-directions) and ``score_minus_baseline`` (the same mean of
        accuracy minus that relation-direction's best backward offset). Probe ``positional``:
        ``share:backward`` and ``offset:backward``.
        """
        rel, direction, _, hits, base = self._links()
        included = self.included(min_count)
        keep = np.array([not is_excluded(r) for r in rel], dtype=bool)
        per_pair = {(r, d): hits[(rel == r) & (direction == d)].mean(axis=0) for r, d in included}
        baseline = {(r, d): base[(rel == r) & (direction == d)].mean(axis=0).max() for r, d in included}
        all_acc = {
            d: hits[keep & (direction == d)].mean(axis=0)
            for d in range(len(CAUSAL_DIRECTIONS))
            if (keep & (direction == d)).any()
        }
        offset, share = self.positional()
        rows = []
        for flat in range(self.n_layer * self.n_head):
            layer, head = divmod(flat, self.n_head)

            def row(probe, metric, value):
                rows.append(dict(step=step, layer=layer, head=head, probe=probe, metric=metric, value=float(value)))

            scores, gains = [], []
            for r, d in included:
                acc = per_pair[(r, d)][flat]
                row("syntax", f"{r}:{CAUSAL_DIRECTIONS[d]}", acc)
                scores.append(acc)
                gains.append(acc - baseline[(r, d)])
            for d, acc in all_acc.items():
                row("syntax", f"all:{CAUSAL_DIRECTIONS[d]}", acc[flat])
            row("syntax", "score", np.mean(scores) if scores else np.nan)
            row("syntax", "score_minus_baseline", np.mean(gains) if gains else np.nan)
            if self.predicted[flat]:
                row("positional", f"share:{BACKWARD}", share[flat])
                row("positional", f"offset:{BACKWARD}", offset[flat])
        return rows
