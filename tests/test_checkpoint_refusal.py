"""A malicious pickle is refused in our words (one line, no advice to load it unsafely) and runs nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from aah_viz.cli import main  # noqa: E402
from instrumentation.training import checkpoint as ckpt  # noqa: E402

pytestmark = pytest.mark.torch


class RunsCode:
    """Unpickling this runs a shell command: the marker file proves it ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _assert_refused(err: str, marker: Path) -> None:
    line = err.strip()
    assert len(line.splitlines()) == 1, line
    assert "refused to load" in line and "could run code" in line
    assert "weights_only" not in line and "Traceback" not in line
    assert not marker.exists()


def test_a_malicious_checkpoint_stops_a_resume_with_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--preset", "tiny", "--n-docs", "24", "--steps", "2", "--no-progress"]
    assert main(args) == 0
    marker = tmp_path / "ran"
    newest = ckpt.checkpoint_path(out, 5)
    torch.save({"model": RunsCode(marker), "step": 5, "config": {}}, newest)
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--steps", "9", "--no-progress"]) == 2
    _assert_refused(capsys.readouterr().err, marker)


def test_a_malicious_hugging_face_folder_is_refused_with_one_line(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "hf"
    transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=8, vocab_size=256, n_positions=16, bos_token_id=0, eos_token_id=0
    ).save_pretrained(folder)
    marker = tmp_path / "ran"
    torch.save({"wte.weight": RunsCode(marker)}, folder / "pytorch_model.bin")
    code = main(["probe", str(folder), "--out", str(tmp_path / "out"), "--max-docs", "1", "--no-progress"])
    assert code == 2
    _assert_refused(capsys.readouterr().err, marker)
