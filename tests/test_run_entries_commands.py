"""The run-entry gate, command by command, for the commands that write into a run beside train and retrofit
(tests/test_run_entries.py): ``profile RUN --out RUN``, ``head-similarity RUN`` and ``export tensorboard RUN
--out DIR``. Each target entry in turn is a symbolic link out of the run (or out of DIR) to a folder holding a
decoy: the command refuses in one line (``aah-viz: error: ...``, exit 2) and nothing outside changes.

An OUT that is itself a symbolic link is the user's own choice of folder (a ``runs -> /big/disk/runs`` link is
ordinary): a link to a folder is followed, a dangling one or one to a file is refused in one line.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from test_run_entries import decoy, snapshot

from aah_viz.cli import main
from aah_viz.runlog import load_run

torch = pytest.importorskip("torch")

PROFILE = ["--seq-len", "16", "--batches", "1", "--threads", "1", "--no-progress"]
EVALUATE = ["--seq-len", "16", "--batches", "1", "--threads", "1", "--no-progress"]
HEAD_SIMILARITY = ["--blocks", "2", "--no-probes", "--null-samples", "5", "--refit-samples", "2"]
HEAD_SIMILARITY += ["--agreement-samples", "9", "--threads", "1", "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    argv = ["train", "--out", str(out), "--preset", "tiny", "--steps", "2", "--n-docs", "20", "--no-progress"]
    assert main([*argv, "--threads", "1", "--checkpoint-interval", "2"]) == 0
    return out


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    return path


def one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("aah-viz: error: "), (argv, rc, err)
    return err


def linked_copy(trained: Path, tmp_path: Path, entry: str) -> tuple[Path, Path]:
    """A copy of the trained run whose ``entry`` is a link to an outside folder holding a decoy."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    if (run / entry).exists():
        shutil.rmtree(run / entry)
    (run / entry).symlink_to(decoy(tmp_path / "outside", entry), target_is_directory=True)
    return run, tmp_path / "outside"


@pytest.mark.parametrize("entry", ["checkpoints", "head_spans", "events"])
def test_profile_into_a_run_with_a_linked_entry_is_one_line(trained, tmp_path, text, entry, capsys):
    run, outside = linked_copy(trained, tmp_path, entry)
    before = snapshot(outside)
    err = one_line(capsys, ["profile", str(run), "--data", str(text), "--out", str(run), *PROFILE])
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before


@pytest.mark.parametrize("entry", ["checkpoints", "head_similarity"])
def test_head_similarity_of_a_run_with_a_linked_entry_is_one_line(trained, tmp_path, entry, capsys):
    run, outside = linked_copy(trained, tmp_path, entry)
    before = snapshot(outside)
    err = one_line(capsys, ["head-similarity", str(run), *HEAD_SIMILARITY])
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before


@pytest.mark.parametrize("entry", ["checkpoints", "lens_tokens"])
def test_lens_of_a_run_with_a_linked_entry_is_one_line(trained, tmp_path, text, entry, capsys):
    run, outside = linked_copy(trained, tmp_path, entry)
    before = snapshot(outside)
    argv = ["lens", str(run), "--text", str(text), "--max-tokens", "16", "--threads", "1", "--no-progress"]
    err = one_line(capsys, argv)
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before


