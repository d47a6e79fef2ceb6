"""``aah-viz effects``: main effects and two-way interactions of a sweep's design, with intervals over seeds."""

from __future__ import annotations

import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "effects",
        help="main effects and two-way interactions of a sweep (linear model, 95 percent intervals, Holm-corrected p)",
        description="Fit a linear model of the design (main effects and two-way interactions) to the final "
        "metrics of the finished runs aah-viz sweep wrote under LOGS, and print the effects with 95% intervals "
        "over seeds and Holm-corrected p-values, or the cells' means. See docs/ablations.md.",
    )
    p.add_argument("logs", help="the sweep's logs root (the folder holding CELL__seed-S run directories)")
    p.add_argument(
        "--design", default=None, help="the design file the sweep ran (default: the design LOGS/.sweep records)"
    )
    p.add_argument(
        "--metric",
        default=None,
        help="final metrics, comma-separated: val_loss, val_ppl, acr, acr_causal, flops_ratio_est, "
        "tokens_per_s, peak_mem_mb (default: val_loss); in a frontier sweep COLUMN@CONFIGURATION, a column "
        "(ppl, retrieval, acr, acr_causal, realised_work, speed_vs_unpatched) of one configuration's row of "
        "each run's frontier table, e.g. ppl@sliding_window_128",
    )
    p.add_argument(
        "--table",
        choices=("effects", "cells"),
        default="effects",
        help="effects (default) or cells (each cell's mean and std over seeds)",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        choices=("md", "csv", "latex"),
        default="md",
        help="md (Markdown, default), csv (full precision) or latex (booktabs)",
    )
    p.add_argument("--out", default=None, help="write the table to this file instead of printing it")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.errors import AAHVizError
    from aah_viz.export.design_effects import (
        cells_table,
        check_metrics,
        design_runs_frame,
        effects_table,
        metric_choices,
    )
    from aah_viz.export.formats import render
    from aah_viz.sweep.design import load_design
    from aah_viz.sweep.plan import recorded_design

    metrics = check_metrics(args.metric.split(",")) if args.metric else None
    if not Path(args.logs).is_dir():
        raise AAHVizError(f"{args.logs} is not a folder; give the logs root aah-viz sweep wrote")
    design = load_design(args.design) if args.design else recorded_design(Path(args.logs))
    if metrics is None:
        if design.command == "frontier":  # no default: which configuration is the question
            offered = ", ".join(metric_choices(args.logs, design)) or "none yet (no finished run)"
            raise AAHVizError(f"a frontier sweep needs --metric COLUMN@CONFIGURATION; its runs offer {offered}")
        metrics = ["val_loss"]
    frame, notes = design_runs_frame(args.logs, design, metrics)
    if frame.empty:
        raise AAHVizError(f"no finished run of the design {design.name} under {args.logs}; run aah-viz sweep first")
    absent = [m for m in metrics if frame[m].isna().all()]
    if absent:
        offered = ", ".join(metric_choices(args.logs, design))
        raise AAHVizError(f"the finished runs have no value of {', '.join(absent)}; they offer {offered}")
    build = effects_table if args.table == "effects" else cells_table
    text = render(build(frame, design, metrics, notes=notes), args.fmt)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
