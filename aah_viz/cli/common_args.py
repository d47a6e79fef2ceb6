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
