"""Render a :class:`~aah_viz.export.table.Table` as CSV, Markdown or LaTeX (booktabs).

CSV keeps full precision (Python's shortest round-trip repr, or the original published string of
an imported cell) and adds ``<col>_std``, ``<col>_ci_low``, ``<col>_ci_high`` columns when the
table has uncertainties. Markdown and LaTeX round: a column with uncertainties is printed to two
significant digits of its smallest (``6.557 ± 0.012``), at most the column's decimals, every row alike;
other columns to their fixed decimals; the best value of a column is bold.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np

from aah_viz.errors import AAHVizError
from aah_viz.export import latex_layout
from aah_viz.export.headers import SHORT_HEADERS, plain_header
from aah_viz.export.stats import NO_VARIANCE

FORMATS = ("csv", "md", "latex")
EXTENSIONS = {"csv": "csv", "md": "md", "latex": "tex"}
LARGE = 1e6  # numbers this large print with a power of ten


def render(table, fmt: str) -> str:
    """The table as text in ``fmt`` (csv, md or latex)."""
    if fmt == "csv":
        return to_csv(table)
    if fmt == "md":
        return to_markdown(table)
    if fmt in ("latex", "tex"):
        return to_latex(table.latex_form or table)
    raise AAHVizError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ------------------------------------------------------------------------------ numbers


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return math.isnan(float(value))
    try:
        return bool(value is np.nan)
    except Exception:  # noqa: BLE001
        return False


def exact_text(value: Any) -> str:
    """Full-precision text: integers as integers, floats by shortest round-trip repr, missing as ''."""
    if _is_missing(value):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(value)


SPREAD_NOISE = 1e-9  # a standard deviation this small against its mean is floating-point noise


def decimals_for(uncertainty: float, sig: int = 2) -> int | None:
    """Decimal position that keeps ``sig`` significant digits of ``uncertainty`` (negative: tens,
    hundreds, ...); None when the uncertainty is not a finite positive number."""
    if not (uncertainty > 0) or not math.isfinite(uncertainty):
        return None
    return sig - 1 - int(math.floor(math.log10(uncertainty)))


def _fixed(value: float, d: int) -> str:
    if d >= 0:
        return f"{value:.{d}f}"
    return f"{int(round(value, d))}"


def format_number(
    value: Any, decimals: int, uncertainty: float | None = None, *, pm: str = " ± ", places: int | None = None
) -> str:
    """A rounded number; with a finite positive uncertainty, ``mean ± u`` with two significant digits
    of ``u`` and the mean rounded at the same position (``31490 ± 3461`` -> ``31500 ± 3500``);
    ``places``: the column's one number of decimals instead (:func:`column_places`)."""
    if _is_missing(value):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    v = float(value)
    if (
        uncertainty is not None
        and not _is_missing(uncertainty)
        and abs(float(uncertainty)) <= SPREAD_NOISE * max(abs(v), 1e-6)
    ):
        uncertainty = None  # the spread of equal values summed in floating point: no spread to print
    d = None if uncertainty is None or _is_missing(uncertainty) else decimals_for(float(uncertainty))
    if places is not None:  # one format for the column: its spread's decimals, or the same for a bare value
        d, decimals = (places, decimals) if d is not None else (None, places)
    if not math.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "–")
    if abs(v) >= LARGE and (d is None or d < 0):  # e.g. perplexities of an untrained model: a power of ten
        exp = int(math.floor(math.log10(abs(v))))
        scale = 10.0**exp
        if d is not None:
            k = max(0, d + exp)  # decimals of the mantissa that keep the uncertainty's digits
            return f"{v / scale:.{k}f}e{exp:+d}{pm}{float(uncertainty) / scale:.{k}f}e{exp:+d}"
        return f"{v / scale:.3f}e{exp:+d}"
    if d is not None:
        return f"{_fixed(v, d)}{pm}{_fixed(float(uncertainty), d)}"
    if isinstance(value, (int, np.integer)) or (decimals == 0 and float(v).is_integer()):
        return f"{int(round(v))}"
    return f"{v:.{max(0, decimals)}f}"


def _cell_uncertainty(table, i: int, col: str) -> float | None:
    unc = table.uncertainty
    if unc is None or col not in unc.columns:
        return None
    u = unc[col].iloc[i]
    return None if _is_missing(u) else float(u)


def _is_best(table, i: int, col: str) -> bool:
    best = table.best
    return bool(best is not None and col in best.columns and bool(best[col].iloc[i]))


