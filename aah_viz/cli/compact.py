"""``aah-viz compact RUN...``: merge each table's segments into a few files (rows unchanged)."""

from __future__ import annotations

import argparse

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options, add_runs_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compact",
        help="merge each table's many small segments into a few files (same rows, faster reads)",
        description="Rewrite every table of each run as a few large Parquet files holding the same rows in the "
        "same order. Safe while others read the run (a reader sees the old segments or the new ones, never both) "
        "and after a crash at any point (run it again to finish). Refused while a process writes the run, and for "
        "a run aah-viz validate finds damaged unless --force (then unreadable segments are left as they are). "
        "See docs/log-format.md.",
    )
    add_runs_argument(parser, help="run directory to compact")
    parser.add_argument(
        "--min-segments",
        type=int,
        default=2,
        metavar="N",
        help="compact only tables with at least N segments (default 2)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="compact a run that aah-viz validate finds damaged (refused by default: merged into one file, "
        "duplicated rows or a lost segment's gap could no longer be told apart)",
    )
    add_output_options(parser, "print one JSON object instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.runlog.compact import compact_run

    if args.min_segments < 2:
        raise ConfigError(f"--min-segments must be an integer >= 2, got {args.min_segments}")
    results = {}
    for path in args.runs:
        results[path] = compact_run(
            path, min_segments=args.min_segments, progress=not args.no_progress, force=args.force
        )
    if args.json:
        print(json_text(results, indent=2))
        return 0
    for path, report in results.items():
        if not report:
            print(f"{path}: nothing to compact")
        for table, r in report.items():
            left = f" ({len(r['left'])} unreadable segments left as they are)" if r["left"] else ""
            print(f"{path}: {table}: {r['before']} segments -> {r['after']} files, {r['rows']:,} rows{left}")
    return 0
