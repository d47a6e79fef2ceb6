"""Documents with words, gold dependency trees and coreference chains (character offsets).

The synthetic corpus, the CoNLL-U reader and the coreference readers all produce these, so the
probes see one shape whatever the source. Offsets are character offsets into ``Document.text``,
half-open ``[start, end)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple


class Word(NamedTuple):
    form: str
    start: int
    end: int
    head: int | None = None  # 1-based index of the head within the sentence; 0 = root; None = no tree
    deprel: str | None = None
    upos: str | None = None


@dataclass(frozen=True)
class Sentence:
    id: str
    start: int
    end: int
    words: tuple[Word, ...]

    def text_in(self, document_text: str) -> str:
        return document_text[self.start : self.end]


class Mention(NamedTuple):
    start: int
    end: int
    words: tuple[int, ...]  # document-level word indices covered by the mention
    head: int  # document-level index of the mention's head word
    kind: str | None = None  # name, pronoun, np (when known)
    gender: str | None = None  # m, f, n (when known)
    number: str | None = None  # sg, pl (when known)


@dataclass(frozen=True)
class Chain:
    id: str
    mentions: tuple[Mention, ...]


@dataclass
class Document:
    id: str
    text: str
    sentences: list[Sentence]
    chains: list[Chain] = field(default_factory=list)

    @cached_property
    def words(self) -> list[Word]:
        """All words of the document in order (sentence by sentence)."""
        return [word for sentence in self.sentences for word in sentence.words]

    @cached_property
    def sentence_offsets(self) -> list[int]:
        """Document-level index of each sentence's first word."""
        offsets, total = [], 0
        for sentence in self.sentences:
            offsets.append(total)
            total += len(sentence.words)
        return offsets

    def gold_heads(self) -> list[tuple[int, int, str]]:
        """(dependent, head, deprel) as document-level word indices; head -1 for the root."""
        links = []
        for sentence, base in zip(self.sentences, self.sentence_offsets):
            for i, word in enumerate(sentence.words):
                if word.head is None:
                    continue
                links.append((base + i, base + word.head - 1 if word.head > 0 else -1, word.deprel or "_"))
        return links


@dataclass
class Corpus:
    documents: list[Document]
    seed: int | None = None

    def text_for_training(self, separator: str = "\n") -> str:
        """The documents' texts joined by ``separator`` (the training stream's text)."""
        return separator.join(doc.text for doc in self.documents)

    def __len__(self) -> int:
        return len(self.documents)
