"""``aah-viz conformance FILE.json``: check our clustering and hierarchy against reference cases."""

from __future__ import annotations

import argparse

from aah_viz.cli._json import json_text


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="run a conformance case file through our clustering and hierarchy routines",
        description="Run every case of a conformance file (the format in docs/internals.md) "
        "through our clustering and hierarchy routines and "
        'print JSON {"cases", "exact", "tie", "different", "same_partition", "failures"}. A case is a tie '
        "when it is not exact but our closest decision was within float rounding (1e-5) of going the "
        "other way: the machine that made the file may have rounded it the other way, so its order is "
        "no requirement elsewhere. Exit 0 when no case is different (with --strict: when every case "
        "is exact), 1 otherwise, 2 when the file cannot be read.",
    )
    parser.add_argument("file", metavar="FILE.json", help="conformance case file (JSON with a 'cases' list)")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="bit for bit: a tie fails too (for the machine that made the file, where every case must be exact)",
    )
    parser.add_argument("--indent", type=int, default=None, help="indent the JSON output by this many spaces")
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar on stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aah_viz.torch_import import require_torch

    require_torch()
    from instrumentation import check_conformance_file, conformance_passed

    report = check_conformance_file(args.file, progress=not args.no_progress)
    print(json_text(report, indent=args.indent))
    return 0 if conformance_passed(report, strict=args.strict) else 1
