"""``aah-viz evaluate``: the stand-alone inference pass on our runs and on patched Hugging Face models."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from aah_viz import coverage  # noqa: E402
from aah_viz.cli import main  # noqa: E402
from aah_viz.export.records import inference_record  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.data import cut_blocks  # noqa: E402
from instrumentation.measure.probe_extract import load_aah_checkpoint  # noqa: E402

pytestmark = pytest.mark.torch
TEXT = "The quick brown fox jumps over the lazy dog. " * 40 + "Pack my box with five dozen liquor jugs. " * 30


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    run = root / "run"
    rc = main(
        ["train", "--out", str(run), "--preset", "tiny", "--steps", "8", "--n-docs", "24", "--no-progress"]
        + ["--threads", "1", "--eval-interval", "4", "--eval-batches", "1", "--checkpoint-interval", "4"]
    )
    assert rc == 0
    data = root / "text.txt"
    data.write_text(TEXT)
    return run, data


def _refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def _events(run_dir, kind):
    ev = load_run(run_dir).events()
    return [json.loads(d) for d in ev.loc[ev["kind"] == kind, "detail"]]


def _expected_loss(model, blocks):
    total, n = 0.0, 0
    with torch.no_grad():
        for b in blocks:
            x = torch.from_numpy(b[None, :-1])
            y = torch.from_numpy(b[None, 1:])
            total += float(model(x, targets=y).loss) * y.numel()
            n += y.numel()
    return total / n


def test_evaluate_appends_an_inference_event_to_the_run(trained, capsys):
    run, data = trained
    rc = main(["evaluate", str(run), "--data", str(data), "--out", str(run), "--checkpoint", "3", "--no-progress"])
    assert rc == 0
    (detail,) = _events(run, "inference")
    model = load_aah_checkpoint(run / "checkpoints" / "step-00000003.pt").model
    T = model.cfg.block_size
    blocks = cut_blocks(np.frombuffer(TEXT.encode(), dtype=np.uint8).astype(np.int64), T)
    assert detail["n_batches"] == blocks.shape[0]
    assert detail["checkpoint_step"] == 3
    assert detail["val_loss"] == pytest.approx(_expected_loss(model, blocks), rel=1e-5)
    assert detail["val_ppl"] == pytest.approx(math.exp(detail["val_loss"]))
    # routing frozen as checkpointed: the executed windows are the checkpoint's, and ACR follows from them
    windows = model.current_windows().numpy()
    assert detail["windows"] == windows.tolist()
    assert detail["acr"] == pytest.approx(coverage.acr(windows, T, model.cfg.w_min))
    assert detail["acr_causal"] == pytest.approx(coverage.causal_coverage(windows, T))
    assert sum(detail["window_frac"].values()) == pytest.approx(1.0)
    assert detail["tokens_per_s"] > 0 and detail["elapsed_s"] > 0 and detail["peak_mem_mb"] > 0
    assert validate_run(run) == []
    rec = inference_record(load_run(run), model.cfg.windows)
    assert rec["source"] == "inference"
    assert rec["tokens_per_s"] == pytest.approx(detail["tokens_per_s"])
    assert rec["elapsed_s"] == pytest.approx(detail["elapsed_s"])


def test_reference_eval_lets_evaluation_change_routing(trained, tmp_path):
    run, data = trained
    out = tmp_path / "ref"
    main(["evaluate", str(run), "--data", str(data), "--out", str(out), "--reference-eval", "--no-progress"])
    (detail,) = _events(out, "inference")
    assert detail["routing"] == "reference_eval"
    frozen = tmp_path / "frozen"
    main(["evaluate", str(run), "--data", str(data), "--out", str(frozen), "--no-progress"])
    (kept,) = _events(frozen, "inference")
    ckpt_windows = load_aah_checkpoint(run / "checkpoints" / "step-00000007.pt").model.current_windows()
    assert kept["windows"] == ckpt_windows.tolist()
    # the reference-eval pass re-decided routing on the evaluation text at every forward; the frozen one never
    assert kept["routing_updates"] == 0
    assert detail["routing_updates"] == detail["n_batches"] * 2  # two layers
    manifest = load_run(frozen).manifest
    assert manifest["evaluation_of"] == str(run)
    # a new run from the step-7 checkpoint holds that one evaluation as its step 0, and validates
    assert manifest["evaluation_of_step"] == 7 and kept["checkpoint_step"] == 7
    assert set(load_run(frozen).table("heads")["step"]) == {0}
    assert validate_run(frozen) == [] and validate_run(out) == []


def test_window_fractions_are_over_the_windows_a_sliding_window_executed(tmp_path, capsys, tiny_causal_lm):
    qwen = tiny_causal_lm(tmp_path / "qwen", family="qwen3")
    data = tmp_path / "t.txt"
    data.write_text(TEXT[:400])
    out = tmp_path / "out"
    rc = main(
        ["evaluate", str(qwen), "--data", str(data), "--out", str(out), "--regime", "sliding_window"]
        + ["--window", "8", "--seq-len", "32", "--json", "--no-progress"]
    )
    assert rc == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1], parse_constant=_refuse)  # strict JSON
    # every head executed 8 tokens; the default candidates (512..4096, clamped to 128) were never executed
    assert printed["window_frac"] == {"8": 1.0}
    (detail,) = _events(out, "inference")
    assert detail["window_frac"] == {"8": 1.0}
    # the exported table has the executed window's column, with its fraction
    table = tmp_path / "table"
    assert main(["export", str(out), "--table", "inference", "--format", "csv", "--out", str(table)]) == 0
    row = pd.read_csv(table / "inference.csv").iloc[0]
    assert row["window_frac_8"] == pytest.approx(1.0)
    assert (
        main(
            ["export", str(out), "--table", "windows", "--windows-source", "inference"]
            + ["--format", "csv", "--out", str(tmp_path / "w")]
        )
        == 0
    )
    assert pd.read_csv(tmp_path / "w" / "windows.csv").iloc[0]["window_frac_8"] == pytest.approx(1.0)


def test_evaluate_a_hugging_face_model_folder(tmp_path, tiny_causal_lm):
    transformers = pytest.importorskip("transformers")
    tiny_causal_lm(tmp_path / "qwen", family="qwen3")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "qwen").eval()
    data = tmp_path / "t.txt"
    data.write_text(TEXT[:400])
    out = tmp_path / "out"
    rc = main(
        ["evaluate", str(tmp_path / "qwen"), "--data", str(data), "--out", str(out), "--regime", "full_attention"]
        + ["--windows", "16,32", "--batch-size", "2", "--no-progress"]
    )
    assert rc == 0
    (detail,) = _events(out, "inference")
    blocks = cut_blocks(np.frombuffer(TEXT[:400].encode(), dtype=np.uint8).astype(np.int64), 32)
    with torch.no_grad():
        logits = model(torch.from_numpy(blocks[:, :-1])).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 300), torch.from_numpy(blocks[:, 1:]).reshape(-1))
    assert detail["val_loss"] == pytest.approx(float(expected), rel=1e-5)
    assert detail["acr"] == 1.0 and detail["window_frac"] == {"16": 0.0, "32": 1.0}
    assert load_run(out).manifest["base_model"] == str(tmp_path / "qwen")


def test_evaluate_errors_are_one_line(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--data", "x.txt", "--out", str(tmp_path / "o")]) == 2
    assert "neither a run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--batches", "0"], "--batches must be an integer >= 1, got 0"),
        (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
        (["--batch-size", "-3"], "--batch-size must be an integer >= 1, got -3"),
    ],
)
def test_a_zero_count_is_named_as_such_not_as_a_short_text(trained, tmp_path, capsys, args, said):
    run, data = trained
    rc = main(["evaluate", str(run), "--data", str(data), "--out", str(tmp_path / "o"), "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and said in err and "tokens" not in err and len(err.splitlines()) == 1, err


def test_a_missing_text_is_named_without_advising_the_training_corpus(trained, tmp_path, capsys):
    run, _ = trained
    missing = tmp_path / "missing.txt"
    assert main(["evaluate", str(run), "--data", str(missing), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--data {missing} is not a file" in err and "synthetic" not in err and len(err.splitlines()) == 1, err
