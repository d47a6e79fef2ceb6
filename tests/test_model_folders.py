"""``validate`` looks inside ``checkpoints/`` and ``adapters/``: aah-viz writes only plain step-XXXXXXXX files of
their kinds there, so a link (out of the run or not), a hard-linked file, a folder or FIFO, or any other name is
reported as damage with its path, and the CLI's validate exits non-zero with the path in its output."""

from __future__ import annotations

import os

import pytest

from aah_viz.cli import main
from aah_viz.runlog import load_run, paths, validate_run
from aah_viz.runlog.validate import damage
from aah_viz.samples import make_synthetic_run


@pytest.fixture
def run(tmp_path):
    return make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=6, flush_every=3)


def folder_with_good_files(run, name):
    folder = run / name
    folder.mkdir()
    good = ["step-00000003.pt"]
    if name == "adapters":
        good = ["step-00000003.safetensors", "step-00000003.optimizer.pt"]
    for file in good:
        (folder / file).write_bytes(b"weights")
    (folder / ".step-00000004.pt.123-abcd.tmp").write_bytes(b"")  # a killed writer's temporary file: harmless
    return folder


@pytest.mark.parametrize("name", ["checkpoints", "adapters"])
def test_step_files_of_the_folders_kind_are_no_problem(run, name):
    folder_with_good_files(run, name)
    assert validate_run(run) == []
    assert name not in load_run(run).tables()  # its killed writer's .tmp file once made it a "table"


def planted(run, folder, tmp_path, case):
    """Put one hostile entry into ``folder``; returns its name."""
    if case == "link inside the run":
        (folder / "step-00000005.pt").symlink_to(run / "heads")
        return "step-00000005.pt"
    if case == "link out of the run":
        (tmp_path / "elsewhere.pt").write_bytes(b"someone else's")
        (folder / "step-00000005.pt").symlink_to(tmp_path / "elsewhere.pt")
        return "step-00000005.pt"
    if case == "hard-linked file":
        (tmp_path / "elsewhere.pt").write_bytes(b"someone else's")
        os.link(tmp_path / "elsewhere.pt", folder / "step-00000005.safetensors")
        return "step-00000005.safetensors"
    if case == "folder with a step name":
        (folder / "step-00000005.pt").mkdir()
        return "step-00000005.pt"
    if case == "fifo":
        os.mkfifo(folder / "step-00000005.pt")
        return "step-00000005.pt"
    if case == "not a step file":
        (folder / "notes.txt").write_text("mine")
        return "notes.txt"
    if case == "a step file of the other folder's kind":
        other = ".safetensors" if folder.name == "checkpoints" else ".pt"
        (folder / f"step-00000005{other}").write_bytes(b"weights")
        return f"step-00000005{other}"
    raise AssertionError(case)


CASES = [
    "link inside the run",
    "link out of the run",
    "hard-linked file",
    "folder with a step name",
    "fifo",
    "not a step file",
    "a step file of the other folder's kind",
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["checkpoints", "adapters"])
def test_anything_else_in_a_model_folder_is_damage_with_its_path(run, tmp_path, name, case, capsys):
    folder = folder_with_good_files(run, name)
    entry = planted(run, folder, tmp_path, case)
    said = [p for p in damage(run) if f"{name}/{entry}" in p]
    assert len(said) == 1, damage(run)  # once, not by two checks
    capsys.readouterr()
    assert main(["validate", str(run)]) != 0
    assert f"{name}/{entry}" in capsys.readouterr().out + capsys.readouterr().err


@pytest.mark.parametrize("name", ["checkpoints", "adapters"])
def test_a_model_folder_that_is_a_file_or_a_link_inside_the_run_is_damage(run, name):
    (run / name).write_bytes(b"not a folder")
    assert any(f"{name} is not a folder" in p for p in damage(run))
    (run / name).unlink()
    (run / name).symlink_to(run / "heads", target_is_directory=True)
    assert any(f"{name} is a symbolic link" in p for p in damage(run)), damage(run)
    assert paths.CHECKPOINT_DIR in paths.RUN_ENTRIES and paths.ADAPTER_DIR in paths.RUN_ENTRIES
