"""One imported run per published method: Table 1 as scalars at the training step, Table 2, the
bucket fractions and the resolution vector as one ``inference`` event at the checkpoint step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aah_viz.errors import InputFormatError
from aah_viz.export.paper_columns import TABLE1_SCALARS, TABLE2_KEYS
from aah_viz.importers.reference_csv import FRAC_RE, PublishedMethod
from aah_viz.importers.run_target import import_target
from aah_viz.runlog import RunWriter, make_manifest
from aah_viz.schema import STATUS_IMPORTED

# the shape of the paper's 4096-token suite (method section 16), recorded for the manifest
PAPER_SHAPE = {"n_layer": 16, "n_head": 12, "n_embd": 1536, "n_ff": 6144}
PAPER_MAX_DEPTH = {"full_attention": 0, "grouping_off": 0, "shallow_freeze": 1}


def _windows_from_header(row: dict | None) -> list[int]:
    if not row:
        return []
    return sorted(int(m.group(1)) for c in row if (m := FRAC_RE.match(c)))


def paper_windows(entry: PublishedMethod) -> list[int]:
    windows = _windows_from_header(entry.table1) or _windows_from_header(entry.table2) or sorted(entry.buckets)
    if not windows:
        raise InputFormatError(
            f"method {entry.method!r}: no window_frac_<w> columns or bucket rows say which windows it had"
        )
    return windows


def paper_run_id(entry: PublishedMethod) -> str:
    seq_len = int(entry.context or max(paper_windows(entry)))
    return f"paper-{seq_len}-{entry.regime.replace('_', '-')}" + (
        f"-seed{entry.seed}" if entry.seed is not None else ""
    )


def write_paper_run(entry: PublishedMethod, out_dir: Path, overwrite: bool, training_step: int | None) -> Path:
    windows = paper_windows(entry)
    seq_len = int(entry.context or max(windows))
    step = training_step if training_step is not None else (entry.checkpoint_step or 0)
    ckpt = entry.checkpoint_step if entry.checkpoint_step is not None else step
    seed = entry.seed
    run_id = paper_run_id(entry)
    path = import_target(out_dir, run_id, overwrite)
    described = entry.table1 or entry.table2 or {}
    values: dict[str, dict] = {}
    if entry.table1:
        values["training"] = {c: v for c, v in entry.table1.items() if c != "__line__"}
    if entry.table2:
        values["inference"] = {c: v for c, v in entry.table2.items() if c != "__line__"}
    detail = _inference_detail(entry, windows, ckpt)  # may add notes: before the manifest is built
    config = {
        **PAPER_SHAPE,
        "seq_len": seq_len,
        "windows": windows,
        "regime": entry.regime,
        "shape_source": "the paper's 4096-token suite (method section 16); not part of the imported files",
    }
    manifest = make_manifest(
        run_id=run_id,
        regime=entry.regime,
        seed=seed,
        config=config,
        windows=windows,
        seq_len=seq_len,
        n_layer=PAPER_SHAPE["n_layer"],
        n_head=PAPER_SHAPE["n_head"],
        max_depth=PAPER_MAX_DEPTH.get(entry.regime, 4),
        preset="paper-1b",
        steps=max(step, ckpt),
        data="published reference numbers",
        imported=True,
        sources=list(entry.sources),
        reference={
            "method": entry.method,
            "grouping": described.get("grouping", ""),
            "hierarchy": described.get("hierarchy", ""),
            "joint_scorer": described.get("joint_scorer", ""),
            "training_step": step,
            "checkpoint_step": ckpt,
            "values": values,
            "notes": entry.notes,
        },
    )
    writer = RunWriter.create(path, manifest, overwrite=overwrite)
    try:
        if entry.table1:
            names, vals = [], []
            for col, (name, factor) in TABLE1_SCALARS.items():
                text = entry.table1.get(col, "").strip()
                if text:
                    names.append(name)
                    vals.append(float(text) * factor)
            fracs = {w: entry.table1.get(f"window_frac_{w}", "").strip() for w in windows}
            for w, text in fracs.items():
                if text:
                    names.append(f"window_frac_{w}")
                    vals.append(float(text))
            writer.append(
                "scalars",
                {
                    "step": np.full(len(names), step, dtype=np.int64),
                    "layer": [None] * len(names),
                    "name": names,
                    "value": np.asarray(vals, dtype=np.float64),
                },
            )
        if detail is not None:
            writer.event(ckpt, "inference", **detail)
    except Exception:
        writer.close("failed")
        raise
    writer.close(STATUS_IMPORTED)
    return path


def _inference_detail(entry: PublishedMethod, windows, ckpt) -> dict | None:
    if entry.table2 is None and not entry.buckets and not entry.resolution:
        return None
    detail: dict = {"checkpoint_step": ckpt, "source_files": list(entry.sources)}
    t2 = entry.table2 or {}
    for col, key in TABLE2_KEYS.items():
        text = t2.get(col, "").strip()
        if text:
            detail[key] = float(text)
    fracs: dict[str, float] = {}
    for w in windows:
        text = t2.get(f"window_frac_{w}", "").strip()
        if text:
            fracs[str(w)] = float(text)
    for w, text in sorted(entry.buckets.items()):
        value = float(text)
        if str(w) in fracs and fracs[str(w)] != value:
            entry.notes.append(
                f"window {w}: Table 2 says {fracs[str(w)]!r}, the bucket-fraction file {value!r}; Table 2 kept"
            )
        fracs.setdefault(str(w), value)
    if fracs:
        detail["window_frac"] = fracs
    res = t2.get("resolution_per_head_mean_raw", "").strip()
    vector = None
    if res:
        try:
            vector = [float(x) for x in json.loads(res)]
        except (json.JSONDecodeError, TypeError, ValueError):
            raise InputFormatError(
                f"Table 2, method {entry.method!r}: resolution_per_head_mean_raw is not a list of numbers: {res[:60]!r}"
            ) from None
    if entry.resolution:
        idx = sorted(entry.resolution)
        if idx != list(range(len(idx))):
            raise InputFormatError(
                f"method {entry.method!r}: resolution vector indices {idx} are not 0..{len(idx) - 1}"
            )
        from_file = [float(entry.resolution[i]) for i in idx]
        if vector is not None and vector != from_file:
            entry.notes.append("the resolution vector of Table 2 and of the long-form file differ; Table 2 kept")
        vector = vector if vector is not None else from_file
    if vector is not None:
        detail["resolution_per_head_mean"] = vector
    return detail
