"""A PDF's document title set to the figure's own: Chromium prints Kaleido's page title
("Kaleido-fier") into every PDF it writes, which a PDF viewer shows as the document's name.

The title goes in by an incremental update (a new Info object, an xref section for it, and a trailer
pointing back to the previous one; PDF 1.7 §7.5.6), so every object Chromium wrote stays where it is;
its own title string is blanked in place (spaces of the same length), so that no tool reading the old
Info object (``strings``, a naive indexer) finds "Kaleido-fier" either.
"""

from __future__ import annotations

import re

_TRAILER = re.compile(rb"trailer\s*<<(.*?)>>\s*startxref\s*(\d+)\s*%%EOF\s*$", re.S)
_TAGS = re.compile(r"<[^>]*>")
_LITERAL_TITLE = re.compile(rb"/Title\s*\(((?:[^()\\]|\\[\s\S])*)\)")  # escapes included: (Kaleido\055fier)


def plain_title(text: str | None) -> str:
    """A Plotly title as plain text: markup tags dropped (``<b>``, ``<br>``), spaces collapsed."""
    return " ".join(_TAGS.sub(" ", str(text or "")).split())


def _pdf_text(text: str) -> bytes:
    """A PDF text string of any characters: UTF-16BE with its byte-order mark, as hex."""
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode("ascii") + b">"


def with_title(pdf: bytes, title: str) -> bytes:
    """``pdf`` whose document title is ``title`` (and producer aah-viz); unchanged when its end is
    not a classic trailer this update can follow (a cross-reference stream)."""
    found = _TRAILER.search(pdf)
    if found is None:
        return pdf
    fields, previous = found.group(1), int(found.group(2))
    size = re.search(rb"/Size\s+(\d+)", fields)
    root = re.search(rb"/Root\s+(\d+\s+\d+\s+R)", fields)
    if size is None or root is None:
        return pdf
    number = int(size.group(1))
    pdf = _LITERAL_TITLE.sub(lambda m: m.group(0).replace(m.group(1), b" " * len(m.group(1))), pdf)
    body = pdf if pdf.endswith(b"\n") else pdf + b"\n"
    info = (
        f"{number} 0 obj\n<</Title ".encode()
        + _pdf_text(title)
        + b" /Producer "
        + _pdf_text("aah-viz (Plotly, Kaleido)")
        + b">>\nendobj\n"
    )
    xref_at = len(body) + len(info)
    xref = f"xref\n{number} 1\n{len(body):010d} 00000 n \n".encode()
    trailer = (
        f"trailer\n<</Size {number + 1} /Root ".encode()
        + root.group(1)
        + f" /Info {number} 0 R /Prev {previous}>>\nstartxref\n{xref_at}\n%%EOF\n".encode()
    )
    return body + info + xref + trailer
