"""The coreference probe: does a mention's head word attend to an earlier mention of its chain?

For every mention with an earlier antecedent, a head is right when the word it attends to most,
among the words of the mentions that end before this mention starts, belongs to an earlier
mention of the same chain. Results are given per antecedent-distance bucket: the distance, in
tokens, from the first token of the nearest antecedent's head word to the first token of the
mention's head word. Bucket edges include the candidate windows, so a bucket at or above a
head's window holds antecedents that head cannot reach at all.

Baselines (no model): the nearest preceding mention; the nearest preceding mention with the same
head word (else the nearest); and a rule: a pronoun takes the nearest preceding name or noun
phrase that agrees in gender and number where both are known (else the nearest agreeing mention,
else the nearest), any other mention takes the nearest with the same head word (else the nearest).

On a causal model (``causal``) the probe asks what a decoder can answer where the question is
posed: a pronoun that comes before every other mention of its chain (cataphora, "When *she*
arrived, *Mary* ...") cannot attend to its antecedent, which the model has not read yet. Such
pronouns are left out and counted (:func:`cataphoric_pronouns`), and so is the same link read from
its other end (the later name attending back to the pronoun): a query needs an earlier mention of
its chain that is not such a pronoun. For GAP this leaves exactly the pronouns whose gold name
comes first, each asked against the names before it; the baselines are scored on the same queries
and, like the heads, only ever choose an earlier mention.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document, Mention
from aah_viz.probes.claims import CLAIM_COLUMNS, DEFAULT_SETTINGS, Items, Settings, claim, interval_rows, split_claim
from aah_viz.probes.predict import CorefQuery

BASE_EDGES = (1, 4, 8, 16)
BASELINES = ("nearest_mention", "same_head", "rule", "nearest_name", "first_name")


def flat_mentions(doc: Document) -> list[tuple[int, Mention]]:
    """(chain index, mention) for every mention, in text order."""
    items = [(c, m) for c, chain in enumerate(doc.chains) for m in chain.mentions]
    items.sort(key=lambda cm: (cm[1].start, -cm[1].end))
    return items


def _cataphoric(mentions: list[tuple[int, Mention]]) -> set[int]:
    """Indices of pronouns that come before every other mention of their chain (which has others)."""
    out = set()
    for index, (chain, mention) in enumerate(mentions):
        others = [m for c, m in mentions if c == chain and m is not mention]
        if mention.kind == "pronoun" and others and all(m.start >= mention.end for m in others):
            out.add(index)
    return out


def cataphoric_pronouns(doc: Document) -> int:
    """Pronouns whose antecedent comes only after them: what a causal model cannot resolve at the pronoun."""
    return len(_cataphoric(flat_mentions(doc)))


def coref_queries(doc: Document, causal: bool = False) -> list[CorefQuery]:
    """The probe's questions for one document: mentions with an earlier same-chain mention (with
    ``causal``, one that is not a cataphoric pronoun; see the module's docstring)."""
    mentions = flat_mentions(doc)
    left_out = _cataphoric(mentions) if causal else set()
    queries = []
    for index, (chain, mention) in enumerate(mentions):
        before = [i for i, (_, m) in enumerate(mentions) if m.end <= mention.start]
        if not any(mentions[i][0] == chain and i not in left_out for i in before):
            continue
        earlier = [mentions[i] for i in before]
        same = [m for c, m in earlier if c == chain]
        antecedent = max(same, key=lambda m: (m.end, m.start))
        correct_words = {w for c, m in earlier if c == chain for w in m.words}
        candidates = sorted({w for _, m in earlier for w in m.words})
        queries.append(
            CorefQuery(
                mention=index,
                head=mention.head,
                candidates=np.array(candidates, dtype=np.int64),
                correct=np.array([w in correct_words for w in candidates], dtype=bool),
                antecedent_head=antecedent.head,
            )
        )
    return queries


def mention_choice(mentions: list[tuple[int, Mention]], query: CorefQuery, chosen: np.ndarray) -> tuple:
    """What the null of one query needs: the earlier mention each head's chosen word belongs to (the
    first in text order that holds it; -1 for none), the number of earlier mentions, and how many of
    them are in the query's chain."""
    mention = mentions[query.mention][1]
    chain = mentions[query.mention][0]
    before = [i for i, (_, m) in enumerate(mentions) if m.end <= mention.start]
    group_of: dict[int, int] = {}
    for g, i in enumerate(before):
        for w in mentions[i][1].words:
            group_of.setdefault(int(w), g)
    choice = np.array([group_of.get(int(w), -1) for w in chosen], dtype=np.int64)
    n_correct = sum(1 for i in before if mentions[i][0] == chain)
    return choice, len(before), n_correct


