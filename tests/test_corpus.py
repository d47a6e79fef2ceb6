"""The byte tokenizer and the synthetic corpus: offsets, determinism, planted structure, writers."""

from __future__ import annotations

import json
from collections import Counter

import conllu
import pytest

from aah_viz.corpus.lexicon import PRONOUN_FEATURES
from aah_viz.corpus.synthetic import generate_corpus, generate_document, training_stream, training_text
from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.corpus.writers import write_conllu, write_coref_jsonl


def test_byte_tokenizer_ascii_round_trip_and_offsets():
    tok = ByteTokenizer()
    ids, offsets = tok.encode("The dog runs.")
    assert ids == list(b"The dog runs.")
    assert offsets[4] == (4, 5)
    assert tok.decode(ids) == "The dog runs."


def test_byte_tokenizer_multibyte_characters_map_to_their_character():
    tok = ByteTokenizer()
    text = "né 😀x"
    ids, offsets = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8")) == 1 + 2 + 1 + 4 + 1
    assert offsets == [(0, 1), (1, 2), (1, 2), (2, 3), (3, 4), (3, 4), (3, 4), (3, 4), (4, 5)]
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(ids[:2]) == "n\ufffd"  # a cut character is replaced, not an exception


def test_corpus_is_deterministic_and_prefix_stable():
    a = generate_corpus(5, seed=3)
    b = generate_corpus(8, seed=3)
    assert [d.text for d in a.documents] == [d.text for d in b.documents[:5]]
    assert generate_corpus(3, seed=4).documents[0].text != a.documents[0].text


def test_training_stream_is_the_joined_documents_in_bytes():
    corpus = generate_corpus(4, seed=1)
    text = corpus.text_for_training()
    assert training_text(4, seed=1) == text
    assert training_stream(4, seed=1) == list(text.encode("utf-8"))
    assert text.count("\n") == 3


def test_documents_have_the_requested_length_and_aligned_words():
    corpus = generate_corpus(30, seed=0)
    for doc in corpus.documents:
        assert 600 <= len(doc.text) <= 2000
        for sentence in doc.sentences:
            assert doc.text[sentence.start : sentence.end].endswith(".")
            roots = [w for w in sentence.words if w.head == 0]
            assert len(roots) == 1 and roots[0].deprel == "root"
            for word in sentence.words:
                assert doc.text[word.start : word.end] == word.form
                assert 0 <= word.head <= len(sentence.words)
        for chain in doc.chains:
            for mention in chain.mentions:
                assert mention.head in mention.words
                assert doc.words[mention.words[0]].start == mention.start
                assert doc.words[mention.words[-1]].end == mention.end


def test_trees_are_acyclic():
    for doc in generate_corpus(10, seed=2).documents:
        for sentence in doc.sentences:
            for i in range(1, len(sentence.words) + 1):
                seen, node = set(), i
                while node != 0:
                    assert node not in seen
                    seen.add(node)
                    node = sentence.words[node - 1].head


def test_subject_verb_agreement_is_planted_across_intervening_phrases():
    """The verb's number follows its subject, also when a PP or relative clause of the other number intervenes."""
    agree = across = 0
    for doc in generate_corpus(40, seed=7).documents:
        for sentence in doc.sentences:
            words = sentence.words
            for i, word in enumerate(words):
                if word.deprel != "nsubj" or words[word.head - 1].upos != "VERB":
                    continue
                verb = words[word.head - 1]
                if any(w.deprel == "conj" and w.head == i + 1 for w in words):
                    continue  # coordinated subjects take a plural verb
                subject_plural = word.form.lower() in ("they",) or (word.upos == "NOUN" and word.form.endswith("s"))
                verb_plural = not verb.form.endswith("s")
                if word.form.lower() == "that":
                    continue
                assert subject_plural == verb_plural, (sentence.id, word, verb)
                agree += 1
                between = words[i + 1 : word.head - 1]
                if any(w.deprel in ("nmod", "acl:relcl") and w.head == i + 1 for w in between):
                    across += 1
    assert agree > 200 and across > 20