def column_places(table, col: str) -> int | None:
    """One number of decimals for a column with spreads: two significant digits of its smallest, at most
    the column's own decimals, so every row of the column prints alike (None: no spread in it)."""
    unc = table.uncertainty
    if unc is None or col not in unc.columns:
        return None
    found = [decimals_for(float(u)) for u in unc[col] if not _is_missing(u)]
    found = [d for d in found if d is not None]
    return min(table.decimals.get(col, 4), max(found)) if found else None


def _display_rows(table, *, pm: str) -> list[list[str]]:
    places = {c: column_places(table, c) for c in table.value_columns if c in table.df.columns}
    rows = []
    for i in range(len(table.df)):
        row = []
        for col in table.df.columns:
            value = table.df[col].iloc[i]
            if col == "n" and "n" in table.id_columns and not _is_missing(value) and int(value) < 2:
                row.append(NO_VARIANCE)
                continue
            if col in table.value_columns:
                decimals, spread = table.decimals.get(col, 4), _cell_uncertainty(table, i, col)
                row.append(format_number(value, decimals, spread, pm=pm, places=places.get(col)))
            else:
                row.append(format_number(value, 0) if not isinstance(value, str) else value)
        rows.append(row)
    return rows


SINGLE_SEED_NOTE = "† one seed: no spread, never tested for significance."


def _marked(cols, row) -> list[str]:
    """A row as it prints: a single seed's "n = 1, no variance estimate" as a dagger on its n ("1†") and
    elsewhere "one seed†" (one note under the table says it), so the n column holds numbers only."""
    return [("1†" if c == "n" else "one seed†") if t == NO_VARIANCE else t for c, t in zip(cols, row)]


def display_frame(table):
    """The table as Markdown and LaTeX print it (one number format a column, ``mean ± sd``, "–" where a
    value is missing) under its plain headers: what a preview on screen shows."""
    import pandas as pd

    heads = [plain_header(c)[0] for c in table.df.columns]
    heads = [h if heads.count(h) == 1 else f"{h} ({c})" for h, c in zip(heads, table.df.columns)]
    rows = [_marked(table.df.columns, row) for row in _display_rows(table, pm=" ± ")] if not table.is_empty else []
    return pd.DataFrame(rows, columns=heads)


# ------------------------------------------------------------------------------ CSV


def to_csv(table) -> str:
    """Full-precision CSV; uncertainty columns follow each value column when the table has them."""
    has_unc = (
        table.by == "regime" and table.uncertainty is not None and bool(table.uncertainty.notna().to_numpy().any())
    )
    header: list[str] = []
    for col in table.df.columns:
        header.append(col)
        if has_unc and col in table.value_columns:
            header += [f"{col}_std", f"{col}_ci_low", f"{col}_ci_high"]
    if "n" in table.id_columns and "n" in table.df.columns:
        header.append("n_note")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for i in range(len(table.df)):
        out = []
        for col in table.df.columns:
            text = None
            if table.exact is not None and col in table.exact.columns:
                t = table.exact[col].iloc[i]
                text = t if isinstance(t, str) else None
            out.append(text if text is not None else exact_text(table.df[col].iloc[i]))
            if has_unc and col in table.value_columns:
                for frame in (table.uncertainty, table.ci_low, table.ci_high):
                    out.append(exact_text(frame[col].iloc[i]) if frame is not None and col in frame.columns else "")
        if "n" in table.id_columns and "n" in table.df.columns:
            n = table.df["n"].iloc[i]
            out.append(NO_VARIANCE if not _is_missing(n) and int(n) < 2 else "")
        writer.writerow(out)
    if table.is_empty and table.empty_message:
        return buf.getvalue() + f"# {table.empty_message}\n"
    return buf.getvalue()


# ------------------------------------------------------------------------------ Markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table) -> str:
    lines = [f"**{_md_escape(table.caption)}** <!-- {table.label} -->", ""]
    if table.is_empty:
        lines.append(f"_{_md_escape(table.empty_message or 'no rows')}_")
        return "\n".join(lines) + "\n"
    cols = list(table.df.columns)
    # headers in words, as the LaTeX table's (val. loss, cov., w=8), each short one spelled out below
    heads = [plain_header(c) for c in cols]
    lines.append("| " + " | ".join(_md_escape(h) for h, _ in heads) + " |")
    lines.append("|" + "|".join("---:" if c in table.value_columns else "---" for c in cols) + "|")
    shown = _display_rows(table, pm=" ± ")
    single = any(text == NO_VARIANCE for row in shown for text in row)
    for i, row in enumerate(shown):
        cells = []
        for col, text in zip(cols, _marked(cols, row)):
            text = _md_escape(text)
            cells.append(f"**{text}**" if _is_best(table, i, col) else text)
        lines.append("| " + " | ".join(cells) + " |")
    legend = [entry for _, entry in heads if entry]
    if any(c.startswith("window_frac_") for c in cols):
        legend.append("w=W: share of heads at window W (tokens)")
    notes = [SINGLE_SEED_NOTE] if single else []  # in place of the table's note naming the single seeds
    notes += [n for n in table.notes if not (single and n.startswith(NO_VARIANCE))]
    notes += ["; ".join(legend) + "."] if legend else []
    if notes:
        lines.append("")
        lines.extend(f"- {_md_escape(n)}" for n in notes)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ LaTeX

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "±": r"$\pm$",
    # without T1 font encoding (LaTeX's default OT1) a bare < or > prints as ¡ or ¿
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


