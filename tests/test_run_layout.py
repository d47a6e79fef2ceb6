"""The run directory's model files (``aah_viz.runlog.paths``): names, listing, pruning, atomic writes."""

from __future__ import annotations

import json

import pytest

from aah_viz.probes.target import resolve_target
from aah_viz.runlog import load_run, paths
from aah_viz.samples import make_synthetic_run


def _checkpoint_events(run_dir) -> list[tuple[int, str]]:
    ev = load_run(run_dir).events()
    ev = ev[ev["kind"] == "checkpoint"]
    return [(int(s), json.loads(d)["path"]) for s, d in zip(ev["step"], ev["detail"])]


def test_a_synthetic_run_records_its_checkpoint_under_the_name_every_reader_lists(tmp_path):
    run = make_synthetic_run(tmp_path / "syn", n_layer=2, n_head=4, steps=12, windows=(8, 16), seq_len=16)
    ((step, recorded),) = _checkpoint_events(run)
    assert step == 11
    assert recorded == f"checkpoints/step-{step:08d}.pt"  # docs/training.md: RUN/checkpoints/step-XXXXXXXX.pt
    # a file where the event says it is, is the run's checkpoint of that step for every reader
    (run / recorded).parent.mkdir()
    (run / recorded).write_bytes(b"")
    assert paths.list_checkpoints(run) == [(11, run / recorded)]
    target = resolve_target(str(run))
    assert (target.kind, target.step, target.model_path) == ("aah", 11, run / recorded)


def test_the_trainer_and_a_synthetic_run_record_the_same_checkpoint_path(tmp_path):
    pytest.importorskip("torch")
    from aah_viz.cli import main

    out = tmp_path / "trained"
    args = ["train", "--out", str(out), "--preset", "tiny", "--steps", "2", "--n-docs", "8", "--no-progress"]
    assert main([*args, "--threads", "1", "--eval-interval", "2", "--eval-batches", "1"]) == 0
    ((step, recorded),) = _checkpoint_events(out)
    assert (out / recorded).is_file() and paths.list_checkpoints(out) == [(step, out / recorded)]
    syn = make_synthetic_run(tmp_path / "syn", n_layer=2, n_head=4, steps=step + 1, windows=(8, 16), seq_len=16)
    assert _checkpoint_events(syn) == [(step, recorded)]


def test_step_files_are_listed_in_step_order_and_nothing_else(tmp_path):
    ck, ad = tmp_path / "checkpoints", tmp_path / "adapters"
    ck.mkdir()
    ad.mkdir()
    for name in ("step-00000010.pt", "step-00000003.pt", "step-3.pt", "step-00000004.optimizer.pt", "notes.txt"):
        (ck / name).write_bytes(b"x")
    (ck / ".step-00000011.pt.123-abcd.tmp").write_bytes(b"half")  # a write in progress
    (ck / "step-00000020.pt").mkdir()  # not a file
    for name in ("step-00000002.safetensors", "step-00000002.optimizer.pt", "step-00000001.safetensors"):
        (ad / name).write_bytes(b"x")
    assert paths.list_checkpoints(tmp_path) == [(3, ck / "step-00000003.pt"), (10, ck / "step-00000010.pt")]
    assert paths.list_adapters(tmp_path) == [
        (1, ad / "step-00000001.safetensors"),
        (2, ad / "step-00000002.safetensors"),
    ]
    assert paths.list_checkpoints(tmp_path / "missing") == [] and paths.list_adapters(ck) == []
    assert paths.checkpoint_path(tmp_path, 3) == ck / "step-00000003.pt"
    assert paths.adapter_path(tmp_path, 2) == ad / "step-00000002.safetensors"
    assert paths.adapter_optimizer_path(tmp_path, 2) == ad / "step-00000002.optimizer.pt"
    assert paths.checkpoint_path(tmp_path, 123456789).name == "step-123456789.pt"  # wider steps are not cut


def test_pruning_keeps_the_newest_and_takes_an_adapters_optimizer_file_with_it(tmp_path):
    for step in (1, 2, 3):
        paths.checkpoint_path(tmp_path, step).parent.mkdir(exist_ok=True)
        paths.checkpoint_path(tmp_path, step).write_bytes(b"x")
        paths.adapter_path(tmp_path, step).parent.mkdir(exist_ok=True)
        paths.adapter_path(tmp_path, step).write_bytes(b"x")
        paths.adapter_optimizer_path(tmp_path, step).write_bytes(b"x")
    paths.prune_checkpoints(tmp_path, 0)  # 0 keeps everything
    paths.prune_adapters(tmp_path, 0)
    assert len(list((tmp_path / "checkpoints").iterdir())) == 3 and len(list((tmp_path / "adapters").iterdir())) == 6
    paths.prune_checkpoints(tmp_path, 2)
    paths.prune_adapters(tmp_path, 1)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000002.pt", "step-00000003.pt"]
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == [
        "step-00000003.optimizer.pt",
        "step-00000003.safetensors",
    ]


@pytest.mark.parametrize("durable", [True, False])
def test_atomic_path_renames_on_success_and_leaves_nothing_on_failure(tmp_path, durable):
    target = tmp_path / "step-00000001.pt"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="killed"):
        with paths.atomic_path(target, durable=durable) as tmp:
            assert tmp.parent == tmp_path and paths.is_hidden(tmp.name)
            tmp.write_bytes(b"half")
            raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and target.read_bytes() == b"old"
    with paths.atomic_path(target, durable=durable) as tmp:
        tmp.write_bytes(b"new")
        assert target.read_bytes() == b"old"  # readers see the old file until the rename
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and target.read_bytes() == b"new"
