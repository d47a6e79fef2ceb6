"""``--report-to wandb`` (offline) and ``--report-to mlflow`` (a local file store) with the real libraries, read
back through their own files and API and checked against the run directory. Each skips cleanly where its
package (the ``wandb`` / ``mlflow`` extra) is not installed."""

from __future__ import annotations

import json
import struct

import pytest

torch = pytest.importorskip("torch")

from routing_expect import check_against_run  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402

pytestmark = pytest.mark.torch
TRAIN = ["train", "--preset", "tiny", "--steps", "8", "--batch-size", "2", "--n-docs", "40", "--eval-interval", "4"]
TRAIN += ["--keep-checkpoints", "0", "--no-progress", "--threads", "1", "--set", "control_interval=1"]
REPORT = ["--report-every", "2", "--report-images", "3"]


def _update_steps(run_dir) -> list[int]:
    return sorted(set(int(s) for s in load_run(run_dir).events("routing_update")["step"]))


def wandb_history(path) -> dict[int, dict]:
    """{step: {key: value}} of an offline W&B run's transaction log (``run-ID.wandb``): W&B's header, then
    LevelDB-framed records (32 KiB blocks, 7-byte record headers), each a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending, history = 7, 32768, b"", {}
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        pending += data[pos : pos + length]
        pos += length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
                history.setdefault(int(record.history.step.num), {}).update(items)
    return history


def test_train_reports_to_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    out = tmp_path / "run"
    assert main([*TRAIN, "--out", str(out), "--report-to", "wandb", *REPORT]) == 0
    assert validate_run(out) == []
    [log] = list((tmp_path / "wb").glob("wandb/offline-run-*/run-*.wandb"))
    history = wandb_history(log)
    logged: dict[str, dict[int, float]] = {}
    for step, items in history.items():
        for key, value in items.items():
            image_field = key.startswith("aah/windows/")  # the heatmap's own fields (size, width, ...)
            if isinstance(value, (int, float)) and not key.startswith("_") and not image_field:
                logged.setdefault(key, {})[step] = float(value)
    assert check_against_run(logged, out, step_of=lambda s: s) == {1, 3, 5, 7}
    assert set(logged["eval/val_loss"]) == {3, 7}
    image_steps = sorted(s for s, items in history.items() if items.get("aah/windows/_type") == "image-file")
    assert image_steps == _update_steps(out)[2::3]  # every 3rd routing update
    for step in image_steps:
        assert (log.parent / "files" / history[step]["aah/windows/path"]).is_file()


def test_train_reports_to_mlflow_file_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow.tracking import MlflowClient

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for this to use a plain folder
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "aah-viz-test")
    out = tmp_path / "run"
    assert main([*TRAIN, "--out", str(out), "--report-to", "mlflow", *REPORT]) == 0
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("aah-viz-test")
    [found] = client.search_runs([experiment.experiment_id])
    assert found.info.status == "FINISHED" and found.info.run_name == load_run(out).run_id
    logged = {
        key: {m.step: m.value for m in client.get_metric_history(found.info.run_id, key)} for key in found.data.metrics
    }
    assert check_against_run(logged, out, step_of=lambda s: s) == {1, 3, 5, 7}
    images = [a.path for a in client.list_artifacts(found.info.run_id, "images") if a.path.endswith(".png")]
    steps = sorted(int(p.split("+step+")[1].split("+")[0]) for p in images)
    assert steps == _update_steps(out)[2::3]
