"""The synthetic corpus: English-like documents from a small grammar with planted structure.

Every document comes with its gold dependency tree (Universal Dependencies relations) and its
coreference chains, so the probes know the answer. What is planted, and at which distances:

- short-range syntax: determiner-noun (``det``), adjective-noun (``amod``), preposition-noun
  (``case``), subject-verb agreement (``nsubj``, the verb's number follows the subject), also
  across an intervening prepositional phrase (``nmod``) or relative clause (``acl:relcl``) whose
  noun has the other number; objects (``obj``), obliques (``obl``), copulas (``cop``),
  coordination (``cc``, ``conj``), possessives (``nmod:poss``);
- long-range coreference: two to four entities per document, each of a different pronoun class
  (he, she, they, it), introduced by name or noun phrase and referred back to by pronoun, name or
  noun phrase; entities are mentioned with unequal frequency, so antecedent distances run from a
  few tokens to several hundred (beyond the smallest candidate windows of every preset).

Documents are 600-2000 characters by default, words are separated by single spaces (sentence-final
punctuation attached), so the byte tokenizer's tokens align to words exactly. Each document is
generated from its own seeded random stream, so a corpus is deterministic for a seed and its
first ``n`` documents do not depend on how many are generated.
"""

from __future__ import annotations

import random

from aah_viz.corpus.document import Chain, Corpus, Document, Mention, Sentence, Word
from aah_viz.corpus.lexicon import (
    ADJECTIVES,
    GENERIC_NOUNS,
    GROUP_NOUNS,
    INTRANSITIVE,
    MOTION_PREPS,
    NAMES,
    PLACE_PREPS,
    PRONOUNS,
    ROLE_NOUNS,
    THING_NOUNS,
    TRANSITIVE,
)
from aah_viz.corpus.tokenizer import ByteTokenizer

# ---------------------------------------------------------------------------------------------
# sentence building


def _pick(rng: random.Random, seq):
    return seq[int(rng.random() * len(seq))]


class _Builder:
    """Words of one sentence as [form, upos, head, rel]; heads are 0-based sentence indices
    (-1 = root), patched as the sentence is built."""

    __slots__ = ("words", "mentions")

    def __init__(self):
        self.words: list[list] = []
        self.mentions: list[tuple[int, int, int, int]] = []  # (entity, first word, last word, head word)

    @property
    def forms(self) -> list[str]:
        return [w[0] for w in self.words]

    def add(self, form: str, upos: str, head: int = -2, rel: str = "_") -> int:
        words = self.words
        words.append([form, upos, head, rel])
        return len(words) - 1

    def attach(self, word: int, head: int, rel: str) -> None:
        item = self.words[word]
        item[2] = head
        item[3] = rel


class _Entity:
    __slots__ = ("index", "cls", "kind", "name", "noun", "adj", "mentioned")

    def __init__(self, index: int, cls: str, kind: str, name: str = "", noun: str = "", adj: str = ""):
        self.index, self.cls, self.kind = index, cls, kind
        self.name, self.noun, self.adj = name, noun, adj
        self.mentioned = False

    @property
    def number(self) -> str:
        return "pl" if self.cls == "pl" else "sg"

    @property
    def gender(self) -> str | None:
        return self.cls if self.cls in ("m", "f", "n") else None


