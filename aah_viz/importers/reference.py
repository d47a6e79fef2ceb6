"""Import the reference's published numbers as run directories (``aah-viz import-reference``).

Reads the CSV formats of the reference's ``paper/`` folder, recognised by their header (not their
file name): Table 1 (training), Table 2 (inference), the window-bucket fractions (long form), the
per-head-index resolution vector (long form), and the Qwen3-4B per-head heatmaps. It writes one run
directory per method/regime through :class:`~aah_viz.runlog.RunWriter`, with manifest status
``imported``, ``imported: true``, the source file names, and the original cell strings, so an
export of the imported Table 1 reproduces the published numbers exactly.

What goes where (``docs/export.md`` has the full map):

* Table 1 row -> model-wide ``scalars`` at the training step (``val_loss``, ``val_ppl``, ``acr``
  (ACR_train_proxy), ``flops_ratio_est``, ``tokens_per_s``, ``peak_mem_mb`` / ``peak_reserved_mb``
  (GiB x 1024), ``window_frac_<w>``: the model-wide bucket fractions, which have no per-layer
  ``branch`` rows to live in);
* Table 2 row, bucket fractions, resolution vector -> one ``inference`` event at the checkpoint step;
* Qwen3-4B heatmap -> ``heads`` rows (executed window, raw index), the published per-layer ACR as
  ``acr_reported`` (training-mode soft routing: it is not the ACR of the executed windows), ``acr``
  and ``acr_causal`` recomputed from the executed windows, and per-layer ``branch`` fractions, at step 0.

Every input is parsed and checked before anything is written; an existing run directory is never
replaced unless ``overwrite=True``.
"""

from __future__ import annotations

import os
from pathlib import Path

from aah_viz.errors import InputFormatError
from aah_viz.importers.reference_csv import parse_sources, regime_slug
from aah_viz.importers.reference_paper import paper_run_id, write_paper_run
from aah_viz.importers.reference_qwen import QWEN_SEQ_LEN, qwen_run_id, write_qwen_run
from aah_viz.importers.run_target import import_target
from aah_viz.regimes import paper_rank


def import_reference(
    src_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    training_step: int | None = None,
    qwen_seq_len: int = QWEN_SEQ_LEN,
) -> list[Path]:
    """Import every recognised CSV of ``src_dir`` into run directories under ``out_dir``.

    Returns the run directories written (paper methods first, then Qwen3-4B heatmaps).
    ``training_step``: the step of the Table 1 rows (default: the method's Table 2 checkpoint step).
    """
    src = Path(src_dir)
    if not src.is_dir():
        raise InputFormatError(f"{src} is not a folder; give the folder holding the reference's paper CSV files")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputFormatError(f"--out {out} exists and is not a folder; give a folder to write the runs into")
    methods, heatmaps = parse_sources(src)
    # check every target before writing anything
    targets = []
    for entry in methods.values():
        targets.append(paper_run_id(entry))
    for _path_csv, rows in heatmaps:
        targets.append(qwen_run_id(regime_slug(rows[0]["regime"]) if rows else "empty"))
    dupes = sorted({t for t in targets if targets.count(t) > 1})
    if dupes:
        raise InputFormatError(f"{src}: several inputs map to the same run {dupes}; import them into separate folders")
    out.mkdir(parents=True, exist_ok=True)
    for rid in targets:
        import_target(out, rid, overwrite)
    written = []
    for entry in sorted(methods.values(), key=lambda e: paper_rank(e.regime)):
        written.append(write_paper_run(entry, out, overwrite, training_step))
    for path_csv, rows in heatmaps:
        written.append(write_qwen_run(path_csv, rows, out, overwrite, qwen_seq_len))
    return written
