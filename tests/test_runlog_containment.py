"""A run's files stay inside it: no writer follows a planted link or a recorded ``../../x`` out of the run.

Each test plants a link (or a crafted generation record) that points at a victim file outside the
run, runs a real writer command, and checks that the command refuses the run in one line naming the
link, that the victim is byte for byte as it was, and that ``validate`` calls the run damaged.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from aah_viz.cli import main
from aah_viz.errors import UnsafePathError
from aah_viz.probes.store import write_probe_tables
from aah_viz.runlog import RunWriter, load_run, paths, validate_run
from aah_viz.samples import make_synthetic_run

PLANTS = ["lock", "manifest", "table folder", "segment"]


def snapshot(root: Path) -> dict:
    """Every file and link under ``root`` without following links: its bytes, or where the link points."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            elif path.is_file():
                out[key] = path.read_bytes()
    return out


def plant(run: Path, kind: str, outside: Path) -> tuple[Path, str]:
    """Replace one of the run's files by a link to a victim in ``outside``; returns (victim, the link's name)."""
    outside.mkdir(exist_ok=True)
    if kind == "lock":
        victim = outside / "victim.txt"
        victim.write_text("a file that is not the run's\n")
        (run / ".writer.lock").unlink(missing_ok=True)
        (run / ".writer.lock").symlink_to(victim)
        return victim, ".writer.lock"
    if kind == "manifest":
        victim = outside / "manifest.json"
        shutil.move(run / "manifest.json", victim)
        (run / "manifest.json").symlink_to(victim)
        return victim, "manifest.json"
    if kind == "table folder":
        victim = outside / "events"
        shutil.move(run / "events", victim)
        (run / "events").symlink_to(victim, target_is_directory=True)
        return victim, "events"
    segment = paths.list_segments(run / "heads")[-1]
    victim = outside / segment.name
    shutil.move(segment, victim)
    segment.symlink_to(victim)
    return victim, f"heads/{segment.name}"


def probe_rows(step: int) -> dict:
    row = {"step": step, "layer": 0, "head": 0, "probe": "syntax", "metric": "uas", "value": 0.5, "window": 4}
    return {"probe_heads": pd.DataFrame([row])}


def refused(message: str, link: str) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message
    assert link in message and "symbolic link" in message and "is not written" in message, message


@pytest.fixture
def run(tmp_path):
    return make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=6, flush_every=2)


@pytest.mark.parametrize("kind", PLANTS)
def test_compact_refuses_a_run_whose_files_lead_outside_and_changes_nothing(run, tmp_path, kind, capsys):
    victim, link = plant(run, kind, tmp_path / "outside")
    victim_before, run_before = snapshot(victim.parent), snapshot(run)
    assert main(["compact", str(run), "--no-progress"]) == 2
    refused(capsys.readouterr().err, link)
    assert snapshot(victim.parent) == victim_before and snapshot(run) == run_before
    assert any(link in p and "symbolic link" in p for p in validate_run(run))
    assert main(["validate", str(run)]) == 2


@pytest.mark.parametrize("kind", PLANTS)
def test_probe_rows_are_refused_for_a_run_whose_files_lead_outside(run, tmp_path, kind):
    victim, link = plant(run, kind, tmp_path / "outside")
    victim_before, run_before = snapshot(victim.parent), snapshot(run)
    with pytest.raises(UnsafePathError) as err:
        write_probe_tables(run, probe_rows(5), 5)
    refused(str(err.value), link)
    assert snapshot(victim.parent) == victim_before and snapshot(run) == run_before


def test_every_writer_refuses_the_link_and_a_sound_run_is_written_again_once_it_is_gone(run, tmp_path):
    victim, link = plant(run, "lock", tmp_path / "outside")
    before = victim.read_bytes()
    manifest = load_run(run).manifest
    for attempt in (lambda: RunWriter.resume(run), lambda: RunWriter.create(run, manifest, overwrite=True)):
        with pytest.raises(UnsafePathError, match="is a symbolic link"):
            attempt()
    assert victim.read_bytes() == before
    (run / ".writer.lock").unlink()
    RunWriter.resume(run).close()
    assert victim.read_bytes() == before and validate_run(run) == []


