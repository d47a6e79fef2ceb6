"""An interrupted ``aah-viz lens`` (issue 39: "interruptible like probe"): a SIGINT between documents
keeps the finished ones in the run's ``.lens-progress`` and exits 130 in one line; the same command
continues from the next document and writes the tables an uninterrupted lens writes; a lens with
other settings is refused in one line until ``--restart``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from interrupting import interrupt_after_progress  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402

pytestmark = pytest.mark.torch
TABLES = ("lens_tokens", "lens_links", "attention_samples")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two copies of one briefly trained run, and a text of many short paragraphs."""
    root = tmp_path_factory.mktemp("lens-interrupt")
    args = ["train", "--out", str(root / "a"), "--preset", "tiny", "--steps", "4", "--n-docs", "20"]
    assert main([*args, "--threads", "1", "--no-progress", "--set", "warmup_steps=1"]) == 0
    shutil.copytree(root / "a", root / "b")
    paragraphs = (f"Paragraph {k}: the committee met {k * 7} times and agreed to publish it." for k in range(60))
    (root / "t.txt").write_text("\n\n".join(paragraphs))
    return root


def _lens_args(run: Path, text: Path, *extra: str) -> list[str]:
    return ["lens", str(run), "--text", str(text), "--docs", "60", "--max-tokens", "32", "--threads", "1", *extra]


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("doc", "layer", "head", "query", "position", "key") if c in frame.columns]
    return frame.sort_values(keys).reset_index(drop=True)


def test_an_interrupted_lens_keeps_its_documents_and_the_same_command_continues_it(runs, capsys):
    a, b, text = runs / "a", runs / "b", runs / "t.txt"
    code, err = interrupt_after_progress(
        [sys.executable, "-m", "aah_viz", *_lens_args(a, text)], "the lens", "document"
    )
    assert code == 130, err[-1000:]
    said = err.replace("\r", "\n").strip().splitlines()[-1]
    assert said.startswith("aah-viz: lens stopped by SIGINT after ") and "run the same command again" in said
    meta = json.loads((a / ".lens-progress" / "meta.json").read_text())
    assert 0 < meta["done"] < meta["total"] == 60
    saved = pd.read_parquet(a / ".lens-progress" / "lens_tokens.parquet")
    assert sorted(set(saved["doc"])) == list(range(meta["done"]))  # whole documents, none begun
    assert "attention_samples" not in load_run(a).tables()  # nothing half-written into the run
    assert validate_run(a) == []  # the saved progress is no damage to the run

    # a lens with other settings is refused in one line, naming both ways on
    assert main(_lens_args(a, text, "--top-k", "3", "--no-progress")) == 2
    refusal = capsys.readouterr().err.strip().splitlines()
    assert len(refusal) == 1 and "interrupted lens of other" in refusal[0] and "--restart" in refusal[0]

    # the same command continues and writes what an uninterrupted lens writes
    assert main(_lens_args(a, text, "--no-progress")) == 0
    assert not (a / ".lens-progress").exists()
    assert main(_lens_args(b, text, "--no-progress")) == 0
    capsys.readouterr()
    for table in TABLES:
        got, want = _sorted(load_run(a).table(table)), _sorted(load_run(b).table(table))
        assert len(want) > 0 or table == "lens_links"
        pd.testing.assert_frame_equal(got, want)
    events = [json.loads(d)["docs"] for d in load_run(a).events("lens")["detail"]]
    assert events == [60]


def test_restart_discards_an_interrupted_lens(runs, tmp_path, capsys):
    run, text = tmp_path / "run", runs / "t.txt"
    shutil.copytree(runs / "b", run)
    code, _ = interrupt_after_progress(
        [sys.executable, "-m", "aah_viz", *_lens_args(run, text)], "the lens", "document"
    )
    assert code == 130 and (run / ".lens-progress").is_dir()
    assert main(_lens_args(run, text, "--docs", "2", "--restart", "--no-progress")) == 0
    capsys.readouterr()
    assert not (run / ".lens-progress").exists()
    assert sorted(set(load_run(run).table("lens_tokens")["doc"])) == [0, 1]
