"""A probe is one entry of ``aah_viz.probes.kinds.PROBE_KINDS``: an entry added there is built, fed every
scored input and gives its rows after the others', with the other probes' rows unchanged."""

from __future__ import annotations

import numpy as np
from test_probes_scoring import FIXTURE, PlantedSource  # tests/ is on sys.path under pytest

from aah_viz.probes import kinds, runner
from aah_viz.probes.conllu_reader import read_conllu


class WordCount:
    """Per head, the words of the syntax inputs whose predicted head (dependent -> head) is their gold head."""

    def __init__(self, n_heads: int):
        self.count = np.zeros(n_heads, dtype=np.int64)


def _add(acc: WordCount, x: kinds.ScoredInput) -> None:
    if x.syntax is not None:
        gold = np.full(len(x.syntax.words), -2)
        for dep, head, _ in x.syntax.gold_heads():
            gold[dep] = head
        acc.count += ((x.preds.dep2head == gold) & (gold >= 0)).sum(axis=1)


def _rows(acc: WordCount, f: kinds.Finish, _) -> kinds.Rows:
    rows = [
        {"step": f.step, "layer": h // f.n_head, "head": h % f.n_head, "probe": "words", "metric": "n", "value": v}
        for h, v in enumerate(acc.count.tolist())
    ]
    return kinds.with_window(rows, f.windows), None


def test_a_new_entry_is_a_new_probe(monkeypatch):
    docs = read_conllu(FIXTURE)
    plain = runner.run_probes(PlantedSource(docs), docs, (), min_count=1, n_boot=10, null_draws=9)
    extra = kinds.ProbeKind("words", lambda s: WordCount(s.n_layer * s.n_head), _add, _rows)
    monkeypatch.setattr(runner, "PROBE_KINDS", (*kinds.PROBE_KINDS, extra))
    more = runner.run_probes(PlantedSource(docs), docs, (), min_count=1, n_boot=10, null_draws=9)

    heads = more.probe_heads
    assert heads.iloc[: len(plain.probe_heads)].equals(plain.probe_heads)  # the others' rows as they were
    words = heads[heads["probe"] == "words"]
    # head 0 of the planted source attends each word to its gold head: every word but the roots is right
    with_head = sum(1 for doc in docs for _, head, _ in doc.gold_heads() if head >= 0)
    assert len(words) == 4 and words["value"].iloc[0] == with_head
    assert (words["value"].iloc[1:] < with_head).all()  # to its dependents, an antecedent, uniformly back
    assert words["window"].tolist() == [100_000] * 4  # the planted source's max_len: no window given