def event_folder(run: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", load_run(run).run_id).strip("._")


@pytest.mark.parametrize("where", ["the run's folder", "the hidden folder it is written in first"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_export_tensorboard_over_a_linked_event_folder_is_one_line(trained, tmp_path, where, overwrite, capsys):
    """Before: a link named ``.partial-<run>`` in DIR took the event files out of DIR (exit 0)."""
    out = tmp_path / "tb"
    out.mkdir()
    name = event_folder(trained)
    link = out / (name if where == "the run's folder" else f".partial-{name}")
    link.symlink_to(decoy(tmp_path / "outside", "tb"), target_is_directory=True)
    before = snapshot(tmp_path / "outside")
    argv = ["export", "tensorboard", str(trained), "--out", str(out), "--no-progress"]
    err = one_line(capsys, argv + (["--overwrite"] if overwrite else []))
    assert str(link) in err and "link" in err, err
    assert snapshot(tmp_path / "outside") == before
    assert sorted(p.name for p in out.iterdir()) == [link.name]


# ---------------------------------------------------------------------- an OUT that is a link
def out_commands(trained: Path, text: Path, out: Path) -> dict[str, list[str]]:
    loose = out.parent / "loose.pt"  # a checkpoint outside any run: probe writes its tables into --out
    if not loose.exists():
        shutil.copy(next((trained / "checkpoints").iterdir()), loose)
    return {
        "probe": ["probe", str(loose), "--out", str(out), "--max-docs", "1", "--threads", "1", "--no-progress"],
        "evaluate": ["evaluate", str(trained), "--data", str(text), "--out", str(out), *EVALUATE],
        "import-reference": ["import-reference", "--out", str(out)],
        "export": ["export", str(trained), "--table", "training", "--out", str(out)],
        "train": ["train", "--out", str(out), "--preset", "tiny", "--steps", "1", "--n-docs", "20", "--no-progress"],
        "profile": ["profile", str(trained), "--data", str(text), "--out", str(out), *PROFILE],
        "export tensorboard": ["export", "tensorboard", str(trained), "--out", str(out), "--no-progress"],
    }


@pytest.mark.parametrize(
    "command", ["train", "profile", "probe", "evaluate", "import-reference", "export", "export tensorboard"]
)
def test_an_out_linked_to_a_folder_is_followed(trained, tmp_path, text, command, capsys):
    target = tmp_path / "big-disk" / "out"
    target.mkdir(parents=True)
    out = tmp_path / "out"
    out.symlink_to(target, target_is_directory=True)
    assert main(out_commands(trained, text, out)[command]) == 0
    assert out.is_symlink() and any(target.iterdir())  # written where the link leads, the link left as it was
    if command not in ("export", "export tensorboard", "import-reference"):
        assert load_run(target).path is not None


@pytest.mark.parametrize("kind", ["dangling", "to a file"])
@pytest.mark.parametrize(
    "command", ["train", "profile", "probe", "evaluate", "import-reference", "export", "export tensorboard"]
)
def test_an_out_linked_to_nothing_or_a_file_is_one_line(trained, tmp_path, text, command, kind, capsys):
    elsewhere = tmp_path / "elsewhere"
    if kind == "to a file":
        elsewhere.write_text("not a folder")
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    err = one_line(capsys, out_commands(trained, text, out)[command])
    assert str(out) in err and ("does not exist" in err if kind == "dangling" else "not a folder" in err), err
    assert not elsewhere.exists() if kind == "dangling" else elsewhere.read_text() == "not a folder"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["to a folder", "dangling"])
def test_frontier_into_an_out_that_is_a_link(tmp_path, tiny_causal_lm, kind, capsys):
    """Followed to a folder (its adaptation runs sit beside the name given, as for any OUT); dangling: one line."""
    pytest.importorskip("transformers")
    model = tiny_causal_lm(tmp_path / "llama")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(200)))
    target = tmp_path / "big-disk" / "fr"
    if kind == "to a folder":
        target.mkdir(parents=True)
    out = tmp_path / "fr"
    out.symlink_to(target, target_is_directory=True)
    argv = ["frontier", str(model), "--data", str(text), "--seq-len", "16", "--windows", "8,16", "--no-progress"]
    argv += ["--regimes", "full_adaptive", "--adapt-steps", "1", "--eval-blocks", "1", "--timing-pairs", "2"]
    argv += ["--out", str(out)]
    if kind == "dangling":
        err = one_line(capsys, argv)
        assert str(out) in err and "does not exist" in err, err
        assert not target.exists()
        return
    assert main(argv) == 0
    assert out.is_symlink() and load_run(target).path is not None


def resumable(trained: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


RESUME = ["--resume", "--steps", "4", "--no-progress", "--threads", "1"]


def test_train_resume_reporting_to_a_linked_tensorboard_folder_is_one_line(trained, tmp_path, capsys):
    """The finding: a resume with --report-to tensorboard wrote event files through RUN/tensorboard."""
    pytest.importorskip("tensorboard")
    run, outside = linked_copy(trained, tmp_path, "tensorboard")
    before = snapshot(outside)
    err = one_line(capsys, ["train", "--out", str(run), *RESUME, "--report-to", "tensorboard"])
    assert "tensorboard" in err and "symbolic link" in err, err
    assert snapshot(outside) == before


def test_train_resume_over_a_hard_linked_checkpoint_is_one_line(trained, tmp_path, capsys):
    run = resumable(trained, tmp_path)
    elsewhere = tmp_path / "elsewhere.pt"
    elsewhere.write_bytes(b"someone else's checkpoint")
    os.link(elsewhere, run / "checkpoints" / "step-00000000.pt")  # older than the run's: pruning would delete it
    err = one_line(capsys, ["train", "--out", str(run), *RESUME, "--keep-checkpoints", "1"])
    assert "hard-linked" in err and "step-00000000.pt" in err, err
    assert elsewhere.read_bytes() == b"someone else's checkpoint"


def test_import_reference_over_a_linked_run_folder_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ref"
    out.mkdir()
    link = out / "qwen3-4b-full-adaptive"  # one of the runs it writes
    link.symlink_to(decoy(tmp_path / "outside", "ref"), target_is_directory=True)
    before = snapshot(tmp_path / "outside")
    for overwrite in ([], ["--overwrite"]):
        err = one_line(capsys, ["import-reference", "--out", str(out), *overwrite])
        assert link.name in err and "symbolic link" in err, err
    assert snapshot(tmp_path / "outside") == before
    assert sorted(p.name for p in out.iterdir()) == [link.name]
