"""Every entry of a run directory is declared once (``runlog.paths.RUN_ENTRIES``) and reached through one
gate that refuses a link leading out of the run or a hard-linked file, in readers and writers alike.

The test takes the declared list, makes each folder entry in turn a link to an outside folder holding a
decoy file, and checks: ``validate`` reports it with its path, every writer refuses the run in one line, the
commands that touch that entry exit 2 with one line, and the decoy folder is byte for byte as it was.
A static check fails when code outside the run-log package builds a path inside a run by hand.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from aah_viz.cli import main
from aah_viz.errors import UnsafePathError
from aah_viz.runlog import RunWriter, paths, validate_run
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]
FOLDERS = [name for name, kind in paths.RUN_ENTRIES.items() if kind == "folder"]


def snapshot(root: Path) -> dict:
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = (
                ("link", os.readlink(path))
                if path.is_symlink()
                else (path.read_bytes() if path.is_file() else "folder")
            )
    return out


def decoy(outside: Path, entry: str) -> Path:
    """An outside folder holding a file that the entry's users would read, replace or delete."""
    folder = outside / f"decoy-{entry.strip('.')}"
    folder.mkdir(parents=True)
    for name in ("step-00000001.pt", "step-00000001.safetensors", "step-00000001.optimizer.pt", "meta.json"):
        (folder / name).write_bytes(b"not the run's")
    (folder / "events.out.tfevents.1.decoy").write_bytes(b"not the run's")
    (folder / "adapt.txt").write_text("not the run's")
    return folder


@pytest.fixture
def run(tmp_path):
    return make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=6, flush_every=3)


def test_the_declared_entries_are_the_ones_the_commands_use():
    used = {"manifest.json", ".writer.lock", "checkpoints", "adapters", "tensorboard", ".probe-progress", "inputs"}
    used |= {".lens-progress"}
    assert used <= set(paths.RUN_ENTRIES)


