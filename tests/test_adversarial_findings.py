"""What scripts/adversarial_pass.py found, each fixed and kept fixed here: a one-line refusal (``aah-viz:
error: ...``, exit 2, naming the option or file) where there was a traceback, a hang or a message that named
something else."""

from __future__ import annotations

import argparse
import contextlib
import io
import os

import pytest

from aah_viz.cli import build_parser, main
from aah_viz.cli._options import BENCH_COUNTS

# integer options of the benches where 0 means something (torch's own thread count, no sink, no reporting)
# or that have a check of their own (--pairs: paired_timing.check_pairs)
ZERO_MEANS_SOMETHING = {"threads", "seed", "skip", "report_every", "sink_tokens", "pairs"}


def benches():
    parser = build_parser()
    bench = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["bench"]
    return next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction)).choices


def refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as stop:
        rc = stop.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err[-500:])
    return lines[0]


def test_every_integer_option_of_every_bench_is_a_checked_count_or_declared_otherwise():
    """A new bench's size option is checked by construction; one where 0 means something is named here."""
    for name, sub in benches().items():
        for action in sub._actions:
            if action.dest in BENCH_COUNTS:
                assert action.type is not int, (name, action.dest)
            elif action.type is int:
                assert action.dest in ZERO_MEANS_SOMETHING, f"bench {name} {action.option_strings}: a count or not?"


@pytest.mark.parametrize("value", ["0", "-1", "99999999999"])
def test_a_bench_size_out_of_range_is_one_line_naming_the_option(value, capsys):
    """Before: bench attention --seq-len 0 ZeroDivisionError, bench step --batch 0 RuntimeError, bench dashboard
    --steps 0 IndexError, bench hooks --steps 0 StatisticsError (each a traceback after minutes of work)."""
    checked = 0
    for name, sub in benches().items():
        for action in sub._actions:
            if action.dest in BENCH_COUNTS and action.type is not None:  # routing's --heads is a list: below
                said = refused(["bench", name, action.option_strings[0], value], capsys)
                assert action.option_strings[0] in said and value in said, said
                checked += 1
    assert checked >= 30


def test_bench_arguments_checked_after_parsing_are_one_line(capsys):
    pytest.importorskip("torch")
    assert "--skip" in refused(["bench", "hooks", "--steps", "3", "--skip", "3"], capsys)  # no step left to time
    assert "--heads" in refused(["bench", "routing", "--heads", "0"], capsys)  # said config key 'n_head' before
    assert "--windows" in refused(["bench", "retrofit", "--windows", "0"], capsys)  # said 'block_size' before


def test_conformance_of_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    """Before: ``aah-viz conformance FIFO`` waited for a writer forever."""
    pytest.importorskip("torch")
    fifo = tmp_path / "cases.json"
    os.mkfifo(fifo)
    said = refused(["conformance", str(fifo)], capsys)
    assert str(fifo) in said and "not a regular file" in said, said
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with contextlib.redirect_stdout(io.StringIO()):
        said = refused(["conformance", str(deep)], capsys)
    assert str(deep) in said and "nest" in said, said
