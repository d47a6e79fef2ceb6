"""The ``aah-viz`` command: a thin layer over the library's functions.

Each subcommand lives in its own module of this package and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (called with the parsed namespace, returns an exit code).
Benchmarks are ``aah-viz bench NAME`` and live in ``bench_NAME`` modules exposing the same.
Subcommands import what they run inside ``func``: ``aah-viz --help`` starts fast and works without
torch. These imports only defer loading; ``tests/test_layers.py`` counts them like any other. A
missing optional extra (torch, transformers, ...) is one line saying how to install it, while a
module of the project that cannot be imported is an error with its traceback, never a command
that quietly goes missing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from aah_viz._version import __version__
from aah_viz.cli._options import count_options
from aah_viz.errors import AAHVizError
from aah_viz.torch_import import missing_extra

COMMANDS = [
    "regimes",
    "conformance",
    "train",
    "evaluate",
    "retrofit",
    "profile",
    "lens",
    "head_similarity",
    "validate",
    "compact",
    "probe",
    "compare",
    "dashboard",
    "export",
    "figure",
    "import_reference",
    "import_gguf",
    "frontier",
    "sweep",
    "effects",
]
BENCHES = ["routing", "attention", "step", "hooks", "dashboard", "compact", "retrofit", "generate", "probe"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aah-viz",
        description="Routing diagnostics for Transformers with Asymmetric Attention Heads (AAH-v3): "
        "train and record, explore in a dashboard, export tables and figures.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:  # a module that fails to import fails the command line: no command goes missing
        importlib.import_module(f"aah_viz.cli.{name}").register(sub)
    bench = sub.add_parser(
        "bench",
        help="benchmarks that print ratios as JSON (side by side, interleaved, medians)",
        description="Benchmarks. Each compares variants side by side in one process and prints JSON.",
    )
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    for name in BENCHES:
        importlib.import_module(f"aah_viz.cli.bench_{name}").register(bench_sub)
    for bench_parser in bench_sub.choices.values():
        count_options(bench_parser)
    bench.set_defaults(func=lambda args: (bench.print_help(), 2)[1])
    return parser


def _os_error_reason(err: OSError) -> str:
    """The system's reason, or what it means when the path is a link to nothing (the system says "File
    exists" when a folder is made there: the link is followed by nothing but refuses the name)."""
    reason = err.strerror or type(err).__name__
    if isinstance(err, FileExistsError) and err.filename is not None:
        path = Path(os.fsdecode(err.filename))
        if path.is_symlink() and not path.exists():
            target = os.readlink(path)
            reason = f"a symbolic link to {target}, which does not exist: create that folder, or give another path"
    return reason


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except AAHVizError as err:
        print(f"aah-viz: error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        missing = missing_extra(err)
        if missing is None:
            raise  # a module of this project went missing: a bug, with its traceback
        print(f"aah-viz: error: {missing}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.filename is None and not isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise  # not a file the user named: a bug, with its traceback
        where = str(err.filename) if err.filename is not None else ""
        shown = where[:200] + ("..." if len(where) > 200 else "")
        print(f"aah-viz: error: {shown}: {_os_error_reason(err)}", file=sys.stderr)
        return 2
    except RecursionError:
        print("aah-viz: error: an input is nested too deeply to be read (a crafted JSON file?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aah-viz: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
