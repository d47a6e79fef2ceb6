"""Probe scoring on attention arrays with known answers (no model: attention is planted)."""

from __future__ import annotations

from collections import defaultdict
from importlib import resources
from pathlib import Path

import numpy as np
import pandas.testing as pd_testing
import pytest
from planted_attention import PlantedAttentionSource, gold_links

from aah_viz.corpus.document import Chain, Document, Mention, Sentence, Word
from aah_viz.corpus.synthetic import generate_corpus
from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.probes.alignment import align_words, plan_chunks, word_attention
from aah_viz.probes.conllu_reader import read_conllu
from aah_viz.probes.coref import baseline_choices, bucket_edges, bucket_ranges, coref_queries, flat_mentions
from aah_viz.probes.runner import run_probes, sentence_documents
from aah_viz.probes.sufficiency import sufficiency_rows
from aah_viz.probes.syntax import OFFSETS, offset_baseline_counts

FIXTURE = Path(str(resources.files("aah_viz") / "data" / "english_fixture.conllu"))


class PlantedSource(PlantedAttentionSource):
    """Attention built from gold structure, looked up by the chunk's ids (one chunk per document).

    Head 0: each word's tokens attend to its gold head's tokens (dependent -> head).
    Head 1: each word's tokens attend to its dependents' tokens (head -> dependent).
    Head 2: each coreferent mention head attends to its nearest antecedent's head word.
    Head 3: uniform causal attention (a control).
    """

    def __init__(self, docs, max_len=100_000):
        super().__init__(max_len)
        for doc in list(docs) + [s for d in docs for s in sentence_documents(d)]:  # either context
            ids, al, tokens_of = self.word_tokens(doc)
            n = len(ids)
            att = np.zeros((1, 4, n, n), dtype=np.float32)
            gold, deps = gold_links(doc)
            antecedent = {}
            for q in coref_queries(doc):
                antecedent[q.head] = q.antecedent_head
            for t in range(n):
                u = int(al.unit_of_token[t])
                for h, target in (
                    (0, [gold[u]] if u in gold else []),
                    (1, deps.get(u, [])),
                    (2, [antecedent[u]] if u in antecedent else []),
                ):
                    cols = [c for w in target for c in tokens_of[w]]
                    if cols:
                        att[0, h, t, cols] = 1.0 / len(cols)
                    else:
                        att[0, h, t, t] = 1.0
                att[0, 3, t, : t + 1] = 1.0 / (t + 1)
            self.planted[tuple(ids)] = att


class RelativeSource:
    """Head h attends mostly to the token 2, 6 or 10 positions back (causal), whatever the text."""

    n_layer, n_head = 1, 3

    def __init__(self, max_len):
        self.tok = ByteTokenizer()
        self.max_len = max_len

    def encode(self, text):
        return self.tok.encode(text)

    def attend(self, batch):
        T = max(len(b) for b in batch)
        i = np.arange(T)
        d = i[:, None] - i[None, :]
        out = np.zeros((len(batch), 1, 3, T, T), dtype=np.float32)
        for h in range(3):
            logits = -np.abs(d - (2 + 4 * h)).astype(np.float64) * 3
            logits[d < 0] = -np.inf
            p = np.exp(logits - logits.max(1, keepdims=True))
            out[:, 0, h] = p / p.sum(1, keepdims=True)
        return out


def test_word_attention_sums_to_words_and_averages_from_words():
    att = np.array([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]], dtype=np.float64)
    units = np.array([0, 0, 1, 1])  # two words of two tokens each
    w = word_attention(att, units, 2)
    # from word 0 = mean of rows 0, 1; to word = sum of columns
    assert np.allclose(w[0], [(1.0 + 1.0) / 2, 0.0])
    assert np.allclose(w[1], [((0.2 + 0.3) + (0.1 + 0.2)) / 2, ((0.5 + 0.0) + (0.3 + 0.4)) / 2])
    assert np.allclose(w.sum(-1), 1.0)


def test_alignment_gives_gaps_their_own_units():
    tok = ByteTokenizer()
    ids, offsets = tok.encode("ab  cd.")
    al = align_words(offsets, [(0, 2), (4, 6), (6, 7)])
    assert al.unit_of_token.tolist() == [0, 0, 3, 3, 1, 1, 2]
    assert al.word_first_token.tolist() == [0, 4, 6] and al.word_last_token.tolist() == [1, 5, 6]


