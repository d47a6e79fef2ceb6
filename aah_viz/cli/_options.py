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
