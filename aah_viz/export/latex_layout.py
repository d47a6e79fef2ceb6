"""How a LaTeX table fits the paper's column: estimated widths, wrapped text, columns split into parts.

Scaling a wide ``tabular`` down to ``\\linewidth`` shrank the widest tables to 3-4 pt text. Here the
width of every column is estimated from its text (the measured glyph widths of ``\\small`` Computer
Modern in T1, the font ``to_latex`` sets), long text wraps in a paragraph column, long headers break
at their underscores, and a table still wider than the column is cut into parts stacked in the same
float, each repeating the columns that say whose row it is. The estimate errs wide, so the scaling
kept in ``to_latex`` as a last resort stays near 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

ARTICLE_WIDTH_PT = 345.0  # \textwidth of the default one-column article at 10 pt (the tests' document)
TABCOLSEP_PT = 6.0
BOLD = 1.16  # bold extended against medium, measured on digits and letters
WRAP_PT = 120.0  # a text column wider than this wraps in a paragraph column this wide
FLOAT_LINES = 44  # lines of \\small a float may hold: 550 pt of text height, less the caption
HEADER_MIN_PT = 28.0  # a header breaks at underscores down to this width (or its widest cell)
# measured at \small (9 pt) with \usepackage[T1]{fontenc}; others take the widest lowercase letter
_GLYPH_PT = {
    **dict.fromkeys("0123456789", 4.63),
    **dict.fromkeys("abcdefghijklmnopqrstuvwxyz", 4.6),
    **dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 6.7),
    "_": 7.2,
    " ": 3.1,
    ".": 2.6,
    ",": 2.6,
    ":": 2.6,
    ";": 2.6,
    "-": 3.1,
    "–": 4.7,
    "±": 7.5,
    "%": 7.7,
    "(": 3.6,
    ")": 3.6,
    "[": 2.6,
    "]": 2.6,
    "/": 4.7,
    "|": 2.6,
    "'": 2.6,
}
OTHER_PT = 6.7
# key columns that describe a row rather than name it: shown once, never repeated in every part
DESCRIPTIVE = frozenset({"reason", "partition_verdict", "note"})
NAMING_MAX_PT = 110.0  # a key column wider than this is text about the row, not its name


def text_pt(text: str, *, bold: bool = False) -> float:
    """Estimated width of ``text`` (as printed, before escaping) at ``\\small``."""
    width = sum(_GLYPH_PT.get(ch, OTHER_PT) for ch in str(text))
    return width * BOLD if bold else width


def header_lines(header: str, cell_pt: float) -> list[str]:
    """A header as lines broken after its underscores, each no wider than the column's cells need
    (at least ``HEADER_MIN_PT``); a header without underscores stays one line."""
    limit = max(cell_pt, HEADER_MIN_PT)
    if text_pt(header) <= limit or "_" not in header:
        return [header]
    pieces = [p + "_" for p in header.split("_")[:-1]] + [header.split("_")[-1]]
    lines = [""]
    for piece in pieces:
        if lines[-1] and text_pt(lines[-1] + piece) > limit:
            lines.append(piece)
        else:
            lines[-1] += piece
    return lines


def column_pt(header_width: float, cells: Sequence[str], bold: Sequence[bool]) -> float:
    """Width of one column: its widest cell or header, with the space between columns."""
    widest = max([header_width, *(text_pt(c, bold=b) for c, b in zip(cells, bold))])
    return widest + 2 * TABCOLSEP_PT


def split_parts(widths: Sequence[float], lead: Sequence[int], rest: Sequence[int], limit: float) -> list[list[int]]:
    """Column indexes of each part: every part starts with ``lead`` (the columns naming the row) and
    takes the next columns of ``rest`` while they fit in ``limit``. Every part gets at least one of
    them, so a single too-wide column still gets a part of its own."""
    parts: list[list[int]] = []
    base = sum(widths[i] for i in lead)
    current, used = list(lead), base
    for j in rest:
        if len(current) > len(lead) and used + widths[j] > limit:
            parts.append(current)
            current, used = list(lead), base
        current.append(j)
        used += widths[j]
    parts.append(current)
    return parts


def fit_lead(widths: Sequence[float], lead: Sequence[int], rest: Sequence[int], limit: float) -> list[int]:
    """``lead`` less its last columns until it leaves room for the widest other column (its first,
    the run or regime, always stays)."""
    room = limit - max((widths[j] for j in rest), default=0.0)
    kept = list(lead)
    while len(kept) > 1 and sum(widths[i] for i in kept) > room:
        kept.pop()
    return kept


def row_lines(wrapped_cells: Sequence[str]) -> int:
    """Lines a row takes: its longest paragraph cell over the wrap width."""
    return max([1, *(math.ceil(text_pt(c) / WRAP_PT) for c in wrapped_cells)])


def note_lines(notes: Sequence[str], width: float) -> int:
    """Lines (of \\small) the notes under a table take, in \\footnotesize."""
    return sum(math.ceil(0.85 * text_pt(n) / width) for n in notes) + (1 if notes else 0)


def blocks(parts: Sequence[Sequence[int]], head_lines: Sequence[int], rows: Sequence[int]):
    """(part, first row, end row, lines) pieces: each part's rows cut where a float would overflow."""
    out = []
    for p, head in enumerate(head_lines):
        overhead = head + 2  # rules and the space between parts
        lo, used = 0, overhead
        for i, lines in enumerate(rows):
            if i > lo and used + lines > FLOAT_LINES:
                out.append((p, lo, i, used))
                lo, used = i, overhead
            used += lines
        out.append((p, lo, len(rows), used))
    return out


def pack_floats(pieces, notes: int) -> list[list[tuple[int, int, int]]]:
    """Pieces packed in order into floats of at most ``FLOAT_LINES`` (the notes close the last one):
    a table that fits stays one float, a longer one continues in the next."""
    floats: list[list[tuple[int, int, int]]] = [[]]
    used = 0
    for part, lo, hi, lines in pieces:
        if floats[-1] and used + lines > FLOAT_LINES:
            floats.append([])
            used = 0
        floats[-1].append((part, lo, hi))
        used += lines
    if len(floats[-1]) and used + notes > FLOAT_LINES and len(floats[-1]) > 1:
        floats.append([floats[-1].pop()])  # the notes need room: the last piece moves on with them
    return floats