def test_chunks_score_every_token_once_with_half_a_window_of_context():
    for n, T in [(10, 4), (9, 4), (4, 4), (1000, 64), (257, 256)]:
        chunks = plan_chunks(n, T)
        covered = [t for c in chunks for t in range(c.score_lo, c.score_hi)]
        assert covered == list(range(n))
        for c in chunks:
            assert c.end - c.start <= T and c.start <= c.score_lo
            assert c.start == 0 or c.score_lo - c.start >= T // 2


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_planted_gold_attention_scores_100_percent_on_syntax_and_coref(context):
    docs = generate_corpus(10, seed=4, min_chars=400, max_chars=700).documents
    result = run_probes(
        PlantedSource(docs), docs, docs, min_count=5, candidate_windows=(32, 64, 128, 256), context=context
    )
    rel = result.probe_relations
    assert len(rel) >= 8
    assert (rel["best_acc"] == 1.0).all()
    assert set(rel["best_head"]) <= {0, 1}
    heads = result.probe_heads.set_index(["head", "probe", "metric"])["value"]
    assert heads[(0, "syntax", "all:dep2head")] == 1.0
    assert heads[(1, "syntax", "all:head2dep")] == 1.0
    assert heads[(3, "syntax", "all:dep2head")] < 0.5
    coref = result.probe_coref
    planted = coref[(coref["method"] == "head") & (coref["head"] == 2) & (coref["count"] > 0)]
    assert (planted["accuracy"] == 1.0).all() and planted.loc[planted["bucket"] == "all", "count"].item() > 100
    assert heads[(2, "coref", "accuracy")] == 1.0
    control = coref[(coref["method"] == "head") & (coref["head"] == 3) & (coref["bucket"] == "all")]
    assert control["accuracy"].item() < 0.9


def test_offset_baselines_on_the_fixture_equal_hand_computed_values():
    docs = read_conllu(FIXTURE)
    counts = offset_baseline_counts(docs)
    # counted by hand from the fixture: 14 determiners, 9 with their noun right after, 5 two words on
    assert counts["det"] == {-3: [0, 14], -2: [0, 14], -1: [0, 14], 1: [9, 14], 2: [5, 14]}
    # amod: old->man, red->book, new->bridge, warm->roof, first->prize: all +1
    assert counts["amod"][1] == [5, 5]
    # independent computation straight from the file's columns
    expected = defaultdict(lambda: {k: [0, 0] for k in OFFSETS})
    for block in FIXTURE.read_text(encoding="utf-8").strip().split("\n\n"):
        rows = [l.split("\t") for l in block.splitlines() if not l.startswith("#")]
        for cols in rows:
            ident, head, rel = int(cols[0]), int(cols[6]), cols[7]
            if head == 0:
                continue
            for k in OFFSETS:
                expected[rel][k][1] += 1
                if 1 <= ident + k <= len(rows) and ident + k == head:
                    expected[rel][k][0] += 1
    assert counts == dict(expected)


@pytest.mark.parametrize("labels", ["universal", "full"])
def test_relations_table_baseline_matches_and_min_count_filters(labels):
    docs = read_conllu(FIXTURE)
    result = run_probes(PlantedSource(docs), docs, (), min_count=5, relations=labels)
    rel = result.probe_relations.set_index("relation")
    assert "punct" not in rel.index and "root" not in rel.index
    assert (rel["labels"] == labels).all()
    counts = offset_baseline_counts(docs, labels)
    frequent = {r for r, c in counts.items() if c[1][1] >= 5 and r not in ("punct", "root")}
    assert set(rel.index) == frequent and {"det", "nsubj", "amod", "obj"} <= frequent
    assert (rel["count"] == [counts[r][1][1] for r in rel.index]).all()
    for name, row in rel.iterrows():
        assert row["count"] >= 5
        best = max(OFFSETS, key=lambda k: (counts[name][k][0], -OFFSETS.index(k)))
        assert row["baseline_offset"] == best
        assert row["baseline_acc"] == pytest.approx(counts[name][best][0] / counts[name][best][1])
    assert rel.loc["det", "baseline_offset"] == 1 and rel.loc["det", "baseline_acc"] == pytest.approx(9 / 14)
    assert rel.loc["det", "best_acc"] == 1.0