class _DocGenerator:
    def __init__(self, rng: random.Random):
        self.rng = rng
        classes = ["m", "f", "pl", "n"]
        rng.shuffle(classes)
        n_entities = rng.randint(2, 4)
        self.entities: list[_Entity] = []
        used_nouns = set()
        for i, cls in enumerate(classes[:n_entities]):
            if cls in ("m", "f"):
                ent = _Entity(i, cls, "name", name=_pick(rng, NAMES[cls]))
            elif cls == "pl":
                ent = _Entity(i, cls, "np", noun=_pick(rng, GROUP_NOUNS), adj=_pick(rng, ADJECTIVES))
            else:
                ent = _Entity(i, cls, "np", noun=_pick(rng, THING_NOUNS), adj=_pick(rng, ADJECTIVES))
            used_nouns.add(ent.noun)
            self.entities.append(ent)
        # unequal salience: some entities come back rarely, which plants long antecedent distances
        self.weights = [_pick(rng, (4.0, 2.0, 1.0, 0.5, 0.25)) for _ in self.entities]
        self.total_weight = sum(self.weights)
        self.generic = [pair for pair in GENERIC_NOUNS if pair[0] not in used_nouns]

    # -- noun phrases --------------------------------------------------------------------------

    def generic_np(self, b: _Builder, number: str, allow_modifier: bool) -> int:
        rng = self.rng
        sg, pl = _pick(rng, self.generic)
        det = b.add("the" if number == "pl" or rng.random() < 0.6 else "a", "DET")
        adj = b.add(_pick(rng, ADJECTIVES), "ADJ") if rng.random() < 0.45 else -1
        noun = b.add(pl if number == "pl" else sg, "NOUN")
        b.attach(det, noun, "det")
        if adj >= 0:
            b.attach(adj, noun, "amod")
        if allow_modifier:
            roll = rng.random()
            if roll < 0.25:  # prepositional modifier, its noun of the other number
                prep = b.add(_pick(rng, PLACE_PREPS), "ADP")
                inner = self.generic_np(b, "sg" if number == "pl" else "pl", allow_modifier=False)
                b.attach(prep, inner, "case")
                b.attach(inner, noun, "nmod")
            elif roll < 0.4:  # relative clause: "that sees the cats"
                rel = b.add("that", "PRON")
                verb = b.add(_pick(rng, TRANSITIVE)[0 if number == "sg" else 1], "VERB")
                b.attach(rel, verb, "nsubj")
                b.attach(verb, noun, "acl:relcl")
                obj = self.generic_np(b, "sg" if number == "pl" else "pl", allow_modifier=False)
                b.attach(obj, verb, "obj")
        return noun

    def entity_ref(self, b: _Builder, ent: _Entity, role: str) -> int:
        """A mention of ``ent`` in ``role`` (subj, obj); returns the head word."""
        rng = self.rng
        first = len(b.words)
        if ent.mentioned and rng.random() < 0.5:
            form = PRONOUNS[ent.cls][0 if role == "subj" else 1]
            head = b.add(form, "PRON")
        elif ent.kind == "name":
            head = b.add(ent.name, "PROPN")
        else:
            det = b.add("the" if ent.mentioned or ent.cls == "pl" else "a", "DET")
            adj = b.add(ent.adj, "ADJ") if (not ent.mentioned or rng.random() < 0.3) else -1
            head = b.add(ent.noun, "NOUN")
            b.attach(det, head, "det")
            if adj >= 0:
                b.attach(adj, head, "amod")
        ent.mentioned = True
        b.mentions.append((ent.index, first, len(b.words) - 1, head))
        return head

    def possessed_np(self, b: _Builder, ent: _Entity) -> int:
        """ "his old dog": the possessive pronoun is a mention of ``ent``."""
        poss = b.add(PRONOUNS[ent.cls][2], "PRON")
        b.mentions.append((ent.index, poss, poss, poss))
        adj = b.add(_pick(self.rng, ADJECTIVES), "ADJ") if self.rng.random() < 0.4 else -1
        noun = b.add(_pick(self.rng, self.generic)[0], "NOUN")
        b.attach(poss, noun, "nmod:poss")
        if adj >= 0:
            b.attach(adj, noun, "amod")
        return noun

    def pick_entity(self, exclude: _Entity | None = None) -> _Entity:
        while True:  # rejection keeps the relative weights of the others
            roll = self.rng.random() * self.total_weight
            for ent, weight in zip(self.entities, self.weights):  # noqa: B007 (ent is the pick)
                roll -= weight
                if roll <= 0:
                    break
            if ent is not exclude:
                return ent

    def subject(self, b: _Builder, ent: _Entity | None) -> tuple[int, str]:
        if ent is not None:
            return self.entity_ref(b, ent, "subj"), ent.number
        number = "pl" if self.rng.random() < 0.4 else "sg"
        return self.generic_np(b, number, allow_modifier=True), number

    def obj(self, b: _Builder, verb: int, subj_ent: _Entity | None) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3 and len(self.entities) > 1:
            ent = self.pick_entity(exclude=subj_ent)
            head = self.entity_ref(b, ent, "obj")
        elif roll < 0.45:
            head = self.possessed_np(b, subj_ent or self.pick_entity())
        else:
            head = self.generic_np(b, "pl" if rng.random() < 0.4 else "sg", allow_modifier=False)
        b.attach(head, verb, "obj")

    def oblique(self, b: _Builder, verb: int) -> None:
        prep = b.add(_pick(self.rng, MOTION_PREPS), "ADP")
        noun = self.generic_np(b, "pl" if self.rng.random() < 0.3 else "sg", allow_modifier=False)
        b.attach(prep, noun, "case")
        b.attach(noun, verb, "obl")

    # -- sentences -----------------------------------------------------------------------------

    def sentence(self) -> _Builder:
        rng = self.rng
        b = _Builder()
        ent = self.pick_entity() if rng.random() < 0.6 else None
        fresh = ent is not None and not ent.mentioned
        roll = rng.random()
        if fresh and ent.kind == "name" and roll < 0.5:  # "Anna is a young doctor."
            subj = self.entity_ref(b, ent, "subj")
            cop = b.add("is", "AUX")
            det = b.add("a", "DET")
            adj = b.add(_pick(rng, ADJECTIVES), "ADJ")
            root = b.add(_pick(rng, ROLE_NOUNS), "NOUN", -1, "root")
            b.attach(subj, root, "nsubj")
            b.attach(cop, root, "cop")
            b.attach(det, root, "det")
            b.attach(adj, root, "amod")
        elif roll < 0.4:  # transitive, maybe an oblique
            subj, number = self.subject(b, ent)
            root = b.add(_pick(rng, TRANSITIVE)[0 if number == "sg" else 1], "VERB", -1, "root")
            b.attach(subj, root, "nsubj")
            self.obj(b, root, ent)
            if rng.random() < 0.3:
                self.oblique(b, root)
        elif roll < 0.6:  # intransitive with an oblique
            subj, number = self.subject(b, ent)
            root = b.add(_pick(rng, INTRANSITIVE)[0 if number == "sg" else 1], "VERB", -1, "root")
            b.attach(subj, root, "nsubj")
            if rng.random() < 0.7:
                self.oblique(b, root)
        elif roll < 0.75:  # copula with an adjective
            subj, number = self.subject(b, ent)
            cop = b.add("is" if number == "sg" else "are", "AUX")
            root = b.add(_pick(rng, ADJECTIVES), "ADJ", -1, "root")
            b.attach(subj, root, "nsubj")
            b.attach(cop, root, "cop")
        elif roll < 0.9:  # coordinated verb phrases sharing the subject
            subj, number = self.subject(b, ent)
            root = b.add(_pick(rng, TRANSITIVE)[0 if number == "sg" else 1], "VERB", -1, "root")
            b.attach(subj, root, "nsubj")
            self.obj(b, root, ent)
            cc = b.add("and", "CCONJ")
            verb2 = b.add(_pick(rng, TRANSITIVE)[0 if number == "sg" else 1], "VERB")
            b.attach(cc, verb2, "cc")
            b.attach(verb2, root, "conj")
            self.obj(b, verb2, ent)
        else:  # coordinated subjects take a plural verb
            first, _ = self.subject(b, ent)
            cc = b.add("and", "CCONJ")
            other = self.pick_entity(exclude=ent) if rng.random() < 0.5 and len(self.entities) > 1 else None
            if other is ent:
                other = None
            second = self.entity_ref(b, other, "subj") if other is not None else self.generic_np(b, "sg", False)
            b.attach(cc, second, "cc")
            b.attach(second, first, "conj")
            root = b.add(_pick(rng, INTRANSITIVE)[1], "VERB", -1, "root")
            b.attach(first, root, "nsubj")
            if rng.random() < 0.5:
                self.oblique(b, root)
        b.add(".", "PUNCT", root, "punct")
        # a pronoun subject inside a coordination ("Tom and she") reads oddly; keep subject forms
        # as built: the structure, not the style, is what is planted
        return b


