"""Options many subcommands share, written once: the same flag, type, default and help text wherever
one appears (the subcommand says only what differs, such as what its JSON holds)."""

from __future__ import annotations


def add_output_options(p, json_help: str, progress_help: str = "no progress bar") -> None:
    """``--no-progress`` and ``--json`` (``json_help``: what the JSON holds)."""
    p.add_argument("--no-progress", action="store_true", help=progress_help)
    p.add_argument("--json", action="store_true", help=json_help)


def add_torch_options(p) -> None:
    """``--device`` and ``--threads`` of a subcommand that runs a model."""
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


RUNS_HELP = "a run directory, or a folder holding run directories"


def add_runs_argument(p, nargs: str = "+", help: str = RUNS_HELP) -> None:
    """The ``RUN`` positionals of a subcommand that reads runs."""
    p.add_argument("runs", nargs=nargs, metavar="RUN", help=help)


def add_source_argument(p) -> None:
    """The ``source`` positional of a subcommand that runs a run's model or a Hugging Face model."""
    p.add_argument("source", help="a run directory (checkpoints or adapters) or a Hugging Face model folder")


# The sizes and counts of a benchmark (what it builds and how often it repeats): each a whole number from 1.
BENCH_COUNTS = {"seq_len", "heads", "head_dim", "batch", "batch_size", "steps", "flush_every", "repeats", "runs"}
BENCH_COUNTS |= {"segments", "layers", "kv_heads", "prompt_len", "new_tokens", "max_docs", "bootstrap"}
BENCH_COUNTS |= {"feature_token_stride"}
LARGEST_COUNT = 10**9


def positive_count(text: str) -> int:
    """An argparse type: a whole number from 1 to 10^9 (argparse names the option in its one-line error)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a whole number from 1, got {text[:40]!r}") from None
    if not 1 <= value <= LARGEST_COUNT:
        raise argparse.ArgumentTypeError(f"expects a whole number from 1 to {LARGEST_COUNT:,}, got {value}")
    return value


def count_options(parser) -> None:
    """Give every integer option of ``parser`` named in ``BENCH_COUNTS`` the type :func:`positive_count`, so that
    a new benchmark's sizes are checked without code of its own (0 or -1 used to end in a traceback)."""
    for action in parser._actions:
        if action.type is int and action.dest in BENCH_COUNTS:
            action.type = positive_count
