"""Coreference inputs: the project's JSONL format, and any of the three formats read or converted to it
(GAP TSV: ``coref_gap``; CoNLL-2012: ``coref_conll2012``).

The JSONL format (docs/probes.md) holds one document per line::

    {"id": "d1", "text": "Anna saw Tom. She waved.",
     "chains": [{"id": "anna", "mentions": [{"start": 0, "end": 4}, {"start": 14, "end": 17}]}],
     "words": [{"start": 0, "end": 4}, ...]}            # optional

Offsets are character offsets into ``text``, half-open. Optional per mention: ``head_start`` /
``head_end`` (the head word's span; default: the mention's last word), ``kind`` (name, pronoun,
np), ``gender`` (m, f, n), ``number`` (sg, pl), ``role`` (kept by the GAP converter). Without
``words`` the text is split into words at whitespace and punctuation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from aah_viz.corpus.document import Chain, Document, Mention, Sentence, Word
from aah_viz.corpus.lexicon import PRONOUN_FEATURES
from aah_viz.errors import InputFormatError
from aah_viz.probes.coref_conll2012 import read_conll2012
from aah_viz.probes.coref_gap import read_gap
from aah_viz.probes.textfile import read_user_text

WORD_RE = re.compile(r"\w+(?:'\w+)?|[^\w\s]")
KINDS = ("name", "pronoun", "np")
GENDERS = ("m", "f", "n")
NUMBERS = ("sg", "pl")


# ---------------------------------------------------------------------------------------------
# JSONL


def _int_field(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputFormatError(f"{where}: {key!r} must be an integer character offset, got {value!r}")
    return value


def _span(obj: dict, where: str, n_chars: int, start_key: str = "start", end_key: str = "end") -> tuple[int, int]:
    start, end = _int_field(obj, start_key, where), _int_field(obj, end_key, where)
    if not 0 <= start < end <= n_chars:
        raise InputFormatError(
            f"{where}: span [{start}, {end}) is outside its text (0..{n_chars}) or empty; "
            f"offsets are character offsets into 'text', end exclusive"
        )
    return start, end


def _words_of(text: str, spans: list[tuple[int, int]] | None) -> list[Word]:
    if spans is None:
        spans = [(m.start(), m.end()) for m in WORD_RE.finditer(text)]
    return [Word(text[s:e], s, e) for s, e in spans]


def _infer_kind(forms: list[str]) -> str:
    if len(forms) == 1 and forms[0].lower() in PRONOUN_FEATURES:
        return "pronoun"
    if forms and forms[0][:1].isupper() and forms[0].lower() not in ("the", "a", "an", "this", "that"):
        return "name"
    return "np"


def document_from_json(item: object, where: str) -> Document:
    """One JSONL item as a Document; ``where`` names the file and line in errors."""
    if not isinstance(item, dict):
        raise InputFormatError(f"{where}: expected a JSON object per line, got {type(item).__name__}")
    for key in ("id", "text", "chains"):
        if key not in item:
            raise InputFormatError(f"{where}: missing key {key!r} (a document needs id, text, chains)")
    text = item["text"]
    if not isinstance(text, str) or not text:
        raise InputFormatError(f"{where}: 'text' must be a non-empty string")
    if not isinstance(item["chains"], list):
        raise InputFormatError(f"{where}: 'chains' must be a list")
    spans = None
    if item.get("words") is not None:
        if not isinstance(item["words"], list):
            raise InputFormatError(f"{where}: 'words' must be a list of {{start, end}}")
        spans = [
            _span(w, f"{where}: word {i}", len(text)) if isinstance(w, dict) else None
            for i, w in enumerate(item["words"])
        ]
        if None in spans:
            raise InputFormatError(f"{where}: every word must be an object with start and end")
        if any(b[0] < a[1] for a, b in zip(spans, spans[1:])):
            raise InputFormatError(f"{where}: 'words' must be in order and not overlap")
    words = _words_of(text, spans)
    chains = []
    for c_index, chain in enumerate(item["chains"]):
        c_where = f"{where}: chain {c_index}"
        if not isinstance(chain, dict) or not isinstance(chain.get("mentions"), list) or not chain["mentions"]:
            raise InputFormatError(f"{c_where}: a chain is an object with a non-empty 'mentions' list")
        mentions = []
        for m_index, m in enumerate(chain["mentions"]):
            m_where = f"{c_where} mention {m_index}"
            if not isinstance(m, dict):
                raise InputFormatError(f"{m_where}: a mention is an object with start and end")
            start, end = _span(m, m_where, len(text))
            covered = [i for i, w in enumerate(words) if w.start < end and w.end > start]
            if not covered:
                raise InputFormatError(f"{m_where}: span [{start}, {end}) = {text[start:end]!r} covers no word")
            if "head_start" in m or "head_end" in m:
                hs, he = _span(m, m_where, len(text), "head_start", "head_end")
                heads = [i for i in covered if words[i].start < he and words[i].end > hs]
                if not heads:
                    raise InputFormatError(f"{m_where}: head span [{hs}, {he}) is not inside the mention")
                head = heads[-1]
            else:
                head = covered[-1]
            forms = [words[i].form for i in covered]
            kind = m.get("kind") or _infer_kind(forms)
            features = (
                PRONOUN_FEATURES.get(words[head].form.lower(), (None, None)) if kind == "pronoun" else (None, None)
            )
            gender, number = m.get("gender", features[0]), m.get("number", features[1])
            for key, value, allowed in (
                ("kind", kind, KINDS),
                ("gender", gender, GENDERS),
                ("number", number, NUMBERS),
            ):
                if value is not None and value not in allowed:
                    raise InputFormatError(f"{m_where}: {key} {value!r} is not one of {list(allowed)}")
            mentions.append(Mention(start, end, tuple(covered), head, kind, gender, number))
        mentions.sort(key=lambda mm: (mm.start, -mm.end))
        chains.append(Chain(str(chain.get("id", c_index)), tuple(mentions)))
    _check_spans(chains, text, where)
    sentence = Sentence(f"{item['id']}-all", 0, len(text), tuple(words))
    return Document(str(item["id"]), text, [sentence], chains)


def _check_spans(chains, text: str, where: str) -> None:
    """Mentions nest or stay apart: the same span twice, or two spans that cross, is an error."""
    spans = sorted(((m.start, m.end, c.id) for c in chains for m in c.mentions), key=lambda s: (s[0], -s[1]))
    stack: list[tuple[int, int, str]] = []
    for i, (start, end, chain) in enumerate(spans):
        if i and spans[i - 1][:2] == (start, end):
            raise InputFormatError(
                f"{where}: span [{start}, {end}) = {text[start:end]!r} is a mention twice "
                f"(chains {spans[i - 1][2]!r} and {chain!r}); a span is one mention"
            )
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack and end > stack[-1][1]:
            o_start, o_end, o_chain = stack[-1]
            raise InputFormatError(
                f"{where}: mentions [{o_start}, {o_end}) (chain {o_chain!r}) and [{start}, {end}) (chain {chain!r}) "
                "overlap without one containing the other; mentions nest or stay apart"
            )
        stack.append((start, end, chain))


def _unique_id(doc: Document, seen: dict[str, str], where: str) -> None:
    if doc.id in seen:
        raise InputFormatError(f"{where}: document id {doc.id!r} again (first at {seen[doc.id]}); ids must be unique")
    seen[doc.id] = where


def read_coref_jsonl(path, max_docs: int | None = None) -> list[Document]:
    path = Path(path)
    text = read_user_text(path, "coreference JSONL (one JSON document per line)")
    docs: list[Document] = []
    seen: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFormatError(
                f"{where}: not JSON ({err.msg} at column {err.colno}); expected one document per line"
            ) from None
        docs.append(document_from_json(item, where))
        _unique_id(docs[-1], seen, where)
        if max_docs is not None and len(docs) >= max_docs:
            break
    return docs


def write_jsonl(items: Iterable[dict], path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# any of the three


def sniff_coref_format(path) -> str:
    """jsonl, gap or conll2012, by name and then by content."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".tsv"):
        return "gap"
    if name.endswith("_conll") or name.endswith(".conll"):
        return "conll2012"
    head = read_user_text(path, "coreference input (JSONL, GAP TSV or CoNLL-2012)").lstrip()[:200]
    if head.startswith("{"):
        return "jsonl"
    if head.startswith("ID\tText"):
        return "gap"
    if head.startswith("#begin document"):
        return "conll2012"
    raise InputFormatError(
        f'{path}:1: not a known coreference format; give JSONL (one {{"id", "text", "chains"}} per line), '
        f"a GAP TSV (header ID, Text, Pronoun, ...) or a CoNLL-2012 *_conll file"
    )


def read_coref(path, max_docs: int | None = None) -> list[Document]:
    """Documents with chains from any supported coreference file."""
    fmt = sniff_coref_format(path)
    if fmt == "jsonl":
        return read_coref_jsonl(path, max_docs)
    items = read_gap(path) if fmt == "gap" else read_conll2012(path)
    if max_docs is not None:
        items = items[:max_docs]
    docs: list[Document] = []
    seen: dict[str, str] = {}
    for item in items:
        where = f"{path}: document {item['id']!r}"
        docs.append(document_from_json(item, where))
        _unique_id(docs[-1], seen, where)
    return docs


def convert_to_jsonl(src, dst, fmt: str | None = None) -> Path:
    """Convert a GAP TSV or CoNLL-2012 file to the JSONL format."""
    fmt = fmt or sniff_coref_format(src)
    if fmt == "gap":
        items = read_gap(src)
    elif fmt == "conll2012":
        items = read_conll2012(src)
    else:
        raise InputFormatError(f"{src}: already JSONL (or unknown: {fmt}); nothing to convert")
    for item in items:  # check offsets and words as the probe will read them
        document_from_json(item, f"{src}: document {item['id']!r}")
    return write_jsonl(items, dst)
