"""``aah-viz export RUN... --table NAME --format FMT --out DIR``: paper tables from run directories;
``aah-viz export tensorboard RUN... --out DIR``: runs as TensorBoard event files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aah_viz.cli._options import add_runs_argument

TABLE_CHOICES = (
    "training",
    "inference",
    "windows",
    "stability",
    "probes",
    "head_similarity",
    "head_similarity_summary",
    "frontier",
    "all",
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export paper tables (CSV, Markdown, LaTeX booktabs) with seed statistics",
        description="Write tables built from run directories into --out: training (the paper's Table 1 layout), "
        "inference (Table 2), windows (bucket fractions per layer, Figure 4 as a table), stability, probes, "
        "head_similarity (written by aah-viz head-similarity), frontier (perplexity against ACR, written by "
        "aah-viz frontier; with 'all', these two only where the runs hold them). "
        "With --by regime, the seeds of each setup of a regime are summarised (mean, std, n, 95% bootstrap "
        "interval); with --baseline, regimes are compared with it (Welch's t-test and a permutation test on the final "
        "validation loss, and the per-step paired difference curve). Runs with different candidate windows or "
        "sequence lengths are refused unless --allow-mixed splits the table by configuration. See docs/export.md. "
        "'aah-viz export tensorboard RUN... --out DIR' (no --table) writes the runs as TensorBoard event files "
        "instead, one folder a run, to overlay them in TensorBoard (docs/reporting.md).",
    )
    add_runs_argument(parser)
    parser.add_argument(
        "--table", choices=TABLE_CHOICES, help="which table to write ('all': every table); required but for tensorboard"
    )
    parser.add_argument(
        "--format",
        default="csv",
        choices=("csv", "md", "latex"),
        dest="fmt",
        help="csv (full precision), md (Markdown) or latex (booktabs table with caption and label)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write into (created if missing)")
    parser.add_argument(
        "--by",
        default="run",
        choices=("run", "regime"),
        help="one row per run, or per setup over seeds (a regime; runs with other settings or training "
        "lengths are rows of their own, named by what differs)",
    )
    parser.add_argument(
        "--form",
        default="summary",
        choices=("summary", "long"),
        help="LaTeX of the training table with --by regime: summary (fits one page: spreads of val. loss and "
        "ACR, window shares in one column, the tests against --baseline in one note) or long (every column "
        "with its spread); of head_similarity: summary (counts over the layers, one page) or long (every layer)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REGIME",
        help="compare every regime with this one: significance tests and the paired difference curve",
    )
    parser.add_argument(
        "--layout",
        default="toolkit",
        choices=("toolkit", "paper"),
        help="column names: this toolkit's, or the reference CSVs' (training and inference tables)",
    )
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="split the table by (sequence length, candidate windows) instead of refusing mixed runs",
    )
    parser.add_argument(
        "--windows-source",
        default="final",
        choices=("final", "inference"),
        help="windows table: per layer at the final step, or model-wide from the inference "
        "records (the paper's Figure 4)",
    )
    parser.add_argument(
        "--factorial",
        action="store_true",
        help="also write the factorial view: the effect of each factor where the runs cover it",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap and permutation resampling (default 0)"
    )
    parser.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    tb = parser.add_argument_group("aah-viz export tensorboard RUN... --out DIR")
    tb.add_argument("--layers", action="store_true", help="also each layer's mean window (aah/mean_window/layerNN)")
    tb.add_argument("--overwrite", action="store_true", help="replace a run's folder exported before")
    tb.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run_tensorboard(args: argparse.Namespace) -> int:
    from aah_viz.reporting.tensorboard_export import export_tensorboard

    written = export_tensorboard(
        args.runs[1:], args.out, overwrite=args.overwrite, per_layer=args.layers, progress=not args.no_progress
    )
    for path in written:
        print(path)
    return 0


def _write(out_dir: Path, stem: str, text: str, fmt: str) -> Path:
    from aah_viz.export.formats import EXTENSIONS
    from aah_viz.runlog.paths import atomic_write_bytes

    path = out_dir / f"{stem}.{EXTENSIONS[fmt]}"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def run(args: argparse.Namespace) -> int:
    from aah_viz.errors import AAHVizError
    from aah_viz.export.comparisons import comparison_table, difference_curves_table, factorial_table
    from aah_viz.export.formats import render
    from aah_viz.export.kinds import PROBE_PARTS, TABLE_KINDS
    from aah_viz.export.runs import check_same_config, collect_runs, config_label, split_by_config
    from aah_viz.export.tables import build_tables
    from aah_viz.regimes import did_you_mean

    if args.table is None and args.runs[0] == "tensorboard":
        if len(args.runs) < 2:
            raise AAHVizError("aah-viz export tensorboard needs at least one RUN")
        return run_tensorboard(args)
    if args.table is None:
        raise AAHVizError("--table is required (or: aah-viz export tensorboard RUN... --out DIR)")
    if args.n_boot < 100:
        raise AAHVizError(f"--n-boot must be at least 100 for a 95% interval, got {args.n_boot}")
    runs = collect_runs(args.runs)
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise AAHVizError(f"--out {out_dir} exists and is not a folder")
    names = [n for n in TABLE_CHOICES if n != "all"] if args.table == "all" else [args.table]
    own_table_kinds = {n for n, k in TABLE_KINDS.items() if k.own_table is not None}
    rendered: dict[str, str] = {}  # file stem -> text: every table is built before any is written
    if all(n in own_table_kinds for n in names):  # each run makes its own rows (a frontier): nothing to mix
        groups = {None: runs}
    else:
        groups = split_by_config(runs) if args.allow_mixed else {check_same_config(runs): runs}
    multi = len(groups) > 1
    if args.baseline and not any(str(r.regime) == args.baseline for r in runs):
        present = ", ".join(sorted({str(r.regime) for r in runs}))
        hint = did_you_mean(args.baseline, sorted({str(r.regime) for r in runs}))
        raise AAHVizError(f"--baseline {args.baseline!r} matches no run{hint}; regimes present: {present}")
    for cfg, members in groups.items():
        suffix = f"_{config_label(cfg)}" if multi else ""
        baseline = args.baseline if any(str(r.regime) == args.baseline for r in members) else None
        if args.baseline and baseline is None:
            print(
                f"aah-viz: note: configuration {config_label(cfg)} has no {args.baseline} run; "
                "no comparisons written for it",
                file=sys.stderr,
            )
        opts = dict(by=args.by, seed=args.seed, n_boot=args.n_boot, baseline=baseline, form=args.form)
        for name in names:
            layout = args.layout if name in ("training", "inference") else "toolkit"
            parts = PROBE_PARTS if name == "probes" else (None,)
            for part in parts:
                extra = {"part": part} if part else {}
                if name == "windows":
                    extra["source"] = args.windows_source
                table = build_tables(name, members, allow_mixed=True, layout=layout, **extra, **opts)[0]
                if args.table == "all" and table.is_empty and name in own_table_kinds:
                    continue  # a table these runs were never measured for, not an empty result
                stem = f"probes_{part}" if part else name
                rendered[stem + suffix] = render(table, args.fmt)

        def labelled(table):  # one label per table, also across configurations
            if multi:
                table.label = f"{table.label}:{config_label(cfg).lower()}"
            return table

        if baseline:
            rendered[f"comparison{suffix}"] = render(
                labelled(comparison_table(members, baseline, seed=args.seed)), args.fmt
            )
            curves = labelled(difference_curves_table(members, baseline, seed=args.seed))
            rendered[f"differences{suffix}"] = render(curves, args.fmt)
        if args.factorial:
            rendered[f"factorial{suffix}"] = render(labelled(factorial_table(members, seed=args.seed)), args.fmt)
    # only now, with every table built, is anything written: a refusal leaves no half-written folder
    out_dir.mkdir(parents=True, exist_ok=True)
    for stem, text in rendered.items():
        print(_write(out_dir, stem, text, args.fmt))
    return 0