def test_universal_labels_fold_subtypes_into_their_relation():
    docs = read_conllu(FIXTURE)
    full, universal = offset_baseline_counts(docs, "full"), offset_baseline_counts(docs, "universal")
    assert not any(":" in r for r in universal)
    for rel in ("nmod", "obl", "nsubj"):
        subtypes = [r for r in full if r.split(":")[0] == rel]
        assert len(subtypes) >= 2
        assert universal[rel][1][1] == sum(full[r][1][1] for r in subtypes)
        assert universal[rel][1][0] == sum(full[r][1][0] for r in subtypes)


def test_chunking_does_not_change_predictions_of_local_heads():
    docs = generate_corpus(3, seed=8, min_chars=400, max_chars=700).documents
    long_ctx = run_probes(RelativeSource(4096), docs, docs, min_count=1, context="document")
    short_ctx = run_probes(RelativeSource(64), docs, docs, min_count=1, context="document")
    a = long_ctx.probe_heads[long_ctx.probe_heads.probe == "syntax"].set_index(["head", "metric"])["value"]
    b = short_ctx.probe_heads[short_ctx.probe_heads.probe == "syntax"].set_index(["head", "metric"])["value"]
    assert len(a) == len(b) and a.index.equals(b.index)
    assert np.allclose(a.to_numpy(), b.to_numpy(), equal_nan=True)  # both directions
    assert a[(2, "all:dep2head")] > 0.05 and a[(1, "all:head2dep")] > 0.2  # it does find heads


def _doc_with_chain():
    text = "Anna met Tom. She smiled. The dog barked at Tom. He left."
    spans = [
        (0, 4),
        (5, 8),
        (9, 12),
        (12, 13),
        (14, 17),
        (18, 24),
        (24, 25),
        (26, 29),
        (30, 33),
        (34, 40),
        (41, 43),
        (44, 47),
        (47, 48),
        (49, 51),
        (52, 56),
        (56, 57),
    ]
    words = tuple(Word(text[s:e], s, e) for s, e in spans)
    assert [w.form for w in words][:3] == ["Anna", "met", "Tom"]

    def m(i, kind, gender):
        return Mention(words[i].start, words[i].end, (i,), i, kind, gender, "sg")

    anna = Chain("anna", (m(0, "name", "f"), m(4, "pronoun", "f")))
    tom = Chain("tom", (m(2, "name", "m"), m(11, "name", "m"), m(13, "pronoun", "m")))
    dog = Chain("dog", (Mention(26, 33, (7, 8), 8, "np", "n", "sg"),))
    return Document("d", text, [Sentence("s", 0, len(text), words)], [anna, tom, dog])


def test_coref_queries_and_baselines_by_hand():
    doc = _doc_with_chain()
    queries = coref_queries(doc)
    assert [doc.words[q.head].form for q in queries] == ["She", "Tom", "He"]
    she = queries[0]
    assert she.candidates.tolist() == [0, 2] and she.correct.tolist() == [True, False]
    mentions = flat_mentions(doc)
    choices = baseline_choices(doc)
    by_form = {doc.words[m.head].form: i for i, (_, m) in enumerate(mentions)}
    # "She": nearest is Tom (wrong); rule: nearest name agreeing in gender is Anna (right)
    assert mentions[choices[by_form["She"]]["nearest_mention"]][1].head == 2
    assert mentions[choices[by_form["She"]]["rule"]][1].head == 0
    # "He": nearest mention is the second Tom (right); same head word: none, so the nearest
    assert mentions[choices[by_form["He"]]["nearest_mention"]][1].head == 11
    assert mentions[choices[by_form["He"]]["same_head"]][1].head == 11


def test_bucket_edges_include_the_windows():
    edges = bucket_edges((32, 64, 128, 256))
    assert edges == [1, 4, 8, 16, 32, 64, 128, 256]
    assert bucket_ranges(edges)[-1] == (256, None) and bucket_ranges(edges)[3] == (16, 31)


def test_window_sufficiency_by_hand():
    windows = np.array([[4, 16]])
    rows = sufficiency_rows(0, windows, np.array([1, 3, 4, 10, 20]), np.array([2, 30]))
    value = {(r["head"], r["metric"]): r["value"] for r in rows}
    assert value[(0, "syntax_beyond")] == pytest.approx(3 / 5)  # 4, 10, 20 >= 4
    assert value[(1, "syntax_beyond")] == pytest.approx(1 / 5)  # 20 >= 16
    assert value[(0, "coref_beyond")] == pytest.approx(1 / 2)
    assert value[(1, "all_beyond")] == pytest.approx(2 / 7)
    assert value[(0, "syntax_links")] == 5


