"""Documents for the token lens (``aah-viz lens``): plain text, CoNLL-U sentences with their gold
dependency arcs, or GAP snippets with the pronoun's two candidate names.

Links are between words here (character spans); the model side maps them onto its tokens. A link
is read from the later word (the query, in a causal model) to the earlier one (the key); its
``query_is_head`` says which end of a dependency arc the query is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aah_viz.errors import InputFormatError


@dataclass(frozen=True)
class WordLink:
    a: int  # word index of one end
    b: int  # word index of the other end
    kind: str  # "dep" (a gold dependency arc) or "coref" (the pronoun and a candidate name)
    label: str  # the relation (deprel), or the candidate's GAP role (A, B)
    gold: bool  # the arc exists (always for dep) / the pronoun refers to this candidate
    a_is_head: bool = False  # dep: word a is the syntactic head of word b


@dataclass(frozen=True)
class LensDoc:
    id: str
    source: str  # text, syntax, coref
    text: str
    words: list[tuple[int, int]] = field(default_factory=list)  # character spans
    links: list[WordLink] = field(default_factory=list)


def text_docs(path, n_docs: int) -> list[LensDoc]:
    """Paragraphs of a UTF-8 text (blank-line separated, blank and heading-only lines skipped)."""
    from aah_viz.probes.textfile import read_user_text

    text = read_user_text(Path(path), "text")
    paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
    docs = [p for p in paragraphs if p and not (p.startswith("=") and p.endswith("="))]
    if not docs:
        raise InputFormatError(f"{path}: no paragraph of text to read")
    return [LensDoc(f"{Path(path).name}#{i + 1}", "text", d) for i, d in enumerate(docs[:n_docs])]


def syntax_docs(path, n_docs: int) -> list[LensDoc]:
    """CoNLL-U sentences (one document each) with every gold arc between two words."""
    from aah_viz.probes.conllu_reader import read_conllu

    out: list[LensDoc] = []
    for document in read_conllu(path):
        for sentence in document.sentences:
            if len(out) >= n_docs:
                return out
            base = sentence.start
            words = [(w.start - base, w.end - base) for w in sentence.words]
            links = [
                WordLink(w.head - 1, i, "dep", str(w.deprel or "dep"), True, a_is_head=True)
                for i, w in enumerate(sentence.words)
                if w.head is not None and w.head > 0
            ]
            out.append(LensDoc(sentence.id, "syntax", sentence.text_in(document.text), words, links))
    if not out:
        raise InputFormatError(f"{path}: no sentence with words")
    return out


CANDIDATES = 3  # earlier mentions of other entities linked to each pronoun, nearest first


def coref_docs(path, n_docs: int) -> list[LensDoc]:
    """Coreference documents in any format ``aah-viz probe`` reads. GAP rows: the pronoun linked to
    both candidate names (labels A, B), gold where it refers to it. Other formats: each pronoun
    linked to the nearest earlier mention of its own entity that is not a pronoun (gold, label
    ``antecedent``) and to the nearest earlier mentions of other entities (label ``other``)."""
    from aah_viz.probes.coref_formats import read_coref, sniff_coref_format

    if sniff_coref_format(path) == "gap":
        return _gap_docs(path, n_docs)
    out = []
    for document in read_coref(path, max_docs=n_docs):
        mentions = sorted(
            ((m.start, m.end, chain.id, m.kind) for chain in document.chains for m in chain.mentions),
            key=lambda m: (m[0], m[1]),
        )
        spans, kept = [], []
        for m in mentions:  # words must not overlap: a mention inside another is left out
            if not spans or m[0] >= spans[-1][1]:
                spans.append((m[0], m[1]))
                kept.append(m)
        links = []
        for i, (_, _, chain, kind) in enumerate(kept):
            if kind != "pronoun":
                continue
            earlier = [j for j in range(i - 1, -1, -1) if kept[j][3] != "pronoun"]
            own = [j for j in earlier if kept[j][2] == chain][:1]
            other = [j for j in earlier if kept[j][2] != chain][:CANDIDATES]
            links += [WordLink(i, j, "coref", "antecedent", True) for j in own]
            links += [WordLink(i, j, "coref", "other", False) for j in other]
        out.append(LensDoc(document.id, "coref", document.text, spans, links))
    return out


def _gap_docs(path, n_docs: int) -> list[LensDoc]:
    from aah_viz.probes.coref_gap import read_gap

    out: list[LensDoc] = []
    for item in read_gap(path)[:n_docs]:
        mentions = {m["role"]: m for chain in item["chains"] for m in chain["mentions"]}
        pronoun_chain = next(c["id"] for c in item["chains"] if any(m["role"] == "pronoun" for m in c["mentions"]))
        roles = ["pronoun", "A", "B"]
        words = [(mentions[r]["start"], mentions[r]["end"]) for r in roles]
        order = sorted(range(3), key=lambda i: words[i][0])
        spans = [words[i] for i in order]
        index = {roles[i]: order.index(i) for i in range(3)}
        links = [WordLink(index["pronoun"], index[r], "coref", r, pronoun_chain == r) for r in ("A", "B")]
        out.append(LensDoc(str(item["id"]), "coref", item["text"], spans, links))
    return out
