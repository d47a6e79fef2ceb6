"""A long ``aah-viz probe``: progress, a stop by SIGINT that keeps what it finished, a second run that
continues it (or refuses another probe in one line), the same tables as an uninterrupted probe, and
``--threads`` for every pool the probe runs on."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from interrupting import interrupt_after_progress  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two copies of one briefly trained run, and a syntax file of several thousand sentence inputs."""
    root = tmp_path_factory.mktemp("interrupt")
    torch.set_num_threads(1)
    args = ["train", "--out", str(root / "a"), "--preset", "tiny", "--steps", "4", "--n-docs", "20"]
    assert main([*args, "--threads", "1", "--no-progress", "--set", "warmup_steps=1"]) == 0
    shutil.copytree(root / "a", root / "b")
    bundled = (Path(str(resources.files("aah_viz") / "data")) / "synthetic_probe.conllu").read_text()
    big = root / "big.conllu"
    big.write_text("".join(bundled.replace("syn-987654-", f"copy{k}-") for k in range(2)))  # unique ids
    return root


def _probe_args(run: Path, big: Path, *extra: str) -> list[str]:
    return ["probe", str(run), "--syntax", str(big), "--threads", "1", "--batch-size", "1", "--min-count", "10", *extra]


def test_an_interrupted_probe_keeps_what_it_finished_and_a_second_run_continues_it(runs, capsys):
    a, b, big = runs / "a", runs / "b", runs / "big.conllu"
    code, err = interrupt_after_progress([sys.executable, "-m", "aah_viz", *_probe_args(a, big)], "the probe", "input")
    assert code == 130, err[-1000:]
    said = err.strip().splitlines()[-1]
    assert said.startswith("aah-viz: probe stopped by SIGINT after ") and "run the same command again" in said
    meta = json.loads((a / ".probe-progress" / "meta.json").read_text())
    assert 0 < meta["done"] < meta["total"]
    assert "probe_relations" not in load_run(a).tables()  # nothing half-written into the run
    assert validate_run(a) == []  # the saved progress is no damage to the run

    # another probe of the same run is refused in one line, naming both ways on
    assert main(_probe_args(a, big, "--context", "document", "--no-progress")) == 2
    refusal = capsys.readouterr().err.strip().splitlines()
    assert len(refusal) == 1 and "interrupted probe of other inputs" in refusal[0] and "--restart" in refusal[0]

    # the same command continues where it stopped and writes the tables an uninterrupted probe writes
    assert main(_probe_args(a, big, "--no-progress", "--json")) == 0
    capsys.readouterr()
    assert not (a / ".probe-progress").exists()
    assert main(_probe_args(b, big, "--no-progress", "--json")) == 0
    for table in ("probe_heads", "probe_relations"):
        got, want = load_run(a).table(table), load_run(b).table(table)
        keys = [c for c in got.columns if got[c].dtype == object or c in ("layer", "head")]
        got = got.sort_values(keys).reset_index(drop=True)
        want = want.sort_values(keys).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9)


def test_restart_discards_an_interrupted_probe(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs / "a", run, ignore=shutil.ignore_patterns(".probe-progress"))
    big = runs / "big.conllu"
    code, _ = interrupt_after_progress([sys.executable, "-m", "aah_viz", *_probe_args(run, big)], "the probe", "input")
    assert code == 130 and (run / ".probe-progress").is_dir()
    # the run moved: the same probe of it continues (what it probes is the run, not the path it had)
    done = json.loads((run / ".probe-progress" / "meta.json").read_text())["done"]
    moved = tmp_path / "moved"
    run.rename(moved)
    code, err = interrupt_after_progress(
        [sys.executable, "-m", "aah_viz", *_probe_args(moved, big)], "the probe", "input"
    )
    assert code == 130 and "interrupted probe of other" not in err, err[-1000:]
    assert json.loads((moved / ".probe-progress" / "meta.json").read_text())["done"] > done
    moved.rename(run)
    assert main(_probe_args(run, big, "--max-docs", "2", "--restart", "--no-progress", "--json")) == 0
    assert not (run / ".probe-progress").exists()


def test_threads_are_honoured_by_every_pool(runs, capsys):
    run = runs / "b"
    assert (
        main(["probe", str(run), "--max-docs", "2", "--threads", "1", "--min-count", "10", "--no-progress", "--json"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["threads"] == {"torch": 1, "blas": 1}


def test_a_progress_entry_that_is_not_a_folder_or_not_a_file_is_refused_in_one_line(tmp_path):
    """A plain file named .probe-progress, or a FIFO named meta.json in it: refused at once, never read."""
    from aah_viz.errors import InputFormatError, UnsafePathError
    from aah_viz.probes.progress import FOLDER, META, ProbeProgress

    (tmp_path / FOLDER).write_text("not a folder")
    with pytest.raises(UnsafePathError, match="is not a folder"):  # the run-entry gate's refusal
        ProbeProgress(tmp_path, "digest")
    (tmp_path / FOLDER).unlink()
    (tmp_path / FOLDER).mkdir()
    os.mkfifo(tmp_path / FOLDER / META)
    with pytest.raises(InputFormatError, match="is not a plain file"):
        ProbeProgress(tmp_path, "digest").saved()