def test_head_windows_limit_what_the_coref_probe_can_reach():
    docs = generate_corpus(4, seed=6, min_chars=400, max_chars=700).documents
    result = run_probes(PlantedSource(docs), docs, docs, windows=np.array([[8, 8, 32, 8]]), candidate_windows=(8, 32))
    coref = result.probe_coref
    row = coref[(coref["method"] == "head") & (coref["head"] == 2)]
    assert set(row["window"]) == {32}
    heads = result.probe_heads
    reach = heads[(heads.probe == "sufficiency") & (heads.metric == "coref_beyond")].set_index("head")["value"]
    assert reach[0] > reach[2] > 0  # a window of 8 misses more antecedents than one of 32


def test_js_accumulator_equals_scipy_jensen_shannon():
    from scipy.spatial.distance import jensenshannon

    from aah_viz.probes.predict import JSAccumulator

    rng = np.random.default_rng(2)
    rows = rng.dirichlet(np.ones(6), size=(3, 4))  # 3 heads, 4 query words, 6 units
    rows[0, 0] = [1, 0, 0, 0, 0, 0]
    acc = JSAccumulator(3)
    acc.add(rows)
    expected = np.array(
        [
            [np.mean([jensenshannon(rows[i, r], rows[j, r], base=2) ** 2 for r in range(4)]) for j in range(3)]
            for i in range(3)
        ]
    )
    assert np.allclose(acc.mean(), expected, atol=1e-9)


class FarSource:
    """One head: every token attends to the token ``back`` positions earlier (or itself at the start),
    with ``spread`` of its attention spread evenly over every token (the attention of a real head)."""

    n_layer, n_head = 1, 1

    def __init__(self, back, max_len=100_000, spread=0.0):
        self.tok = ByteTokenizer()
        self.back, self.max_len, self.spread = back, max_len, spread

    def encode(self, text):
        return self.tok.encode(text)

    def attend(self, batch):
        T = max(len(b) for b in batch)
        out = np.zeros((len(batch), 1, 1, T, T), dtype=np.float32)
        i = np.arange(T)
        out[:, 0, 0] = self.spread / T
        out[:, 0, 0, i, np.maximum(i - self.back, 0)] += 1.0 - self.spread
        return out


def test_syntactic_predictions_stay_inside_the_sentence_in_document_context():
    from aah_viz.probes.predict import predict_document

    doc = read_conllu(FIXTURE)[0]
    sentence = np.repeat(np.arange(len(doc.sentences)), [len(s.words) for s in doc.sentences])
    preds = predict_document(doc, FarSource(back=60, spread=0.1))  # mostly a word of an earlier sentence
    for pred in (preds.dep2head[0], preds.head2dep[0]):
        made = pred >= 0
        assert made.sum() >= len(pred) - len(doc.sentences)
        assert (sentence[pred[made]] == sentence[made]).all()


def test_documents_are_keyed_by_id_never_by_text():
    from dataclasses import replace

    from aah_viz.probes.runner import plan_jobs

    docs = read_conllu(FIXTURE)
    twin = replace(docs[0], id="twin")  # same text, another id
    once = run_probes(PlantedSource(docs), docs, (), min_count=1, context="document")
    twice = run_probes(PlantedSource(docs), docs + [twin], (), min_count=1, context="document")
    assert twice.n_syntax_docs == 3 and twice.n_sentences == once.n_sentences + len(docs[0].sentences)
    det = {r: c for r, c in zip(once.probe_relations["relation"], once.probe_relations["count"])}
    det2 = {r: c for r, c in zip(twice.probe_relations["relation"], twice.probe_relations["count"])}
    first = offset_baseline_counts([docs[0]], "universal")
    assert all(det2[r] == det[r] + first.get(r, {1: [0, 0]})[1][1] for r in det)
    # a syntax and a coreference document share a model pass only with the same id and the same words
    corpus = generate_corpus(2, seed=3, min_chars=300, max_chars=400).documents
    renamed = [replace(d, id=d.id + "-coref") for d in corpus]
    assert len(plan_jobs(corpus, corpus, "document")) == 2
    assert len(plan_jobs(corpus, renamed, "document")) == 4
    assert len(plan_jobs(corpus, corpus, "sentence")) == sum(len(d.sentences) for d in corpus) + 2