SINGLE_SEED_MARK = "$^\\dagger$"


def _latex_header(col: str, cell_pt: float, align: str) -> tuple[str, float, str | None]:
    """(header as LaTeX, its estimated width, legend entry or None) of a column; a long header
    breaks after its underscores into lines no wider than its cells."""
    if col in SHORT_HEADERS:
        short, meaning = SHORT_HEADERS[col]
        return short, latex_layout.text_pt(short.replace("\\", "")), f"{short}: {latex_escape(meaning)}"
    if col.startswith("window_frac_") and col[12:].isdigit():
        return f"$w_{{{col[12:]}}}$", 4.7 + 4.3 * len(col[12:]), None
    lines = latex_layout.header_lines(col, cell_pt)
    width = max(latex_layout.text_pt(line) for line in lines)
    if len(lines) == 1:
        return latex_escape(col), width, None
    stacked = "\\\\".join(latex_escape(line) for line in lines)
    return f"\\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}{stacked}\\end{{tabular}}", width, None


def _lead_columns(table, cols: list[str], cell_pts: list[float]) -> list[str]:
    """The columns that say whose row it is, repeated in every part of a split table: the run (else
    the regime) and the short keys (layer, target, ...); text about the row is shown once."""
    ids = [c for c in table.id_columns if c in cols and c not in ("seed", "n")]
    if "run" in ids:
        ids = [c for c in ids if c != "regime"]
    if not ids:
        return cols[:1]
    width = dict(zip(cols, cell_pts))
    keys = [c for c in ids[1:] if c not in latex_layout.DESCRIPTIVE and width[c] <= latex_layout.NAMING_MAX_PT]
    return [ids[0], *keys]