@pytest.mark.parametrize("entry", FOLDERS)
def test_a_declared_folder_linked_out_of_the_run_is_refused_everywhere(run, tmp_path, entry, capsys):
    outside = tmp_path / "outside"
    target = decoy(outside, entry)
    (run / entry).symlink_to(target, target_is_directory=True)
    before = snapshot(outside)

    said = [p for p in validate_run(run) if entry in p and "symbolic link" in p]
    assert said and str(target) in said[0], validate_run(run)
    assert main(["validate", str(run)]) != 0
    with pytest.raises(UnsafePathError, match=re.escape(entry)):
        paths.run_entry(run, entry)
    with pytest.raises(UnsafePathError):
        RunWriter.resume(run)  # every writer takes the lock, and the lock checks every declared entry
    with pytest.raises(UnsafePathError):
        paths.entry_files(run, entry)
    if entry == paths.CHECKPOINT_DIR:
        with pytest.raises(UnsafePathError):
            paths.prune_checkpoints(run, 1)
        with pytest.raises(UnsafePathError):
            paths.list_checkpoints(run)
    if entry == paths.ADAPTER_DIR:
        with pytest.raises(UnsafePathError):
            paths.remove_adapters(run)
    capsys.readouterr()
    assert main(["compact", str(run), "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and entry in err, err
    assert snapshot(outside) == before


def test_a_hard_linked_file_in_a_declared_folder_is_damage_and_refused(run, tmp_path):
    elsewhere = tmp_path / "elsewhere.pt"
    elsewhere.write_bytes(b"someone else's checkpoint")
    (run / paths.CHECKPOINT_DIR).mkdir()
    os.link(elsewhere, run / paths.CHECKPOINT_DIR / "step-00000005.pt")
    assert any("hard-linked" in p and "step-00000005.pt" in p for p in validate_run(run))
    with pytest.raises(UnsafePathError, match="hard-linked"):
        paths.list_checkpoints(run)
    with pytest.raises(UnsafePathError, match="hard-linked"):
        paths.prune_checkpoints(run, 1)
    assert elsewhere.read_bytes() == b"someone else's checkpoint"


torch = pytest.importorskip("torch")


def test_commands_over_linked_checkpoints_are_one_line_and_the_decoy_is_untouched(tmp_path, capsys):
    """The high finding: RUN/checkpoints a link, train --resume wrote and pruned there; evaluate and
    probe read the checkpoint through it."""
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--preset", "tiny", "--steps", "4", "--n-docs", "20", "--no-progress"]
    assert main([*args, "--threads", "1", "--checkpoint-interval", "2"]) == 0
    target = decoy(tmp_path / "outside", "checkpoints")
    shutil.rmtree(out / "checkpoints")
    (out / "checkpoints").symlink_to(target, target_is_directory=True)
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    before = snapshot(tmp_path / "outside")
    commands = {
        "train --resume": ["train", "--out", str(out), "--resume", "--steps", "6", "--no-progress", "--threads", "1"],
        "evaluate": ["evaluate", str(out), "--data", str(text), "--out", str(out), "--no-progress", "--threads", "1"],
        "probe": ["probe", str(out), "--max-docs", "1", "--no-progress", "--threads", "1"],
    }
    for name, argv in commands.items():
        capsys.readouterr()
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and "checkpoints" in err and "symbolic link" in err, (name, err)
    assert snapshot(tmp_path / "outside") == before


def test_a_linked_probe_or_lens_progress_is_refused_before_the_command_reads_it(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--preset", "tiny", "--steps", "2", "--n-docs", "20", "--no-progress"]
    assert main([*args, "--threads", "1"]) == 0
    target = decoy(tmp_path / "outside", ".probe-progress")
    (out / ".probe-progress").symlink_to(target, target_is_directory=True)
    before = snapshot(tmp_path / "outside")
    capsys.readouterr()
    assert main(["probe", str(out), "--max-docs", "1", "--no-progress", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".probe-progress" in err, err
    assert snapshot(tmp_path / "outside") == before

    lens_target = decoy(tmp_path / "outside", ".lens-progress")
    (out / ".lens-progress").symlink_to(lens_target, target_is_directory=True)
    (tmp_path / "t.txt").write_text("A short paragraph for the lens to read.")
    before = snapshot(tmp_path / "outside")
    assert main(["lens", str(out), "--text", str(tmp_path / "t.txt"), "--no-progress", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".lens-progress" in err, err
    assert snapshot(tmp_path / "outside") == before


# ---------------------------------------------------------------------- no run path built by hand
HAND_BUILT = re.compile(
    r"""/\s*(?:"manifest\.json"|MANIFEST\b|"checkpoints"|"adapters"|"tensorboard"|"\.probe-progress"|"\.lens-progress"|"inputs"|"\.writer\.lock")"""
)


def test_no_code_outside_the_run_log_builds_a_path_inside_a_run_by_hand():
    """``run / "manifest.json"`` and the like belong in aah_viz/runlog (paths.is_run, paths.run_entry)."""
    found = []
    for package in ("aah_viz", "instrumentation"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.is_relative_to(REPO / "aah_viz" / "runlog"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if HAND_BUILT.search(line.split("#")[0]):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.slow
def test_retrofit_and_frontier_over_linked_entries_are_one_line(tmp_path, tiny_causal_lm, capsys):
    """adapters/ of a retrofit run, inputs/ of a frontier, and a frontier's sibling adaptation run as links."""
    pytest.importorskip("transformers")
    model = tiny_causal_lm(tmp_path / "llama")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(200)))
    out = tmp_path / "retro"
    retro = ["retrofit", str(model), "--data", str(text), "--out", str(out), "--steps", "1", "--seq-len", "16"]
    retro += ["--windows", "4,8,16", "--no-progress", "--threads", "1"]
    assert main(retro) == 0
    outside = tmp_path / "outside"
    shutil.rmtree(out / "adapters")
    (out / "adapters").symlink_to(decoy(outside, "adapters"), target_is_directory=True)
    fr = tmp_path / "fr"
    fr.mkdir()
    (fr / "inputs").symlink_to(decoy(outside, "inputs"), target_is_directory=True)
    sibling = tmp_path / "fr2-full_adaptive"
    sibling.symlink_to(decoy(outside, "sibling"), target_is_directory=True)
    before = snapshot(outside)
    frontier = ["frontier", str(model), "--data", str(text), "--seq-len", "16", "--windows", "8,16", "--no-progress"]
    frontier += ["--regimes", "full_adaptive", "--adapt-steps", "1", "--eval-blocks", "1", "--timing-pairs", "2"]
    commands = {
        "retrofit --resume": ([*retro, "--resume", "--steps", "2"], "adapters"),
        "frontier over inputs": ([*frontier, "--out", str(fr)], "inputs"),
        "frontier over a sibling": ([*frontier, "--out", str(tmp_path / "fr2")], "fr2-full_adaptive"),
    }
    for name, (argv, entry) in commands.items():
        capsys.readouterr()
        rc = main(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert rc == 2 and len(err) == 1 and entry in err[0] and "link" in err[0], (name, err)
    assert snapshot(outside) == before
