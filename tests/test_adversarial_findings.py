"""What scripts/adversarial_pass.py found, each fixed and kept fixed here: a one-line refusal (``aah-viz:
error: ...``, exit 2, naming the option or file) where there was a traceback, a hang or a message that named
something else."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil

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


# ---------------------------------------------------------------------------------- a run's entries
@pytest.fixture
def synthetic_run(tmp_path):
    from aah_viz.samples import make_synthetic_run

    return make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=6, flush_every=3)


@pytest.mark.parametrize(
    "entry, make",
    [
        ("checkpoints", "file"),
        (".probe-progress", "file"),
        (".lens-progress", "file"),
        ("tensorboard", "fifo"),
        ("summary.json", "fifo"),
        ("summary.json", "folder"),
    ],
)
def test_something_else_at_a_declared_entrys_name_is_damage_and_writers_refuse(synthetic_run, entry, make):
    """Before: a FIFO named summary.json, or a file named .probe-progress, passed validate; train --resume over
    a file named checkpoints appended steps to the run and then failed with "File exists"."""
    from aah_viz.errors import UnsafePathError
    from aah_viz.runlog import RunWriter, paths, validate_run

    path = synthetic_run / entry
    path.unlink(missing_ok=True)
    {"file": lambda: path.write_text("x"), "fifo": lambda: os.mkfifo(path), "folder": path.mkdir}[make]()
    kind = paths.RUN_ENTRIES[entry]
    said = [p for p in validate_run(synthetic_run) if entry in p and f"is not a {kind}" in p]
    assert len(said) == 1, validate_run(synthetic_run)
    with pytest.raises(UnsafePathError, match=f"is not a {kind}"):
        RunWriter.resume(synthetic_run)
    with pytest.raises(UnsafePathError, match=f"is not a {kind}"):
        paths.run_entry(synthetic_run, entry)


def test_train_resume_over_a_file_named_checkpoints_is_one_line_and_the_run_is_unchanged(tmp_path, capsys):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), "--preset", "tiny", "--steps", "2", "--n-docs", "20", "--no-progress"]
    assert main([*argv, "--threads", "1"]) == 0
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    (run / "checkpoints").write_text("not a folder")
    before = sorted(p.name for p in (run / "heads").iterdir())
    said = refused(["train", "--out", str(run), "--resume", "--steps", "4", "--no-progress", "--threads", "1"], capsys)
    assert "checkpoints" in said and "is not a folder" in said, said
    assert sorted(p.name for p in (run / "heads").iterdir()) == before


def test_a_table_name_that_is_a_link_to_itself_is_one_line_not_a_traceback(synthetic_run, capsys):
    """Before: validate and compact ended in RuntimeError: Symlink loop (Path.resolve)."""
    shutil.rmtree(synthetic_run / "heads")
    (synthetic_run / "heads").symlink_to("heads")
    for argv in (["validate", str(synthetic_run)], ["compact", str(synthetic_run)]):
        said = refused(argv, capsys)
        assert "heads" in said, said


@pytest.mark.parametrize("command", ["sweep", "effects"])
def test_a_design_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, command, capsys):
    """Before: ``sweep FIFO`` and ``effects LOGS --design FIFO`` waited for a writer forever."""
    fifo = tmp_path / "design.toml"
    os.mkfifo(fifo)
    argv = {
        "sweep": ["sweep", str(fifo), "--logs", str(tmp_path / "logs")],
        "effects": ["effects", str(tmp_path), "--design", str(fifo)],
    }[command]
    said = refused(argv, capsys)
    assert str(fifo) in said and "not a regular file" in said, said


def test_imports_into_the_same_out_at_once_leave_one_import_and_one_line_each(tmp_path):
    """Three ``import-reference --out OUT`` at once: one writes every run, each other says in one line that a
    run is there (no traceback, no half-written run)."""
    import subprocess
    import sys

    from aah_viz.runlog import validate_run

    out = tmp_path / "ref"
    argv = [sys.executable, "-m", "aah_viz", "import-reference", "--out", str(out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    done = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert all(code in (0, 2) for code, _ in done) and any(code == 0 for code, _ in done), done
    for code, err in done:
        assert "Traceback" not in err and (code == 0 or len([x for x in err.splitlines() if "error:" in x]) == 1), err
    runs = sorted(p for p in out.iterdir() if not p.name.startswith("."))
    assert main(["import-reference", "--out", str(tmp_path / "alone")]) == 0  # the same import, by itself
    assert [r.name for r in runs] == sorted(p.name for p in (tmp_path / "alone").iterdir())
    assert all(validate_run(r) == [] for r in runs), [validate_run(r) for r in runs]
