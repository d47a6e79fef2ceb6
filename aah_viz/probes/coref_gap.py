"""GAP (Webster et al. 2018) TSV as coreference documents of the JSONL format, and back: columns ID, Text,
Pronoun, Pronoun-offset, A, A-offset, A-coref, B, B-offset, B-coref, URL."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path

from aah_viz.errors import InputFormatError
from aah_viz.probes.textfile import read_user_text

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
