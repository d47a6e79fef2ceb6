"""CoNLL-2012 (OntoNotes ``*_conll``) as coreference documents of the JSONL format, and back: the word in
column 4, coreference in the last column."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from aah_viz.errors import InputFormatError
from aah_viz.probes.textfile import read_user_text

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