def test_a_hard_linked_lock_is_refused_before_the_other_name_is_written(run, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / ".writer.lock").unlink(missing_ok=True)
    os.link(victim, run / ".writer.lock")
    with pytest.raises(UnsafePathError, match="another name"):
        RunWriter.resume(run)
    assert victim.read_text() == "precious\n"


def crafted_record(run: Path, names: list[str]) -> None:
    record = {"generations": [{"added": names, "replaces": []}]}
    (run / "heads" / "_generations.json").write_text(json.dumps(record))


def test_a_record_naming_a_file_outside_the_folder_is_damage_and_nothing_is_deleted(run, tmp_path, capsys):
    victim = tmp_path / "victim.txt"  # run/heads/../../victim.txt
    victim.write_text("precious\n")
    # a swap whose second new file is missing: finishing it would delete the "new" files that are there
    crafted_record(run, ["../../victim.txt", "part-99999999999999999999-000000.parquet"])
    expected = (
        "heads/_generations.json names '../../victim.txt', not a segment file of heads/: the run is damaged "
        "(a run's files must stay inside it); readers ignore the record and writers refuse the run"
    )
    assert validate_run(run) == [expected]
    assert main(["validate", str(run)]) == 2
    assert main(["compact", str(run), "--no-progress"]) == 2
    assert expected in capsys.readouterr().err
    with pytest.raises(UnsafePathError, match="names '../../victim.txt'"):
        write_probe_tables(run, probe_rows(5), 5)
    assert victim.read_text() == "precious\n"
    # readers ignore the record: every segment is still read once
    assert sorted(load_run(run).table("heads")["step"].unique()) == list(range(6))


@pytest.mark.parametrize("name", ["../heads/part-1-000001.parquet", "sub/part-1-000001.parquet", "part-1-1.parquet\n"])
def test_only_plain_segment_names_of_the_folder_are_accepted_in_a_record(run, name):
    crafted_record(run, [name])
    assert any("_generations.json names" in p for p in validate_run(run))


# ---------------------------------------------------------------------- the torch writers: train --resume, evaluate
TRAIN = ["--preset", "tiny", "--n-docs", "24", "--no-progress", "--threads", "1", "--eval-batches", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 3-step run of aah-viz train with its checkpoint, and a text to evaluate it on."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("trained")
    assert main(["train", "--out", str(root / "run"), "--steps", "3", "--flush-every", "1", *TRAIN]) == 0
    text = root / "text.txt"
    text.write_text("The cat sat on the mat and looked at the dog. " * 40, encoding="utf-8")
    return root / "run", text


WRITERS = {
    # extending a finished run reopens its writer (a bare --resume of a finished run writes nothing)
    "train --resume": lambda run, text: ["train", "--out", str(run), "--resume", "--steps", "5", *TRAIN],
    "evaluate --out RUN": lambda run, text: (
        ["evaluate", str(run), "--data", str(text), "--out", str(run)] + ["--batches", "1", "--no-progress"]
    ),
}


@pytest.mark.torch
@pytest.mark.parametrize("command", list(WRITERS))
@pytest.mark.parametrize("kind", PLANTS)
def test_train_resume_and_evaluate_refuse_a_run_whose_files_lead_outside(trained, tmp_path, kind, command, capsys):
    source, text = trained
    run = tmp_path / "run"
    shutil.copytree(source, run)
    victim, link = plant(run, kind, tmp_path / "outside")
    victim_before, run_before = snapshot(victim.parent), snapshot(run)
    assert main(WRITERS[command](run, text)) == 2
    refused(capsys.readouterr().err, link)
    assert snapshot(victim.parent) == victim_before and snapshot(run) == run_before