def test_coreference_distances_reach_beyond_the_smallest_windows():
    tok = ByteTokenizer()
    distances = []
    for doc in generate_corpus(60, seed=11).documents:
        for chain in doc.chains:
            for earlier, later in zip(chain.mentions, chain.mentions[1:]):
                distances.append(doc.words[later.head].start - doc.words[earlier.head].start)
        assert len(tok.encode(doc.text)[0]) == len(doc.text)  # ASCII: one token per character
    assert min(distances) < 8
    assert sum(d >= 32 for d in distances) > 0.3 * len(distances)  # beyond the small preset's smallest
    assert sum(d >= 256 for d in distances) > 0.02 * len(distances)  # beyond the small preset's largest


def test_pronouns_are_unambiguous_by_class():
    for doc in generate_corpus(20, seed=5).documents:
        classes = Counter()
        for chain in doc.chains:
            classes[(chain.mentions[0].gender, chain.mentions[0].number)] += 1
            for m in chain.mentions:
                if m.kind == "pronoun":
                    gender, number = PRONOUN_FEATURES[doc.words[m.head].form.lower()]
                    assert number == m.number and (gender is None or gender == m.gender)
        assert max(classes.values()) == 1


def test_conllu_writer_is_read_back_by_the_conllu_package(tmp_path):
    corpus = generate_corpus(3, seed=9)
    path = write_conllu(corpus, tmp_path / "c.conllu")
    sentences = conllu.parse(path.read_text(encoding="utf-8"))
    assert len(sentences) == sum(len(d.sentences) for d in corpus.documents)
    first_doc = corpus.documents[0]
    for parsed, gold in zip(sentences, first_doc.sentences):
        assert parsed.metadata["doc_id"] == first_doc.id
        assert parsed.metadata["text"] == first_doc.text[gold.start : gold.end]
        for token, word in zip(parsed, gold.words):
            misc = token["misc"]
            assert (int(misc["start_char"]), int(misc["end_char"])) == (word.start, word.end)
            assert first_doc.text[word.start : word.end] == token["form"]
            assert token["head"] == word.head and token["deprel"] == word.deprel


def test_coref_jsonl_writer_offsets_point_at_the_mentions(tmp_path):
    corpus = generate_corpus(3, seed=9)
    path = write_coref_jsonl(corpus, tmp_path / "c.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    for line, doc in zip(lines, corpus.documents):
        item = json.loads(line)
        assert item["id"] == doc.id and item["text"] == doc.text
        assert len(item["chains"]) == len(doc.chains)
        for chain_json, chain in zip(item["chains"], doc.chains):
            for m_json, m in zip(chain_json["mentions"], chain.mentions):
                assert item["text"][m_json["start"] : m_json["end"]] == doc.text[m.start : m.end]
                assert item["text"][m_json["head_start"] : m_json["head_end"]] == doc.words[m.head].form


def test_text_only_generation_gives_the_same_text():
    assert generate_document(1, 2, text_only=True).text == generate_document(1, 2).text


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        generate_corpus(-1)
    with pytest.raises(ValueError):
        generate_corpus(1, min_chars=500, max_chars=100)


def test_bundled_probe_set_is_what_the_generator_writes(tmp_path):
    from importlib import resources

    from aah_viz.corpus.probe_set import PROBE_SET_CONLLU, PROBE_SET_COREF, write_probe_set

    fresh = write_probe_set(tmp_path)
    data = resources.files("aah_viz") / "data"
    for name, path in zip((PROBE_SET_CONLLU, PROBE_SET_COREF), fresh):
        assert (data / name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"aah_viz/data/{name} is stale: regenerate it with python -m aah_viz.corpus --out aah_viz/data"
        )
