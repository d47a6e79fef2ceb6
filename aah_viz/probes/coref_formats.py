"""Coreference inputs: the project's JSONL format, and converters from GAP TSV and CoNLL-2012.

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

import csv
import io
import json
import re
from collections.abc import Iterable
from pathlib import Path

from aah_viz.corpus.document import Chain, Document, Mention, Sentence, Word
from aah_viz.corpus.lexicon import PRONOUN_FEATURES
from aah_viz.errors import InputFormatError
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
# GAP (Webster et al. 2018): ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B, B-offset, B-coref, URL

GAP_COLUMNS = ["ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref", "URL"]


def _gap_bool(value: str, where: str) -> bool:
    v = value.strip().upper()
    if v not in ("TRUE", "FALSE"):
        raise InputFormatError(f"{where}: expected TRUE or FALSE, got {value!r}")
    return v == "TRUE"


def read_gap(path) -> list[dict]:
    """GAP TSV rows as JSONL documents: the pronoun, A and B are mentions; the pronoun shares a
    chain with A or B when that column is TRUE. Every mention keeps its ``role``."""
    path = Path(path)
    text = read_user_text(path, "GAP TSV")
    reader = csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    rows = list(reader)
    if [c.strip() for c in rows[0]] != GAP_COLUMNS:
        raise InputFormatError(
            f"{path}:1: expected the GAP header {', '.join(GAP_COLUMNS)} (tab-separated), got {rows[0][:11]}"
        )
    items = []
    for number, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{path}:{number}"
        if len(row) != len(GAP_COLUMNS):
            raise InputFormatError(f"{where}: expected {len(GAP_COLUMNS)} tab-separated columns, found {len(row)}")
        rec = dict(zip(GAP_COLUMNS, row))
        body = rec["Text"]
        mentions = {}
        for role, col in (("pronoun", "Pronoun"), ("A", "A"), ("B", "B")):
            try:
                offset = int(rec[f"{col}-offset"])
            except ValueError:
                raise InputFormatError(f"{where}: {col}-offset {rec[f'{col}-offset']!r} is not an integer") from None
            surface = rec[col]
            if body[offset : offset + len(surface)] != surface:
                raise InputFormatError(
                    f"{where}: {col} {surface!r} is not at character {offset} of Text "
                    f"(found {body[offset : offset + len(surface)]!r})"
                )
            mentions[role] = {"start": offset, "end": offset + len(surface), "role": role}
        mentions["pronoun"]["kind"] = "pronoun"
        a_coref, b_coref = _gap_bool(rec["A-coref"], f"{where} A-coref"), _gap_bool(rec["B-coref"], f"{where} B-coref")
        if a_coref and b_coref:
            raise InputFormatError(
                f"{where}: A-coref and B-coref are both TRUE; GAP links the pronoun to one name at most"
            )
        chains = []
        if a_coref:
            chains.append(
                {"id": "A", "mentions": sorted([mentions["A"], mentions["pronoun"]], key=lambda m: m["start"])}
            )
            chains.append({"id": "B", "mentions": [mentions["B"]]})
        elif b_coref:
            chains.append({"id": "A", "mentions": [mentions["A"]]})
            chains.append(
                {"id": "B", "mentions": sorted([mentions["B"], mentions["pronoun"]], key=lambda m: m["start"])}
            )
        else:
            chains.append({"id": "A", "mentions": [mentions["A"]]})
            chains.append({"id": "B", "mentions": [mentions["B"]]})
            chains.append({"id": "pronoun", "mentions": [mentions["pronoun"]]})
        items.append({"id": rec["ID"], "text": body, "chains": chains, "url": rec["URL"]})
    if not items:
        raise InputFormatError(f"{path}: a GAP header but no rows")
    return items


def write_gap(items: Iterable[dict], path) -> Path:
    """The inverse of :func:`read_gap` for documents it produced (mentions with roles)."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n", escapechar=None)
    writer.writerow(GAP_COLUMNS)
    for item in items:
        text = item["text"]
        by_role, chain_of = {}, {}
        for chain in item["chains"]:
            for m in chain["mentions"]:
                by_role[m["role"]] = m
                chain_of[m["role"]] = chain["id"]
        fields = [item["id"], text]
        for role in ("pronoun", "A", "B"):
            m = by_role[role]
            fields += [text[m["start"] : m["end"]], str(m["start"])]
            if role != "pronoun":
                fields.append("TRUE" if chain_of[role] == chain_of["pronoun"] else "FALSE")
        fields.append(item.get("url", ""))
        writer.writerow(fields)
    path = Path(path)
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# CoNLL-2012 (OntoNotes *_conll): word in column 4, coreference in the last column

_BEGIN = re.compile(r"^#begin document \(?(?P<name>[^)]*?)\)?;?\s*(part (?P<part>\d+))?\s*$")
_COREF_PART = re.compile(r"^\(?(\d+)\)?$")