def test_positional_heads_are_labelled_and_gold_heads_are_not():
    docs = read_conllu(FIXTURE)
    result = run_probes(RelativeSource(4096), docs, (), min_count=1, context="sentence")
    heads = result.probe_heads[result.probe_heads["probe"] == "positional"].set_index(["head", "metric"])["value"]
    # head 0 of RelativeSource looks 2 bytes back: the previous word, or the word itself for long words
    assert heads[(0, "offset:dep2head")] == -1 and heads[(0, "share:dep2head")] > 0.5
    rel = result.probe_relations
    assert set(rel["positional"]) <= {True, False}
    planted = run_probes(PlantedSource(docs), docs, (), min_count=5)
    best = planted.probe_relations.set_index("relation")
    assert not best.loc["det", "positional"] and best.loc["det", "positional_share"] < 0.5


def test_delta_interval_resamples_sentences():
    from aah_viz.stats.resampling import cluster_mean_interval

    rng = np.random.default_rng(0)
    sentence = np.repeat(np.arange(40), 5)
    assert cluster_mean_interval(sentence, np.ones(200), 200, rng) == (1.0, 1.0)  # every link the same
    diff = rng.choice([-1, 0, 1], size=200, p=[0.2, 0.4, 0.4])
    lo, hi = cluster_mean_interval(sentence, diff, 4000, np.random.default_rng(1))
    naive = []  # the same bootstrap written as a loop over resampled sentences
    loop_rng = np.random.default_rng(2)
    for _ in range(4000):
        pick = loop_rng.integers(0, 40, 40)
        naive.append(np.concatenate([diff[sentence == s] for s in pick]).mean())
    assert lo == pytest.approx(np.quantile(naive, 0.025), abs=0.02)
    assert hi == pytest.approx(np.quantile(naive, 0.975), abs=0.02)
    docs = read_conllu(FIXTURE)
    rel = run_probes(PlantedSource(docs), docs, (), min_count=5).probe_relations
    assert (rel["delta"] == rel["best_acc"] - rel["baseline_acc"]).all()
    assert ((rel["delta_ci_low"] <= rel["delta"] + 1e-12) & (rel["delta"] <= rel["delta_ci_high"] + 1e-12)).all()


def test_distance_profile_puts_a_fixed_offset_head_in_its_bucket():
    docs = generate_corpus(2, seed=5, min_chars=300, max_chars=500).documents
    result = run_probes(FarSource(back=5), docs, (), min_count=1, context="document")
    dist = result.probe_heads[result.probe_heads["probe"] == "distance"].set_index("metric")["value"]
    assert dist["mass:4-7"] > 0.95 and dist["forward"] == 0.0
    assert dist[[m for m in dist.index if m.startswith("mass:")]].sum() == pytest.approx(1.0)


def test_word_segments_cut_tokens_at_word_boundaries():
    from aah_viz.probes.alignment import word_segments

    text = "He didn't go , ok?"
    spans = [(0, 2), (3, 6), (6, 9), (10, 12), (15, 17)]  # He, did, n't, go, ok ("," and "?" are no words)
    assert [text[a:b] for a, b in word_segments(text, spans)] == ["He", " did", "n't", " go", " ,", " ok", "?"]


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_inputs_sorted_by_length_give_the_same_tables(context):
    docs = generate_corpus(6, seed=11, min_chars=300, max_chars=900).documents
    kwargs = dict(min_count=3, candidate_windows=(32, 64), context=context, batch_size=3, n_boot=300, seed=4)
    plain = run_probes(PlantedSource(docs), docs, docs, **kwargs)
    lengths = [len(d.text) for d in docs]
    assert lengths != sorted(lengths)  # the order really changes
    ordered = run_probes(PlantedSource(docs), docs, docs, sort_by_length=True, **kwargs)
    for name in ("probe_relations", "probe_coref", "probe_claims"):  # counts, accuracies, bootstrap, nulls: exactly
        pd_testing.assert_frame_equal(getattr(plain, name), getattr(ordered, name))
    a, b = (
        r.probe_heads.sort_values(["probe", "metric", "layer", "head"]).reset_index(drop=True) for r in (plain, ordered)
    )
    pd_testing.assert_frame_equal(a.drop(columns="value"), b.drop(columns="value"))
    np.testing.assert_allclose(a["value"], b["value"], rtol=1e-9, atol=1e-12)  # JS and distance: sums in another order