def bucket_edges(windows: Sequence[int] = ()) -> list[int]:
    """Lower edges of the distance buckets: 1, 4, 8, 16 and every candidate window."""
    return sorted(set(BASE_EDGES) | {int(w) for w in windows if int(w) > 0})


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def bucket_ranges(edges: Sequence[int]) -> list[tuple[int, int | None]]:
    """(lo, hi) inclusive; the last bucket is open (hi None)."""
    return [(lo, (edges[i + 1] - 1) if i + 1 < len(edges) else None) for i, lo in enumerate(edges)]


def _agrees(query: Mention, other: Mention) -> bool:
    for a, b in ((query.gender, other.gender), (query.number, other.number)):
        if a is not None and b is not None and a != b:
            return False
    return True


def baseline_choices(doc: Document) -> dict[int, dict[str, int | None]]:
    """mention index -> baseline name -> chosen earlier mention index (None: no earlier mention)."""
    mentions = flat_mentions(doc)
    words = doc.words
    out = {}
    for index, (_, mention) in enumerate(mentions):
        earlier = [i for i, (_, m) in enumerate(mentions) if m.end <= mention.start]
        if not earlier:
            out[index] = {name: None for name in BASELINES}
            continue
        order = sorted(earlier, key=lambda i: (mentions[i][1].end, mentions[i][1].start), reverse=True)
        nearest = order[0]
        head_form = words[mention.head].form.lower()
        same_head = next((i for i in order if words[mentions[i][1].head].form.lower() == head_form), nearest)
        if mention.kind == "pronoun":
            agreeing = [i for i in order if _agrees(mention, mentions[i][1])]
            full = [i for i in agreeing if mentions[i][1].kind in ("name", "np")]
            rule = full[0] if full else (agreeing[0] if agreeing else nearest)
        else:
            rule = same_head
        names = [i for i in order if mentions[i][1].kind == "name"]
        out[index] = {
            "nearest_mention": nearest,
            "same_head": same_head,
            "rule": rule,
            "nearest_name": names[0] if names else nearest,
            "first_name": names[-1] if names else nearest,
        }
    return out


