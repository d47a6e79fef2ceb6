"""The reference's paper CSVs read and checked: each file's kind from its header, every number parsed
before anything is written, one ``PublishedMethod`` per published method (``docs/export.md``)."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from aah_viz.errors import InputFormatError
from aah_viz.export.paper_columns import TABLE1_SCALARS, TABLE2_KEYS
from aah_viz.regimes import regime_named, slug

TABLE1_COLUMNS = ("method", "context", "seed", "val_loss", "val_ppl", "ACR_train_proxy", "tokens_per_second_train")
TABLE2_COLUMNS = (
    "method",
    "context",
    "checkpoint_step",
    "seed",
    "val_loss",
    "val_ppl",
    "ACR",
    "tokens_per_second_infer",
)
BUCKET_COLUMNS = ("method", "variant", "context", "seed", "checkpoint_step", "window_size", "fraction")
RESOLUTION_COLUMNS = (
    "method",
    "variant",
    "context",
    "seed",
    "checkpoint_step",
    "layer_or_head_index_from_wandb_vector",
    "mean_window_size_proxy",
)
HEATMAP_COLUMNS = (
    "regime",
    "layer_id",
    "head_id",
    "selected_window_idx",
    "selected_window_size",
    "pre_clamp_window_idx",
    "final_window_idx",
    "final_window_size",
    "ACR",
)


FRAC_RE = re.compile(r"^window_frac_(\d+)$")


@dataclass
class PublishedMethod:
    """Everything known about one published method (one run to write)."""

    method: str
    regime: str
    seed: int | None = None
    context: int | None = None
    table1: dict | None = None
    table2: dict | None = None
    buckets: dict[int, str] = field(default_factory=dict)
    resolution: dict[int, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checkpoint_step: int | None = None


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                raise InputFormatError(f"{path}: empty file (expected a CSV header line)") from None
            header = [h.strip() for h in header]
            rows = []
            for lineno, values in enumerate(reader, start=2):
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise InputFormatError(
                        f"{path}, line {lineno}: {len(values)} fields, the header has {len(header)}; "
                        f'check the quoting of list cells such as "[2,2,2,2] adaptive"'
                    )
                rows.append({"__line__": lineno, **dict(zip(header, values))})
    except UnicodeDecodeError as err:
        raise InputFormatError(
            f"{path}: not UTF-8 text ({err}); give the CSV files of the reference's paper folder"
        ) from None
    except csv.Error as err:
        raise InputFormatError(f"{path}: malformed CSV ({err})") from None
    return header, rows


def _kind(header: list[str]) -> str | None:
    cols = set(header)
    if set(HEATMAP_COLUMNS) <= cols:
        return "heatmap"
    if set(TABLE1_COLUMNS) <= cols:
        return "table1"
    if set(TABLE2_COLUMNS) <= cols:
        return "table2"
    if set(BUCKET_COLUMNS) <= cols:
        return "buckets"
    if set(RESOLUTION_COLUMNS) <= cols:
        return "resolution"
    return None


def cell_float(path: Path, row: dict, col: str, *, allow_empty: bool = True) -> float | None:
    text = row.get(col, "").strip()
    if text == "":
        if allow_empty:
            return None
        raise InputFormatError(f"{path}, line {row['__line__']}: column {col!r} is empty")
    try:
        value = float(text)
    except ValueError:
        raise InputFormatError(f"{path}, line {row['__line__']}: column {col!r} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise InputFormatError(f"{path}, line {row['__line__']}: column {col!r} is not finite: {text!r}")
    return value


def cell_int(path: Path, row: dict, col: str) -> int:
    value = cell_float(path, row, col, allow_empty=False)
    if not float(value).is_integer():
        raise InputFormatError(f"{path}, line {row['__line__']}: column {col!r} must be an integer, got {row[col]!r}")
    return int(value)


def regime_of(method: str, variant: str | None = None) -> str:
    """Our regime name for a published method (``variant`` such as ``main_4096_full_adaptive`` wins)."""
    m = re.match(r"^main_\d+_(.+)$", variant.strip()) if variant else None
    name = regime_slug(m.group(1) if m else method)
    known = regime_named(name)
    return known.name if known else name


def regime_slug(text: str) -> str:
    """A regime name safe as part of a folder name: lower-case letters, digits and underscores."""
    return slug(text) or "unknown"


def _method(methods: dict, name: str, regime: str) -> PublishedMethod:
    key = name.strip()
    if key not in methods:
        methods[key] = PublishedMethod(method=key, regime=regime)
    return methods[key]


def _set_identity(entry: PublishedMethod, path: Path, row: dict, *, seed: int, context: int) -> None:
    for attr, value in (("seed", seed), ("context", context)):
        old = getattr(entry, attr)
        if old is not None and old != value:
            raise InputFormatError(
                f"{path}, line {row['__line__']}: method {entry.method!r} has {attr} {value} here but {old} in "
                f"another file; import files of one experiment together"
            )
        setattr(entry, attr, value)


def parse_sources(src_dir: Path):
    methods: dict[str, PublishedMethod] = {}
    heatmaps: list[tuple[Path, list[dict]]] = []
    files = sorted(p for p in src_dir.iterdir() if p.is_file() and p.suffix.lower() == ".csv")
    if not files:
        raise InputFormatError(f"{src_dir} holds no CSV files; give the reference's paper folder")
    recognised = 0
    for path in files:
        header, rows = _read_csv(path)
        kind = _kind(header)
        if kind is None:
            continue
        recognised += 1
        if kind == "heatmap":
            heatmaps.append((path, rows))
            continue
        for row in rows:
            if kind in ("table1", "table2"):
                name = row["method"]
                entry = _method(methods, name, regime_of(name))
                _set_identity(
                    entry, path, row, seed=cell_int(path, row, "seed"), context=cell_int(path, row, "context")
                )
                for col in header:  # validate numbers now, before anything is written
                    if col in TABLE1_SCALARS or col in TABLE2_KEYS or FRAC_RE.match(col):
                        cell_float(path, row, col)
                clean = {c: row[c] for c in header}
                if kind == "table1":
                    if entry.table1 is not None:
                        raise InputFormatError(
                            f"{path}, line {row['__line__']}: method {name!r} appears twice in Table 1"
                        )
                    entry.table1 = clean
                else:
                    if entry.table2 is not None:
                        raise InputFormatError(
                            f"{path}, line {row['__line__']}: method {name!r} appears twice in Table 2"
                        )
                    entry.table2 = clean
                    entry.checkpoint_step = cell_int(path, row, "checkpoint_step")
            else:
                name = row["method"]
                entry = _method(methods, name, regime_of(name, row.get("variant")))
                _set_identity(
                    entry, path, row, seed=cell_int(path, row, "seed"), context=cell_int(path, row, "context")
                )
                step = cell_int(path, row, "checkpoint_step")
                if entry.checkpoint_step is not None and entry.checkpoint_step != step:
                    raise InputFormatError(
                        f"{path}, line {row['__line__']}: checkpoint_step {step} differs from {entry.checkpoint_step} "
                        f"for method {name!r}"
                    )
                entry.checkpoint_step = step
                if kind == "buckets":
                    cell_float(path, row, "fraction", allow_empty=False)
                    entry.buckets[cell_int(path, row, "window_size")] = row["fraction"].strip()
                else:
                    cell_float(path, row, "mean_window_size_proxy", allow_empty=False)
                    entry.resolution[cell_int(path, row, "layer_or_head_index_from_wandb_vector")] = row[
                        "mean_window_size_proxy"
                    ].strip()
            if path.name not in entry.sources:
                entry.sources.append(path.name)
    if not recognised:
        raise InputFormatError(
            f"{src_dir}: none of its CSV files has a known header (Table 1/2, window-bucket fractions, "
            f"resolution vector, Qwen3-4B heatmap); see docs/export.md for the formats"
        )
    return methods, heatmaps