def _capitalize(form: str) -> str:
    return form[:1].upper() + form[1:]


_VOWELS = frozenset("aeiouAEIOU")


def generate_document(
    seed: int, index: int, min_chars: int = 600, max_chars: int = 2000, text_only: bool = False
) -> Document:
    """One document, deterministic for ``(seed, index)``.

    ``text_only`` skips building words and chains (the training stream needs only the text);
    the text is the same either way.
    """
    rng = random.Random(f"aah-synthetic:{seed}:{index}")
    gen = _DocGenerator(rng)
    target = rng.randint(min_chars, max_chars)
    doc_id = f"syn-{seed}-{index:06d}"
    pieces: list[str] = []
    sentences: list[Sentence] = []
    mentions_by_entity: dict[int, list[Mention]] = {}
    pos = 0
    n_words = 0
    while True:
        b = gen.sentence()
        items = b.words
        forms = [w[0] for w in items]
        for i, form in enumerate(forms):
            if form == "a" and forms[i + 1][0] in _VOWELS:
                forms[i] = "an"
        forms[0] = _capitalize(forms[0])
        text = " ".join(forms[:-1]) + forms[-1]  # the last word is the attached full stop
        if sentences or pos:
            pos += 1
            pieces.append(" ")
        pieces.append(text)
        sent_start = pos
        pos += len(text)
        if text_only:
            sentences.append(None)  # counted only
        else:
            words = []
            start = sent_start
            last = len(forms) - 1
            for i, form in enumerate(forms):
                end = start + len(form)
                item = items[i]
                words.append(Word(form, start, end, item[2] + 1, item[3], item[1]))
                start = end + (1 if i + 1 < last else 0)
            sentences.append(Sentence(f"{doc_id}-s{len(sentences) + 1}", sent_start, pos, tuple(words)))
            for ent_index, lo, hi, head in b.mentions:
                ent = gen.entities[ent_index]
                mentions_by_entity.setdefault(ent_index, []).append(
                    Mention(
                        words[lo].start,
                        words[hi].end,
                        tuple(range(n_words + lo, n_words + hi + 1)),
                        n_words + head,
                        "pronoun" if items[head][1] == "PRON" else ent.kind,
                        ent.gender,
                        ent.number,
                    )
                )
            n_words += len(words)
        if pos >= target or pos >= max_chars - 60:
            break
    text = "".join(pieces)
    if text_only:
        return Document(doc_id, text, [])
    chains = [
        Chain(f"{doc_id}-e{ent_index}", tuple(sorted(mentions, key=lambda m: (m.start, -m.end))))
        for ent_index, mentions in sorted(mentions_by_entity.items())
    ]
    return Document(doc_id, text, sentences, chains)


def generate_corpus(n_docs: int, seed: int = 0, min_chars: int = 600, max_chars: int = 2000) -> Corpus:
    """``n_docs`` documents; document ``i`` depends only on ``(seed, i)``."""
    if n_docs < 0:
        raise ValueError("n_docs must be >= 0")
    if min_chars < 1 or max_chars < min_chars:
        raise ValueError("need 1 <= min_chars <= max_chars")
    docs = [generate_document(seed, i, min_chars, max_chars) for i in range(n_docs)]
    return Corpus(docs, seed=seed)


DOCUMENT_SEPARATOR = "\n"


def training_text(n_docs: int, seed: int = 0) -> str:
    """The documents' texts joined by a newline (what the model is trained on)."""
    if n_docs < 0:
        raise ValueError("n_docs must be >= 0")
    return DOCUMENT_SEPARATOR.join(generate_document(seed, i, text_only=True).text for i in range(n_docs))


def training_stream(n_docs: int, seed: int = 0) -> list[int]:
    """Byte-tokenizer ids (0..255) of ``n_docs`` synthetic documents joined by newlines."""
    return ByteTokenizer().encode_ids(training_text(n_docs, seed))
