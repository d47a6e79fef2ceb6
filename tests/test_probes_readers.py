"""Probe inputs: CoNLL-U (conllu package), coreference JSONL, GAP TSV and CoNLL-2012 converters."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from aah_viz.corpus.synthetic import generate_corpus
from aah_viz.corpus.writers import write_conllu, write_coref_jsonl
from aah_viz.errors import InputFormatError
from aah_viz.probes.conllu_reader import read_conllu
from aah_viz.probes.coref_conll2012 import read_conll2012, write_conll2012
from aah_viz.probes.coref_formats import convert_to_jsonl, read_coref, read_coref_jsonl, sniff_coref_format
from aah_viz.probes.coref_gap import read_gap, write_gap

DATA = Path(str(resources.files("aah_viz") / "data"))
FIXTURE = DATA / "english_fixture.conllu"
GAP = DATA / "gap_sample.tsv"
CONLL = DATA / "conll2012_sample_gold_conll"


def test_fixture_reads_into_two_documents_with_aligned_words():
    docs = read_conllu(FIXTURE)
    assert [d.id for d in docs] == ["fixture-a", "fixture-b"]
    assert [len(d.sentences) for d in docs] == [5, 5]
    for doc in docs:
        for word in doc.words:
            assert doc.text[word.start : word.end] == word.form
    a = docs[0]
    assert a.text.startswith("The old man saw a dog in the park. Mary gave")
    did, nt = [w for w in a.words if w.form in ("did", "n't")]
    assert did.end == nt.start  # SpaceAfter=No: "didn't"
    heads = a.gold_heads()
    assert (0, 2, "det") in heads and (3, -1, "root") in heads


def test_multiword_tokens_and_empty_nodes(tmp_path):
    path = tmp_path / "mwt.conllu"
    path.write_text(
        "# text = I won't go del mar.\n"
        "1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_\n"
        "2-3\twon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "2\two\twill\tAUX\t_\t_\t4\taux\t_\t_\n"
        "3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_\n"
        "4\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_\n"
        "4.1\tgone\tgo\tVERB\t_\t_\t_\t_\t4:conj\t_\n"
        "5-6\tdel\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "5\tde\tde\tADP\t_\t_\t7\tcase\t_\t_\n"
        "6\tel\tel\tDET\t_\t_\t7\tdet\t_\t_\n"
        "7\tmar\tmar\tNOUN\t_\t_\t4\tobl\t_\tSpaceAfter=No\n"
        "8\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_\n\n",
        encoding="utf-8",
    )
    (doc,) = read_conllu(path)
    forms = [w.form for w in doc.words]
    assert forms == ["I", "wo", "n't", "go", "de", "el", "mar", "."]  # the empty node is skipped
    spans = {w.form: doc.text[w.start : w.end] for w in doc.words}
    assert spans["wo"] == "wo" and spans["n't"] == "n't"  # forms spell the surface: exact parts
    de, el = doc.words[4], doc.words[5]
    assert doc.text[de.start : el.end] == "del" and de.end == el.start and de.start < de.end < el.end
    assert doc.words[6].head == 4  # heads stay sentence-relative word indices


@pytest.mark.parametrize(
    "body, line, message",
    [
        ("# text = a b\n1\ta\t_\tX\t_\t_\t2\tdet\t_\t_\n2\tb\t_\n\n", 3, "expected 10 tab-separated columns"),
        (
            "# text = a b\n1\ta\t_\tX\t_\t_\tx\tdet\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n",
            2,
            "HEAD 'x' is not a number",
        ),
        (
            "# text = a b\n1\ta\t_\tX\t_\t_\t9\tdet\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n",
            2,
            "outside the sentence",
        ),
        ("# text = a b\n1\ta\t_\tX\t_\t_\t2\tdet\t_\t_\n3\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n", 3, "out of order"),
        (
            "# text = a c\n1\ta\t_\tX\t_\t_\t2\tdet\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n",
            3,
            "not found in the sentence text",
        ),
        ('{"id": 1, "text": "x"}\n', 1, "is this a CoNLL-U file"),
        (  # two roots
            "# text = a b\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n",
            3,
            "a second root (words 1, 2 have HEAD 0)",
        ),
        (  # 1 -> 2 -> 3 -> 1: no root at all
            "# text = a b c\n1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tX\t_\t_\t3\tdep\t_\t_\n"
            "3\tc\t_\tX\t_\t_\t1\tdep\t_\t_\n\n",
            2,
            "heads run in a cycle",
        ),
        (  # a cycle beside a root
            "# text = a b c\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t3\tdep\t_\t_\n"
            "3\tc\t_\tX\t_\t_\t2\tdep\t_\t_\n\n",
            3,
            "word 2's heads run in a cycle",
        ),
        (  # the same document id twice
            "# text = a\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n\n# newdoc id = e\n# text = b\n"
            "1\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\n# newdoc id = d\n# text = c\n1\tc\t_\tX\t_\t_\t0\troot\t_\t_\n\n",
            8,
            "document id 'd' again (first at line 1)",
        ),
    ],
)
def test_malformed_conllu_names_file_and_line(tmp_path, body, line, message):
    path = tmp_path / "bad.conllu"
    path.write_text("# newdoc id = d\n" + body if not body.startswith("{") else body, encoding="utf-8")
    with pytest.raises(InputFormatError) as err:
        read_conllu(path)
    text = str(err.value)
    offset = 0 if body.startswith("{") else 1
    assert f"{path}:{line + offset}:" in text and message in text


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.conllu"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match="empty"):
        read_conllu(empty)
    with pytest.raises(InputFormatError, match="no such file"):
        read_conllu(tmp_path / "missing.conllu")
    empty_jsonl = tmp_path / "x.jsonl"
    empty_jsonl.write_text("", encoding="utf-8")
    with pytest.raises(InputFormatError, match="empty"):
        read_coref(empty_jsonl)


def test_synthetic_writers_round_trip_through_the_readers(tmp_path):
    corpus = generate_corpus(4, seed=2)
    syn = read_conllu(write_conllu(corpus, tmp_path / "s.conllu"))
    cor = read_coref_jsonl(write_coref_jsonl(corpus, tmp_path / "s.jsonl"))
    cor_nowords = read_coref_jsonl(write_coref_jsonl(corpus, tmp_path / "t.jsonl", include_words=False))
    for gold, a, b, c in zip(corpus.documents, syn, cor, cor_nowords):
        assert a.text == gold.text and a.words == gold.words
        assert [(w.start, w.end) for w in b.words] == [(w.start, w.end) for w in gold.words]
        assert [(w.start, w.end) for w in c.words] == [(w.start, w.end) for w in gold.words]
        assert [[(m.start, m.end, m.head, m.kind, m.gender, m.number) for m in ch.mentions] for ch in b.chains] == [
            [(m.start, m.end, m.head, m.kind, m.gender, m.number) for m in ch.mentions] for ch in gold.chains
        ]


def _jsonl(tmp_path, items) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def test_coref_jsonl_defaults_and_inference(tmp_path):
    item = {
        "id": "d",
        "text": "Anna saw the old dog. She liked it.",
        "chains": [
            {"id": "anna", "mentions": [{"start": 0, "end": 4}, {"start": 22, "end": 25}]},
            {"id": "dog", "mentions": [{"start": 9, "end": 20}, {"start": 32, "end": 34}]},
        ],
    }
    (doc,) = read_coref_jsonl(_jsonl(tmp_path, [item]))
    anna, dog = doc.chains
    assert [doc.words[m.head].form for m in anna.mentions] == ["Anna", "She"]
    assert [m.kind for m in anna.mentions] == ["name", "pronoun"]
    assert anna.mentions[1].gender == "f" and anna.mentions[1].number == "sg"
    assert [doc.words[m.head].form for m in dog.mentions] == ["dog", "it"]
    assert dog.mentions[0].kind == "np" and len(dog.mentions[0].words) == 3


@pytest.mark.parametrize(
    "item, message",
    [
        (
            {"id": "d", "text": "Anna ran.", "chains": [{"id": 0, "mentions": [{"start": 0, "end": 40}]}]},
            "outside its text",
        ),
        (
            {"id": "d", "text": "Anna ran.", "chains": [{"id": 0, "mentions": [{"start": -1, "end": 3}]}]},
            "outside its text",
        ),
        (
            {"id": "d", "text": "Anna ran.", "chains": [{"id": 0, "mentions": [{"start": "0", "end": 3}]}]},
            "must be an integer",
        ),
        ({"id": "d", "text": "Anna ran."}, "missing key 'chains'"),
        ({"id": "d", "text": "Anna ran.", "chains": [{"id": 0, "mentions": []}]}, "non-empty 'mentions'"),
        (
            {
                "id": "d",
                "text": "Anna ran.",
                "chains": [{"id": 0, "mentions": [{"start": 0, "end": 4, "gender": "x"}]}],
            },
            "gender",
        ),
    ],
)
def test_bad_coref_jsonl_names_file_line_and_item(tmp_path, item, message):
    good = {"id": "ok", "text": "Tom ran.", "chains": [{"id": 0, "mentions": [{"start": 0, "end": 3}]}]}
    path = _jsonl(tmp_path, [good, item])
    with pytest.raises(InputFormatError) as err:
        read_coref_jsonl(path)
    assert f"{path}:2:" in str(err.value) and message in str(err.value)


def test_not_json_and_unknown_format(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "x", "chains": []}\nnot json\n', encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"c\.jsonl:2: not JSON"):
        read_coref_jsonl(path)
    odd = tmp_path / "odd.txt"
    odd.write_text("hello world\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match="not a known coreference format"):
        read_coref(odd)


def test_gap_round_trip_and_chains(tmp_path):
    items = read_gap(GAP)
    assert [i["id"] for i in items] == ["sample-1", "sample-2", "sample-3", "sample-4"]
    # sample-1: the pronoun corefers with B (Maggie)
    chains = {c["id"]: c["mentions"] for c in items[0]["chains"]}
    assert [items[0]["text"][m["start"] : m["end"]] for m in chains["B"]] == ["Maggie", "she"]
    assert len(items[3]["chains"]) == 3  # neither: the pronoun is alone
    out = write_gap(items, tmp_path / "back.tsv")
    assert out.read_text(encoding="utf-8") == GAP.read_text(encoding="utf-8")
    converted = convert_to_jsonl(GAP, tmp_path / "gap.jsonl")
    docs = read_coref_jsonl(converted)
    assert [d.id for d in docs] == [i["id"] for i in items]
    assert sniff_coref_format(GAP) == "gap"
    docs_direct = read_coref(GAP)
    assert [[(m.start, m.end) for c in d.chains for m in c.mentions] for d in docs_direct] == [
        [(m.start, m.end) for c in d.chains for m in c.mentions] for d in docs
    ]


def test_gap_offset_that_does_not_match_the_text(tmp_path):
    lines = GAP.read_text(encoding="utf-8").splitlines()
    cols = lines[2].split("\t")
    cols[3] = str(int(cols[3]) + 2)
    lines[2] = "\t".join(cols)
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"bad\.tsv:3: Pronoun 'him' is not at character"):
        read_gap(bad)


def test_conll2012_round_trip(tmp_path):
    items = read_conll2012(CONLL)
    assert [i["id"] for i in items] == ["bc/sample/00/sample_0001/000", "bc/sample/00/sample_0001/001"]
    first = items[0]
    spans = {c["id"]: [first["text"][m["start"] : m["end"]] for m in c["mentions"]] for c in first["chains"]}
    assert spans == {"0": ["John", "his", "him"], "1": ["his sister", "She"], "2": ["Boston"], "3": ["the city"]}
    back = write_conll2012(items, tmp_path / "back_conll")
    assert read_conll2012(back) == items
    original = [l.split("\t") for l in CONLL.read_text().splitlines() if l and not l.startswith("#")]
    written = [l.split("\t") for l in back.read_text().splitlines() if l and not l.startswith("#")]
    assert [(o[0], o[1], o[2], o[3]) for o in original] == [(w[0], w[1], w[2], w[3]) for w in written]
    assert [set(o[-1].split("|")) for o in original] == [set(w[-1].split("|")) for w in written]
    docs = read_coref(CONLL)
    assert docs[0].chains[1].mentions[0].words == (2, 3)


def test_conll2012_unclosed_mention(tmp_path):
    text = CONLL.read_text().replace("\t1)\n", "\t-\n", 1)
    bad = tmp_path / "bad_conll"
    bad.write_text(text)
    with pytest.raises(
        InputFormatError, match=r"bad_conll:\d+: mentions of chain\(s\) \[1\] are opened but never closed"
    ):
        read_conll2012(bad)


TEXT = "the mayor of Paris spoke. He left."


@pytest.mark.parametrize(
    "chains, message",
    [
        (  # the same span in two chains
            [{"id": "a", "mentions": [{"start": 0, "end": 9}]}, {"id": "b", "mentions": [{"start": 0, "end": 9}]}],
            "is a mention twice (chains 'a' and 'b')",
        ),
        (  # "mayor of" and "of Paris" cross
            [{"id": "a", "mentions": [{"start": 4, "end": 12}]}, {"id": "b", "mentions": [{"start": 10, "end": 18}]}],
            "overlap without one containing the other",
        ),
    ],
)
def test_overlapping_mentions_name_the_file_line_and_chains(tmp_path, chains, message):
    path = _jsonl(
        tmp_path, [{"id": "ok", "text": "Anna ran.", "chains": []}, {"id": "d", "text": TEXT, "chains": chains}]
    )
    with pytest.raises(InputFormatError) as err:
        read_coref_jsonl(path)
    assert f"{path}:2:" in str(err.value) and message in str(err.value)


def test_nested_mentions_are_read_and_duplicate_document_ids_refused(tmp_path):
    nested = [  # "the mayor of Paris" contains "Paris": nesting is normal
        {"id": "mayor", "mentions": [{"start": 0, "end": 18}, {"start": 26, "end": 28}]},
        {"id": "paris", "mentions": [{"start": 13, "end": 18}]},
    ]
    (doc,) = read_coref_jsonl(_jsonl(tmp_path, [{"id": "d", "text": TEXT, "chains": nested}]))
    assert [c.id for c in doc.chains] == ["mayor", "paris"]
    items = [{"id": "d", "text": "Anna ran.", "chains": []}, {"id": "e", "text": "Bo ran.", "chains": []}]
    path = _jsonl(tmp_path, [*items, {"id": "d", "text": "Cy ran.", "chains": []}])
    with pytest.raises(InputFormatError) as err:
        read_coref_jsonl(path)
    assert f"{path}:3:" in str(err.value) and "document id 'd' again (first at" in str(err.value)


def test_the_tree_check_walks_each_word_once(tmp_path):
    """A 20,000-word chain (each word headed by the next) is read as one tree (the check walks each
    word once; a walk per word would take 2e8 steps and hit the suite's timeout)."""
    n = 20_000
    lines = [
        f"{i}\tw\t_\tX\t_\t_\t{i + 1 if i < n else 0}\t{'dep' if i < n else 'root'}\t_\t_" for i in range(1, n + 1)
    ]
    path = tmp_path / "chain.conllu"
    path.write_text("# newdoc id = d\n" + "\n".join(lines) + "\n\n", encoding="utf-8")
    (doc,) = read_conllu(path)
    assert len(doc.words) == n
