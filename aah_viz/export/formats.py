"""Render a :class:`~aah_viz.export.table.Table` as CSV, Markdown or LaTeX (booktabs).

CSV keeps full precision (Python's shortest round-trip repr, or the original published string of
an imported cell) and adds ``<col>_std``, ``<col>_ci_low``, ``<col>_ci_high`` columns when the
table has uncertainties. Markdown and LaTeX round: a number with an uncertainty is printed to two
significant digits of that uncertainty (``6.557 ± 0.012``), other numbers to the column's fixed
decimals; the best value of a column is bold.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np

from aah_viz.errors import AAHVizError
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
        return to_latex(table)
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


def format_number(value: Any, decimals: int, uncertainty: float | None = None, *, pm: str = " ± ") -> str:
    """A rounded number; with a finite positive uncertainty, ``mean ± u`` with two significant digits
    of ``u`` and the mean rounded at the same position (``31490 ± 3461`` -> ``31500 ± 3500``)."""
    if _is_missing(value):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    v = float(value)
    d = None if uncertainty is None or _is_missing(uncertainty) else decimals_for(float(uncertainty))
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


def _display_rows(table, *, pm: str) -> list[list[str]]:
    rows = []
    for i in range(len(table.df)):
        row = []
        for col in table.df.columns:
            value = table.df[col].iloc[i]
            if col == "n" and "n" in table.id_columns and not _is_missing(value) and int(value) < 2:
                row.append(NO_VARIANCE)
                continue
            if col in table.value_columns:
                row.append(format_number(value, table.decimals.get(col, 4), _cell_uncertainty(table, i, col), pm=pm))
            else:
                row.append(format_number(value, 0) if not isinstance(value, str) else value)
        rows.append(row)
    return rows


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
    lines.append("| " + " | ".join(_md_escape(c) for c in cols) + " |")
    lines.append("|" + "|".join("---:" if c in table.value_columns else "---" for c in cols) + "|")
    for i, row in enumerate(_display_rows(table, pm=" ± ")):
        cells = []
        for col, text in zip(cols, row):
            text = _md_escape(text)
            cells.append(f"**{text}**" if _is_best(table, i, col) else text)
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines.extend(f"- {_md_escape(n)}" for n in table.notes)
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
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


# Short LaTeX headers (column -> header); the table's notes spell out each one used.
SHORT_HEADERS = {
    "val_loss": ("val. loss", "final validation loss (nats)"),
    "val_ppl": ("ppl", "validation perplexity"),
    "acr": ("ACR", "attention coverage ratio (key-length proxy)"),
    "ACR": ("ACR", "attention coverage ratio (key-length proxy)"),
    "ACR_train_proxy": ("ACR", "attention coverage ratio (key-length proxy)"),
    "acr_causal": ("cov.", "causal-pair coverage"),
    "flops_ratio_est": ("FLOPs", "analytic FLOPs ratio estimate"),
    "flops_ratio": ("FLOPs", "analytic FLOPs ratio estimate"),
    "flops_reduction_pct": ("FLOPs red. (\\%)", "FLOPs reduction in percent"),
    "flops_reduction_percent": ("FLOPs red. (\\%)", "FLOPs reduction in percent"),
    "tokens_per_s": ("tok/s", "median tokens per second"),
    "tokens_per_second_train": ("tok/s", "median training tokens per second"),
    "tokens_per_second_infer": ("tok/s", "inference tokens per second"),
    "peak_mem_mb": ("mem (MiB)", "peak memory"),
    "peak_mem_gib": ("mem (GiB)", "peak memory"),
    "peak_gpu_alloc_GiB": ("alloc (GiB)", "peak GPU memory allocated"),
    "peak_gpu_reserved_GiB": ("resv. (GiB)", "peak GPU memory reserved"),
    "peak_reserved_gib": ("resv. (GiB)", "peak GPU memory reserved"),
    "checkpoint_step": ("ckpt", "checkpoint step"),
    "joint_scorer": ("joint", "joint scorer"),
    "elapsed_s": ("time (s)", "elapsed seconds"),
}
SINGLE_SEED_MARK = "$^\\dagger$"


def _latex_header(col: str) -> tuple[str, str | None]:
    """(header text, legend entry or None) of a column."""
    if col in SHORT_HEADERS:
        short, meaning = SHORT_HEADERS[col]
        return short, f"{short}: {latex_escape(meaning)}"
    if col.startswith("window_frac_") and col[12:].isdigit():
        return f"$w_{{{col[12:]}}}$", None
    return latex_escape(col), None


def to_latex(table) -> str:
    """A booktabs ``table`` environment with caption and label; needs ``\\usepackage{booktabs,graphicx}``.

    Headers are short, with a legend in the notes; a table wider than the text is scaled down to
    ``\\linewidth`` (never up); rows of regimes with one seed carry a dagger and a note.
    """
    cols = list(table.df.columns)
    out = [
        "% requires \\usepackage{booktabs,graphicx}",
        "\\begin{table}[t]",
        "\\centering",
        "\\small",
        f"\\caption{{{latex_escape(table.caption)}}}",
        f"\\label{{{table.label}}}",
    ]
    if table.is_empty:
        out += [f"\\emph{{{latex_escape(table.empty_message or 'no rows')}}}", "\\end{table}"]
        return "\n".join(out) + "\n"
    spec = "".join("r" if c in table.value_columns else "l" for c in cols)
    headers = [_latex_header(c) for c in cols]
    legend = [entry for _, entry in headers if entry]
    if any(c.startswith("window_frac_") for c in cols):
        legend.append("$w_W$: share of heads at window $W$ (tokens)")
    out += [
        "\\ifdefined\\aahtablebox\\else\\newsavebox{\\aahtablebox}\\fi",
        "\\sbox{\\aahtablebox}{%",
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(h for h, _ in headers) + " \\\\",
        "\\midrule",
    ]
    single = False
    for i, row in enumerate(_display_rows(table, pm=" ± ")):
        cells = []
        for col, text in zip(cols, row):
            if text == NO_VARIANCE:  # "n = 1, no variance estimate": a dagger and one note
                single = True
                cells.append(("1" if col == "n" else "one seed") + SINGLE_SEED_MARK)
                continue
            text = latex_escape(text)
            cells.append(f"\\textbf{{{text}}}" if _is_best(table, i, col) else text)
        out.append(" & ".join(cells) + " \\\\")
    out += [
        "\\bottomrule",
        "\\end{tabular}}",
        "\\ifdim\\wd\\aahtablebox>\\linewidth\\resizebox{\\linewidth}{!}{\\usebox{\\aahtablebox}}"
        "\\else\\usebox{\\aahtablebox}\\fi",
    ]
    notes = []
    if single:
        notes.append(f"{SINGLE_SEED_MARK} one seed: no spread, never tested for significance.")
    if legend:
        notes.append("; ".join(legend) + ".")
    notes += [latex_escape(n) for n in table.notes if not n.startswith(NO_VARIANCE)]
    if notes:
        out.append("\\par\\smallskip\\footnotesize")
        out.extend(n + "\\par" for n in notes)
    out.append("\\end{table}")
    return "\n".join(out) + "\n"


def latex_document(tables) -> str:
    """A standalone document holding the tables (for checking that they compile)."""
    body = "\n".join(to_latex(t) for t in tables)
    return (
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[utf8]{inputenc}\n"
        "\\usepackage{booktabs}\n\\usepackage{graphicx}\n\\begin{document}\n"
        f"{body}\\end{{document}}\n"
    )
