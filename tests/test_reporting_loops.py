"""``--report-to`` in our own loops (``aah-viz train``, ``aah-viz retrofit``): the same ``aah/`` scalars as the
run directory, read back with TensorBoard's own reader, the window heatmap every N routing updates, and a
missing package refused in one line before anything trains."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard", reason="the report extra (tensorboard) is not installed")

from routing_expect import check_against_run, read_tensorboard  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from test_cli_modules import aah_viz_without  # noqa: E402

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402

pytestmark = pytest.mark.torch
TRAIN = ["train", "--preset", "tiny", "--steps", "8", "--batch-size", "2", "--n-docs", "40", "--eval-interval", "4"]
TRAIN += ["--keep-checkpoints", "0", "--no-progress", "--threads", "1"]


def _images(logdir, tag="aah/windows"):
    acc = EventAccumulator(str(logdir), size_guidance={"images": 0})
    acc.Reload()
    return {e.step: e for e in acc.Images(tag)} if tag in acc.Tags()["images"] else {}


def _update_steps(run_dir):
    return set(int(s) for s in load_run(run_dir).events("routing_update")["step"])


def _check_heatmap(image, run_dir, step):
    """The heatmap's cells: one per head, the same colour exactly where the run's windows are equal."""
    from PIL import Image

    run = load_run(run_dir)
    heads = run.table("heads")
    at = heads[heads["step"] == step].sort_values(["layer", "head"])
    windows = at["window"].to_numpy().reshape(run.n_layer, run.n_head)
    rgb = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)).convert("RGB"))
    cell = rgb.shape[0] // run.n_layer
    assert rgb.shape == (run.n_layer * cell, run.n_head * cell, 3)
    colours = rgb[cell // 2 :: cell, cell // 2 :: cell].reshape(-1, 3)
    flat = windows.reshape(-1)
    for i in range(flat.size):
        for j in range(flat.size):
            assert (flat[i] == flat[j]) == bool((colours[i] == colours[j]).all()), (step, i, j)


def test_train_reports_routing_and_heatmaps_to_tensorboard(tmp_path):
    out = tmp_path / "run"
    extra = ["--report-to", "tensorboard", "--report-every", "2", "--report-images", "1", "--report-layers"]
    assert main([*TRAIN, "--out", str(out), *extra]) == 0
    assert validate_run(out) == []
    logged = read_tensorboard(out / "tensorboard")
    checked = check_against_run(logged, out, step_of=lambda s: s, per_layer=True)
    assert checked == {1, 3, 5, 7}
    sc = load_run(out).table("scalars")
    loss = sc[(sc["name"] == "loss") & sc["layer"].isna()].set_index("step")["value"]
    assert set(logged["train/loss"]) == checked
    for step, value in logged["train/loss"].items():
        assert value == pytest.approx(loss[step], rel=1e-6)
    val = sc[sc["name"] == "val_loss"].set_index("step")["value"]
    assert set(logged["eval/val_loss"]) == set(val.index) == {3, 7}
    images = _images(out / "tensorboard")
    assert set(images) == _update_steps(out) and images  # one heatmap per routing update (N = 1)
    for step, image in images.items():
        _check_heatmap(image, out, step)


def test_report_images_every_n_routing_updates(tmp_path):
    out = tmp_path / "run"
    args = [*TRAIN, "--out", str(out), "--report-to", "tensorboard", "--report-images", "2", "--set", "warmup_steps=1"]
    args += ["--set", "control_interval=1"]
    assert main(args) == 0
    updates = sorted(_update_steps(out))
    assert len(updates) >= 4
    assert sorted(_images(out / "tensorboard")) == updates[1::2]  # the 2nd, 4th, ... routing update
    # without --report-layers no per-layer keys; the default cadence (10) still reports the last step
    logged = read_tensorboard(out / "tensorboard")
    assert not any(k.startswith("aah/mean_window/") for k in logged)
    assert set(logged["aah/acr"]) == {7}


def test_retrofit_reports_routing_to_tensorboard(tmp_path_factory, tmp_path, tiny_causal_lm):
    pytest.importorskip("transformers")
    from test_retrofit_cli import TEXT

    base = tmp_path_factory.mktemp("qwen")
    tiny_causal_lm(base / "qwen", family="qwen3")
    (base / "text.txt").write_text(TEXT)
    out = tmp_path / "run"
    args = ["retrofit", str(base / "qwen"), "--data", str(base / "text.txt"), "--out", str(out), "--steps", "6"]
    args += ["--windows", "8,16,32", "--eval-interval", "3", "--eval-batches", "1", "--no-progress", "--threads", "1"]
    assert main([*args, "--report-to", "tensorboard", "--report-every", "3"]) == 0
    logged = read_tensorboard(out / "tensorboard")
    assert check_against_run(logged, out, step_of=lambda s: s) == {2, 5}


@pytest.mark.parametrize("target", ["wandb", "mlflow", "tensorboard"])
def test_a_missing_reporting_package_is_one_line_before_anything_trains(tmp_path, target):
    out = tmp_path / "run"
    proc = aah_viz_without(target, *TRAIN, "--out", str(out), "--report-to", f"tensorboard,{target}")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and target in lines[0] and "pip install 'aah-viz[" in lines[0], lines
    assert not out.exists()


def test_an_unknown_reporting_target_is_refused(tmp_path, capsys):
    assert main([*TRAIN, "--out", str(tmp_path / "run"), "--report-to", "tensorboard,neptune"]) == 2
    assert "neptune" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def _scalar_events(logdir, tag="aah/acr"):
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_a_resumed_run_replaces_the_points_after_its_checkpoint_and_an_overwritten_run_starts_clean(tmp_path):
    out = tmp_path / "run"
    base = [a for a in TRAIN if a not in ("--keep-checkpoints", "0")]
    args = [*base, "--out", str(out), "--checkpoint-interval", "4", "--report-to", "tensorboard", "--report-every", "1"]
    assert main(args) == 0
    (out / "checkpoints" / "step-00000007.pt").unlink()  # the newest checkpoint now is step 3's
    resume = ["train", "--out", str(out), "--resume", "--steps", "10", "--no-progress"]
    resume += ["--report-to", "tensorboard", "--report-every", "1"]
    assert main(resume) == 0  # steps 4.. again from step 3's checkpoint
    events = _scalar_events(out / "tensorboard")
    assert [s for s, _ in events] == list(range(10))  # steps 4..7 once, from the resumed session
    assert check_against_run(read_tensorboard(out / "tensorboard"), out, step_of=lambda s: s) == set(range(10))
    shorter = [a if a != "8" else "3" for a in args]
    assert main([*shorter, "--overwrite"]) == 0
    assert [s for s, _ in _scalar_events(out / "tensorboard")] == [0, 1, 2]
    assert len(list((out / "tensorboard").iterdir())) == 1


def test_a_bare_resume_keeps_reporting_where_the_run_reported(tmp_path):
    """`train --resume` without --report-to: the run's recorded reporting (targets and cadence) goes on, so
    TensorBoard holds every step, not the steps up to the interruption."""
    out = tmp_path / "run"
    base = [a for a in TRAIN if a not in ("--keep-checkpoints", "0")]
    args = [*base, "--out", str(out), "--checkpoint-interval", "4", "--report-to", "tensorboard", "--report-every", "1"]
    assert main(args) == 0
    assert load_run(out).manifest["train"]["report"]["targets"] == ["tensorboard"]
    assert main(["train", "--out", str(out), "--resume", "--steps", "12", "--no-progress"]) == 0
    assert [s for s, _ in _scalar_events(out / "tensorboard")] == list(range(12))
