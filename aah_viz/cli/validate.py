"""``aah-viz validate RUN...``: check run directories; exit 0 when all are valid, 2 otherwise."""

from __future__ import annotations

import argparse
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_runs_argument
from aah_viz.errors import RunLogError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check run directories against the log format (exit 0 valid, 2 invalid)",
        description="Check run directories against docs/log-format.md: manifest, every segment, column types, "
        "duplicated keys, value ranges and ACR consistency. Prints one problem per line; exits 0 when every "
        "run is valid and 2 otherwise. A folder that is not a run but holds runs is checked run by run.",
    )
    add_runs_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)


def _expand(paths: list[str]) -> list[Path]:
    from aah_viz.runlog import discover_runs
    from aah_viz.runlog.paths import holds_manifest

    out = []
    for text in paths:
        path = Path(text)
        if path.is_dir() and not holds_manifest(path):
            found = discover_runs(path)
            if not found:
                raise RunLogError(f"{path} is neither a run directory (no manifest.json) nor a folder holding runs")
            out.extend(found)
        else:
            out.append(path)
    return out


def run(args: argparse.Namespace) -> int:
    from aah_viz.runlog import validate_run

    results = [(path, validate_run(path)) for path in _expand(args.runs)]
    valid = all(not problems for _, problems in results)
    if args.json:
        print(
            json_text(
                {
                    "valid": valid,
                    "runs": [{"path": str(p), "valid": not probs, "problems": probs} for p, probs in results],
                },
                indent=2,
            )
        )
    else:
        for path, problems in results:
            if problems:
                for problem in problems:
                    print(f"{path}: {problem}")
            else:
                print(f"{path}: valid")
    return 0 if valid else 2
