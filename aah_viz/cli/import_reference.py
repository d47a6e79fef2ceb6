"""``aah-viz import-reference [DIR] --out RUNS_DIR``: the reference's published numbers as run directories.

Without DIR, the paper's numbers that ship with the package (``aah_viz/data/reference/paper/``)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "import-reference",
        help="import the reference's published tables and Qwen3-4B heatmaps as (imported) run directories",
        description="Read the reference's paper CSVs in DIR, by default the paper's published numbers that ship "
        "with aah-viz (Table 1 and 2, window-bucket fractions, the per-head-index resolution vector, the "
        "Qwen3-4B per-head heatmaps; recognised by their header) and write one run "
        "directory per method/regime into --out, marked imported (manifest status 'imported', imported: true, "
        "source files). Exporting the imported Table 1 with --layout paper reproduces the published cells exactly.",
    )
    parser.add_argument(
        "src",
        metavar="DIR",
        nargs="?",
        default=None,
        help="folder holding the reference's paper CSV files (default: the paper's numbers bundled with aah-viz)",
    )
    parser.add_argument("--out", required=True, metavar="RUNS_DIR", help="folder to write the run directories into")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace run directories of an earlier import (never a run that was not imported)",
    )
    parser.add_argument(
        "--training-step",
        type=int,
        default=None,
        help="training step of the Table 1 rows (default: the method's Table 2 checkpoint step)",
    )
    parser.add_argument(
        "--qwen-seq-len",
        type=int,
        default=1024,
        help="sequence length of the Qwen3-4B heatmaps (default 1024, the reference's adaptation length)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aah_viz import bundled
    from aah_viz.importers.reference import import_reference

    for path in import_reference(
        args.src if args.src is not None else bundled.reference_paper_dir(),
        args.out,
        overwrite=args.overwrite,
        training_step=args.training_step,
        qwen_seq_len=args.qwen_seq_len,
    ):
        print(path)
    return 0