class CorefScorer:
    """Accumulates per head and per distance bucket; baselines alongside."""

    def __init__(self, n_layer: int, n_head: int, edges: Sequence[int]):
        self.n_layer, self.n_head = n_layer, n_head
        self.edges = list(edges)
        self.ranges = bucket_ranges(self.edges)
        n_b = len(self.ranges)
        self.head_correct = np.zeros((n_layer * n_head, n_b), dtype=np.int64)
        self.count = np.zeros(n_b, dtype=np.int64)
        self.base_correct = {name: np.zeros(n_b, dtype=np.int64) for name in BASELINES}
        self.distances: list[int] = []  # every query's antecedent distance (tokens), for sufficiency
        self.cataphora_left_out: int | None = None  # causal: pronouns left out (antecedent after them)
        # per scored query, for the selection-aware statistics (aah_viz.probes.claims), one array per document
        self.n_docs = 0
        self._doc: list[np.ndarray] = []  # (q,) document number
        self._hit: list[np.ndarray] = []  # (q, n_heads) bool
        self._choice: list[np.ndarray] = []  # (q, n_heads) the earlier mention each head picked, -1 none
        self._n_groups: list[np.ndarray] = []  # (q,) earlier mentions
        self._n_correct: list[np.ndarray] = []  # (q,) of them in the query's chain
        self._base_hit: list[np.ndarray] = []  # (q, len(BASELINES)) bool

    def bucket_of(self, distance: int) -> int:
        return max(0, int(np.searchsorted(self.edges, distance, side="right")) - 1)

    def add(self, doc: Document, predictions, doc_index: int | None = None) -> None:
        """One document's queries; ``doc_index`` numbers the document for the bootstrap (default: the
        documents added so far), so that the resampling is the same in any order of adding."""
        queries = predictions.queries
        number = self.n_docs if doc_index is None else int(doc_index)
        self.n_docs += 1
        if not queries:
            return
        alignment = predictions.alignment
        first = alignment.word_first_token
        mentions = flat_mentions(doc)
        choices = baseline_choices(doc)
        per_query: list[tuple] = []
        for qi, q in enumerate(queries):
            if first[q.head] < 0 or first[q.antecedent_head] < 0:
                continue  # a word without tokens cannot be probed
            distance = int(first[q.head] - first[q.antecedent_head])
            self.distances.append(distance)
            b = self.bucket_of(distance)
            self.count[b] += 1
            chosen = predictions.coref[:, qi]  # (n_heads,) candidate word or -1
            correct_words = q.candidates[q.correct]
            self.head_correct[:, b] += np.isin(chosen, correct_words) & (chosen >= 0)
            chain = mentions[q.mention][0]
            base_hit = []
            for name in BASELINES:
                pick = choices[q.mention][name]
                base_hit.append(pick is not None and mentions[pick][0] == chain)
                self.base_correct[name][b] += int(base_hit[-1])
            hit = np.isin(chosen, correct_words) & (chosen >= 0)
            per_query.append((hit, *mention_choice(mentions, q, chosen), base_hit))
        if per_query:
            hit, choice, n_groups, n_correct, base_hit = zip(*per_query)
            self._doc.append(np.full(len(hit), number, dtype=np.int64))
            self._hit.append(np.stack(hit))
            self._choice.append(np.stack(choice).astype(np.int16))
            self._n_groups.append(np.array(n_groups, dtype=np.int64))
            self._n_correct.append(np.array(n_correct, dtype=np.int64))
            self._base_hit.append(np.array(base_hit, dtype=bool))

    def _rows(self, step, layer, head, method, correct, window):
        rows = []
        for (lo, hi), c, n in zip(self.ranges, correct, self.count):
            rows.append(_row(step, layer, head, method, bucket_label(lo, hi), lo, hi, int(c), int(n), window))
        rows.append(_row(step, layer, head, method, "all", 1, None, int(correct.sum()), int(self.count.sum()), window))
        return rows

    def coref_table(self, step: int, windows: np.ndarray) -> pd.DataFrame:
        rows = []
        for flat in range(self.n_layer * self.n_head):
            layer, head = divmod(flat, self.n_head)
            rows += self._rows(step, layer, head, "head", self.head_correct[flat], int(windows[layer, head]))
        for name in BASELINES:
            rows += self._rows(step, None, None, name, self.base_correct[name], None)
        return pd.DataFrame(rows)

    def _items(self) -> Items | None:
        if not self._hit:
            return None
        doc, hit, choice, n_groups, n_correct, base = (
            np.concatenate(x)
            for x in (self._doc, self._hit, self._choice, self._n_groups, self._n_correct, self._base_hit)
        )
        return Items(doc, hit, choice, n_groups, n_correct, {name: base[:, i] for i, name in enumerate(BASELINES)})

    def claims(self, step: int, settings: Settings = DEFAULT_SETTINGS) -> tuple[pd.DataFrame, list[dict]]:
        """The ``probe_claims`` row of coreference (relation ``all``): the best head over every query,
        resampling documents; the baselines are this probe's (``BASELINES``). And every head's interval as
        probe_heads rows (``coref:accuracy:low`` / ``:high``)."""
        items = self._items()
        if items is None:
            return pd.DataFrame(columns=CLAIM_COLUMNS), []
        row = claim(items, settings)
        flat, low, high = split_claim(row)
        intervals = interval_rows(step, lambda col: ("coref:accuracy", col), low, high, self.n_head)
        row.update(
            step=step,
            probe="coref",
            relation="all",
            direction=None,
            best_layer=flat // self.n_head,
            best_head=flat % self.n_head,
            best_direction=None,
            offset_acc=np.nan,
            pos_acc=np.nan,
            offset_share=np.nan,
            positional=None,
        )
        return pd.DataFrame([row], columns=CLAIM_COLUMNS), intervals

    def head_rows(self, step: int, windows: np.ndarray) -> list[dict]:
        """probe_heads rows: ``accuracy`` (all mentions), ``reachable_accuracy`` (antecedent nearer
        than the head's window), ``count``, ``acc:BUCKET`` per bucket, and on a causal model
        ``cataphora_left_out`` (pronouns left out because their antecedent comes after them)."""
        rows = []
        total = int(self.count.sum())
        los = np.array([lo for lo, _ in self.ranges])
        for flat in range(self.n_layer * self.n_head):
            layer, head = divmod(flat, self.n_head)
            window = int(windows[layer, head])
            correct = self.head_correct[flat]

            def row(metric, value):
                rows.append(
                    {
                        "step": step,
                        "layer": layer,
                        "head": head,
                        "probe": "coref",
                        "metric": metric,
                        "value": float(value),
                        "window": window,
                    }
                )

            row("count", total)
            if self.cataphora_left_out is not None:
                row("cataphora_left_out", self.cataphora_left_out)
            row("accuracy", correct.sum() / total if total else np.nan)
            reach = los < window  # buckets entirely below the window (window is itself an edge)
            n_reach = int(self.count[reach].sum())
            row("reachable_accuracy", correct[reach].sum() / n_reach if n_reach else np.nan)
            for (lo, hi), c, n in zip(self.ranges, correct, self.count):
                row(f"acc:{bucket_label(lo, hi)}", c / n if n else np.nan)
        return rows


def _row(step, layer, head, method, bucket, lo, hi, correct, count, window):
    return {
        "step": step,
        "layer": layer,
        "head": head,
        "method": method,
        "bucket": bucket,
        "bucket_lo": lo,
        "bucket_hi": hi,
        "correct": correct,
        "count": count,
        "accuracy": correct / count if count else np.nan,
        "window": window,
    }