def _parse_coref_cell(cell: str, where: str) -> list[tuple[str, int]]:
    """'(12|5)' -> [('open', 12), ('close', 5)]; '(3)' -> [('open', 3), ('close', 3)]."""
    if cell == "-":
        return []
    events = []
    for part in cell.split("|"):
        if not _COREF_PART.match(part):
            raise InputFormatError(f"{where}: coreference cell {cell!r} is not like '(3', '3)', '(3)' or '-'")
        number = int(part.strip("()"))
        if part.startswith("("):
            events.append(("open", number))
        if part.endswith(")"):
            events.append(("close", number))
    return events


def read_conll2012(path) -> list[dict]:
    """``*_conll`` parts as JSONL documents (id ``name/part``), words joined by single spaces."""
    path = Path(path)
    text = read_user_text(path, "CoNLL-2012 *_conll")
    items: list[dict] = []
    current = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        where = f"{path}:{number}"
        if line.startswith("#begin document"):
            match = _BEGIN.match(line)
            if match is None:
                raise InputFormatError(f"{where}: cannot read the '#begin document (name); part NNN' line")
            part = match["part"] or "0"
            current = {
                "name": match["name"],
                "part": part,
                "words": [],
                "sent": 0,
                "open": {},
                "mentions": {},
                "extra": [],
            }
            continue
        if line.startswith("#end document"):
            if current is None:
                raise InputFormatError(f"{where}: '#end document' without '#begin document'")
            if any(current["open"].values()):
                open_ids = sorted(k for k, v in current["open"].items() if v)
                raise InputFormatError(f"{where}: mentions of chain(s) {open_ids} are opened but never closed")
            items.append(_conll_item(current))
            current = None
            continue
        if line.startswith("#"):
            continue
        if current is None:
            if line:
                raise InputFormatError(
                    f"{where}: a token line outside '#begin document' ... '#end document' (is this a *_conll file?)"
                )
            continue
        if not line:
            if current["words"] and current["words"][-1][1] == current["sent"]:
                current["sent"] += 1
            continue
        cols = line.split()
        if len(cols) < 12:
            raise InputFormatError(f"{where}: expected at least 12 whitespace-separated columns, found {len(cols)}")
        index = len(current["words"])
        current["words"].append((cols[3], current["sent"]))
        current["extra"].append(cols)
        for kind, chain in _parse_coref_cell(cols[-1], where):
            if kind == "open":
                current["open"].setdefault(chain, []).append(index)
            else:
                stack = current["open"].get(chain)
                if not stack:
                    raise InputFormatError(f"{where}: chain {chain} closes a mention that was never opened")
                current["mentions"].setdefault(chain, []).append((stack.pop(), index))
    if current is not None:
        raise InputFormatError(f"{path}: the last document has no '#end document' line")
    if not items:
        raise InputFormatError(f"{path}: no '#begin document' found (is this a CoNLL-2012 *_conll file?)")
    return items


def _conll_item(doc: dict) -> dict:
    spans, pos, sent_of = [], 0, []
    for form, sent in doc["words"]:
        spans.append((pos, pos + len(form)))
        pos += len(form) + 1
        sent_of.append(sent)
    text = " ".join(form for form, _ in doc["words"])
    chains = []
    for chain_id in sorted(doc["mentions"]):
        mentions = sorted(doc["mentions"][chain_id])
        chains.append(
            {"id": str(chain_id), "mentions": [{"start": spans[a][0], "end": spans[b][1]} for a, b in mentions]}
        )
    return {
        "id": f"{doc['name']}/{doc['part']}",
        "text": text,
        "chains": chains,
        "words": [{"start": s, "end": e, "sent": sent} for (s, e), sent in zip(spans, sent_of)],
    }


def write_conll2012(items: Iterable[dict], path) -> Path:
    """JSONL documents (with ``words``) as a minimal ``*_conll`` file: document name, part, word
    number, word and the coreference column; the other columns are ``-``."""
    lines = []
    for item in items:
        name, _, part = item["id"].rpartition("/")
        if not name:
            name, part = item["id"], "0"
        words = item["words"]
        cells = [[] for _ in words]
        starts = {w["start"]: i for i, w in enumerate(words)}
        ends = {w["end"]: i for i, w in enumerate(words)}
        for chain in item["chains"]:
            for m in chain["mentions"]:
                a, b = starts[m["start"]], ends[m["end"]]
                if a == b:
                    cells[a].append((0, f"({chain['id']})"))
                else:
                    cells[a].append((1, f"({chain['id']}"))
                    cells[b].append((-1, f"{chain['id']})"))
        lines.append(f"#begin document ({name}); part {int(part):03d}")
        last_sent, in_sent = None, 0
        for i, w in enumerate(words):
            sent = w.get("sent", 0)
            if last_sent is not None and sent != last_sent:
                lines.append("")
                in_sent = 0
            last_sent = sent
            coref = "|".join(c for _, c in sorted(cells[i], key=lambda t: -t[0])) or "-"
            form = item["text"][w["start"] : w["end"]]
            lines.append("\t".join([name, str(int(part)), str(in_sent), form] + ["-"] * 7 + [coref]))
            in_sent += 1
        lines += ["", "#end document"]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
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