def to_latex(table, *, width_pt: float = latex_layout.ARTICLE_WIDTH_PT) -> str:
    """A booktabs ``table`` environment with caption and label; needs ``\\usepackage{booktabs,graphicx}``.

    Headers are short, with a legend in the notes; long text wraps, long headers break at their
    underscores, and a table wider than ``width_pt`` (the paper's column; default the one-column
    article's ``\\textwidth``) is split into parts stacked in the float, each repeating the columns
    that name the row, so the text keeps its size (``aah_viz.export.latex_layout``). Any part still
    wider than ``\\linewidth`` is scaled down to it (never up); rows of regimes with one seed carry a
    dagger and a note.
    """
    cols = list(table.df.columns)
    out = [
        "% requires \\usepackage{booktabs,graphicx}",
        "\\begin{table}[tp]",
        "\\centering",
        "\\small",
        f"\\caption{{{latex_escape(table.caption)}}}",
        f"\\label{{{table.label}}}",
    ]
    if table.is_empty:
        out += [f"\\emph{{{latex_escape(table.empty_message or 'no rows')}}}", "\\end{table}"]
        return "\n".join(out) + "\n"
    shown = _display_rows(table, pm=" ± ")
    bold = [[_is_best(table, i, c) for c in cols] for i in range(len(shown))]
    single = any(text == NO_VARIANCE for row in shown for text in row)
    plain = [_marked(cols, row) for row in shown]
    widths, specs, headers, legend = [], [], [], []
    cell_pts = [
        latex_layout.column_pt(0.0, [row[j] for row in plain], [row[j] for row in bold]) - 2 * latex_layout.TABCOLSEP_PT
        for j in range(len(cols))
    ]
    naming = _lead_columns(table, cols, cell_pts)  # never wrapped: a run's name is read whole
    for j, col in enumerate(cols):
        cell_pt = cell_pts[j]
        value = col in table.value_columns
        spec = "r" if value else "l"
        if not value and col not in naming and cell_pt > latex_layout.WRAP_PT:  # long text: a paragraph column
            spec, cell_pt = f">{{\\raggedright\\arraybackslash}}p{{{latex_layout.WRAP_PT:g}pt}}", latex_layout.WRAP_PT
        head, head_pt, entry = _latex_header(col, cell_pt, "r" if value else "l")
        widths.append(max(cell_pt, head_pt) + 2 * latex_layout.TABCOLSEP_PT)
        specs.append(spec)
        headers.append(head)
        if entry:
            legend.append(entry)
    if any(c.startswith("window_frac_") for c in cols):
        legend.append("$w_W$: share of heads at window $W$ (tokens)")
    if any(s.startswith(">") for s in specs):
        out[0] = "% requires \\usepackage{booktabs,graphicx,array}"
    index = {c: j for j, c in enumerate(cols)}
    lead = [index[c] for c in naming]
    rest = [j for j in range(len(cols)) if j not in lead]  # other labels (regime, seed, reasons) and values
    lead = latex_layout.fit_lead(widths, lead, rest, width_pt)
    rest = [j for j in range(len(cols)) if j not in lead]
    parts = latex_layout.split_parts(widths, lead, rest, width_pt)
    rows = [_latex_row(table, cols, shown[i], bold[i]) for i in range(len(shown))]
    wrapped = [j for j, spec in enumerate(specs) if spec.startswith(">")]
    row_lines = [latex_layout.row_lines([plain[i][j] for j in wrapped]) for i in range(len(shown))]
    head_lines = [max(h.count("\\\\") + 1 for h in (headers[j] for j in part)) for part in parts]
    blocks = latex_layout.blocks(parts, head_lines, row_lines)
    notes = []
    if len(parts) > 1:
        named = ", ".join(latex_escape(cols[j]) for j in lead)
        notes.append(f"The table is in {len(parts)} parts to keep its text readable; each repeats {named}.")
    if single:
        notes.append(f"{SINGLE_SEED_MARK} one seed: no spread, never tested for significance.")
    if legend:
        notes.append("; ".join(legend) + ".")
    notes += [latex_escape(n) for n in table.notes if not n.startswith(NO_VARIANCE)]
    floats = latex_layout.pack_floats(blocks, latex_layout.note_lines(notes, width_pt))
    for f, members in enumerate(floats):
        if f:  # a continuation: no caption of its own (one table number), a line pointing back
            out += [
                "\\end{table}",
                "\\begin{table}[tp]",
                "\\centering",
                "\\small",
                f"{{\\footnotesize Table~\\ref{{{table.label}}}, continued\\par\\smallskip}}",
            ]
        for k, (part, lo, hi) in enumerate(members):
            if k:
                out.append("\\par\\medskip")
            out += [
                "\\ifdefined\\aahtablebox\\else\\newsavebox{\\aahtablebox}\\fi",
                "\\sbox{\\aahtablebox}{%",
                f"\\begin{{tabular}}{{{''.join(specs[j] for j in parts[part])}}}",
                "\\toprule",
                " & ".join(headers[j] for j in parts[part]) + " \\\\",
                "\\midrule",
            ]
            out += [" & ".join(rows[i][j] for j in parts[part]) + " \\\\" for i in range(lo, hi)]
            out += [
                "\\bottomrule",
                "\\end{tabular}}",
                "\\ifdim\\wd\\aahtablebox>\\linewidth\\resizebox{\\linewidth}{!}{\\usebox{\\aahtablebox}}"
                "\\else\\usebox{\\aahtablebox}\\fi",
            ]
    if notes:  # flush left under the centred table, as a table's notes are set
        out.append("\\par\\smallskip{\\raggedright\\footnotesize")
        out.extend(n + "\\par" for n in notes)
        out.append("}")
    out.append("\\end{table}")
    return "\n".join(out) + "\n"


def _latex_row(table, cols, shown_row, bold_row) -> list[str]:
    cells = []
    for col, text, strong in zip(cols, shown_row, bold_row):
        if text == NO_VARIANCE:  # "n = 1, no variance estimate": a dagger and one note
            cells.append(("1" if col == "n" else "one seed") + SINGLE_SEED_MARK)
            continue
        text = latex_escape(text)
        cells.append(f"\\textbf{{{text}}}" if strong else text)
    return cells


def latex_document(tables) -> str:
    """A standalone document holding the tables (for checking that they compile)."""
    body = "\\clearpage\n".join(to_latex(t.latex_form or t) for t in tables)  # each placed before the next
    return (
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[utf8]{inputenc}\n"
        "\\usepackage{booktabs}\n\\usepackage{graphicx}\n\\usepackage{array}\n\\begin{document}\n"
        f"{body}\\end{{document}}\n"
    )
