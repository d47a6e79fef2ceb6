"""``aah-viz retrofit``: adaptation of a patched random Hugging Face model, adapters, resume, evaluation."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aah_viz.cli import main  # noqa: E402
from aah_viz.importers.reference_csv import HEATMAP_COLUMNS  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.retrofit import load_adapter, read_adapter  # noqa: E402

pytestmark = pytest.mark.torch
TEXT = "Colourless green ideas sleep furiously. " * 60 + "A stitch in time saves nine. " * 60


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_causal_lm):
    root = tmp_path_factory.mktemp("retrofit")
    tiny_causal_lm(root / "qwen", family="qwen3")
    (root / "text.txt").write_text(TEXT)
    return root


def retrofit(base, out, *extra):
    args = ["retrofit", str(base / "qwen"), "--data", str(base / "text.txt"), "--out", str(out)]
    args += ["--windows", "8,16,32", "--eval-interval", "3", "--eval-batches", "1", "--no-progress", "--threads", "1"]
    return main(args + list(extra))


def fresh_base(base):
    return transformers.AutoModelForCausalLM.from_pretrained(base / "qwen").eval()


def test_retrofit_adapts_records_and_saves_adapters(base, tmp_path):
    out = tmp_path / "run"
    csv_path = tmp_path / "diag.csv"
    rc = retrofit(base, out, "--steps", "6", "--checkpoint-interval", "3", "--diagnostics-csv", str(csv_path))
    assert rc == 0
    assert validate_run(out) == []
    run = load_run(out)
    heads = run.table("heads")
    assert sorted(set(heads["step"])) == list(range(6))
    assert run.manifest["retrofit"]["train"] == "aah"
    assert sorted(p.name for p in (out / "adapters").glob("*.safetensors")) == [
        "step-00000002.safetensors",
        "step-00000005.safetensors",
    ]
    cfg, tensors, _, extra = read_adapter(out / "adapters" / "step-00000005.safetensors")
    assert cfg.controller_training == "soft_mixture" and extra == {"step": 5}
    assert all(k.startswith("layers.") for k in tensors)  # --train aah stores nothing of the base model
    # the adapter on a fresh base model restores the recorded routing of the last step
    handle = load_adapter(fresh_base(base), out / "adapters" / "step-00000005.safetensors")
    last = heads[heads["step"] == 5].sort_values(["layer", "head"])
    assert handle.current_windows().reshape(-1).tolist() == last["window"].tolist()
    # the controller moved away from its initialisation (it is what adapts)
    assert any(not torch.equal(p, q) for p, q in zip(handle.parameters(), handle.controller_initial_parameters()))
    with open(csv_path) as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert tuple(reader.fieldnames) == HEATMAP_COLUMNS  # the reference's heatmap, as import-reference reads it
    assert len(rows) == 2 * 4
    assert [int(r["final_window_size"]) for r in rows] == last["window"].tolist()
    assert [int(r["selected_window_size"]) for r in rows] == last["window"].tolist()
    assert [int(r["final_window_idx"]) for r in rows] == [[8, 16, 32].index(w) for w in last["window"]]


def test_probe_reads_a_retrofit_run_through_its_adapter(base, tmp_path):
    from instrumentation.measure.probe_extract import load_retrofit_adapter

    out = tmp_path / "run"
    assert retrofit(base, out, "--steps", "6", "--checkpoint-interval", "3") == 0
    source = load_retrofit_adapter(out / "adapters" / "step-00000005.safetensors", out)
    heads = load_run(out).table("heads")
    last = heads[heads["step"] == 5].sort_values(["layer", "head"])
    assert source.windows.reshape(-1).tolist() == last["window"].tolist()  # the patched model, as recorded
    assert source.candidate_windows == (8, 16, 32)
    att = source.attend([list(range(40, 60))])[0]  # (L, H, T, T) from the patched attention
    T = att.shape[-1]
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    for layer in range(2):
        for head in range(4):
            assert (att[layer, head][i - j >= source.windows[layer, head]] == 0).all()
    assert main(["probe", str(out), "--max-docs", "2", "--no-progress", "--threads", "1"]) == 0
    probed = load_run(out).table("probe_heads")
    assert set(probed["step"]) == {5} and len(probed[["layer", "head"]].drop_duplicates()) == 2 * 4


def test_resume_continues_exactly(base, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert retrofit(base, straight, "--steps", "6", "--checkpoint-interval", "3") == 0
    # a run stopped after its step-2 adapter: the straight run without its last adapter
    shutil.copytree(straight, resumed)
    for path in (resumed / "adapters").glob("step-00000005*"):
        path.unlink()
    assert retrofit(base, resumed, "--steps", "6", "--checkpoint-interval", "3", "--resume") == 0
    _, a, _, _ = read_adapter(straight / "adapters" / "step-00000005.safetensors")
    _, b, _, _ = read_adapter(resumed / "adapters" / "step-00000005.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    ha, hb = load_run(straight).table("heads"), load_run(resumed).table("heads")
    assert (
        ha.sort_values(["step", "layer", "head"])["window"].tolist()
        == hb.sort_values(["step", "layer", "head"])["window"].tolist()
    )


def test_aah_plus_head_trains_and_stores_the_head(base, tmp_path):
    out = tmp_path / "head"
    assert retrofit(base, out, "--steps", "2", "--train", "aah+head", "--lr", "1e-2") == 0
    _, tensors, _, _ = read_adapter(out / "adapters" / "step-00000001.safetensors")
    assert [k for k in tensors if k.startswith("model.")] == ["model.lm_head.weight"]
    model = fresh_base(base)
    before = model.lm_head.weight.detach().clone()
    load_adapter(model, out / "adapters" / "step-00000001.safetensors")
    assert not torch.equal(model.lm_head.weight, before)
    assert torch.equal(model.lm_head.weight, tensors["model.lm_head.weight"])


def test_evaluate_a_retrofit_run(base, tmp_path):
    out = tmp_path / "run"
    assert retrofit(base, out, "--steps", "2") == 0
    args = ["evaluate", str(out), "--data", str(base / "text.txt"), "--out", str(out), "--no-progress"]
    assert main(args + ["--threads", "1"]) == 0
    ev = load_run(out).events()
    (detail,) = [json.loads(d) for d in ev.loc[ev["kind"] == "inference", "detail"]]
    assert detail["checkpoint_step"] == 1 and detail["tokens_per_s"] > 0
    assert 0 < detail["acr"] <= 1
    assert detail["threads"] == 1 == torch.get_num_threads()


def test_bench_retrofit_reports_paired_ratios_and_the_windows(capsys):
    rc = main(["bench", "retrofit", "--seq-len", "64", "--head-dim", "8", "--layers", "2", "--pairs", "2", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["ratios"]) == {
        "paper_mix_vs_unpatched",
        "live_routing_vs_unpatched",
        "full_attention_patch_vs_unpatched",
        "soft_mixture_step_vs_unpatched",
        "paper_mix_forward_vs_unpatched",
        "full_attention_patch_forward_vs_unpatched",
    }
    assert doc["soft_mixture_backends_seen"] == ["banded+soft_mixture"]  # the step retrofit trains with
    for name, fig in doc["ratios"].items():
        raw = doc["raw_s"][name][doc["clock"]]
        side = name.removesuffix("_vs_unpatched")
        base = "unpatched_forward" if side.endswith("_forward") else "unpatched"  # like against like
        ratios = sorted(a / b for a, b in zip(raw[side], raw[base]))
        assert fig["n_pairs"] == 2
        assert fig["median"] == pytest.approx((ratios[0] + ratios[1]) / 2, rel=1e-3)
    assert doc["paper_mix"] == [8] * 5 + [16, 32, 64]  # 8 heads: 5 x T/8, then T/4, T/2, T
    assert all(w in (8, 16, 32, 64) for row in doc["live_routing_windows"] for w in row)
    assert sum(doc["live_routing_window_share"].values()) == pytest.approx(1.0)


def test_bench_retrofit_times_a_model_folder_in_its_own_shape(base, capsys):
    cmd = ["bench", "retrofit", "--model", str(base / "qwen"), "--seq-len", "32", "--pairs", "2", "--json"]
    assert main(cmd) == 0
    doc = json.loads(capsys.readouterr().out)
    config = transformers.AutoConfig.from_pretrained(base / "qwen")
    shape = (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.head_dim)
    got = doc["config"]
    assert (got["n_layer"], got["n_head"], got["n_kv_head"], got["head_dim"]) == shape  # not the 4x8x4x64 default
    assert got["model"] == str(base / "qwen")
    assert len(doc["paper_mix"]) == config.num_attention_heads
    assert len(doc["live_routing_windows"]) == config.num_hidden_layers


def test_bench_retrofit_refuses_a_folder_without_a_model(tmp_path, capsys):
    assert main(["bench", "retrofit", "--model", str(tmp_path), "--seq-len", "32", "--pairs", "2"]) == 2
    assert "config.json" in capsys.readouterr().err


class _Texts(torch.utils.data.Dataset):
    def __init__(self, n, seq_len, vocab):
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_hf_trainer_callback_records_a_patched_model(base, tmp_path):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the hf extra)")
    from instrumentation.integrations.hf import AAHRoutingCallback
    from instrumentation.retrofit import patch_model

    model = fresh_base(base)
    handle = patch_model(model, "full_adaptive", (8, 16, 32), controller_training="soft_mixture")
    handle.train_parameters("aah")
    before = [p.detach().clone() for p in handle.parameters()]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"),
        max_steps=4,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-2,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    with AAHRoutingCallback(tmp_path / "hf-run", detail="full") as cb:
        transformers.Trainer(model=model, args=args, train_dataset=_Texts(8, 32, 300), callbacks=[cb]).train()
    assert validate_run(tmp_path / "hf-run") == []
    heads = load_run(tmp_path / "hf-run").table("heads")
    assert sorted(set(heads["step"])) == [0, 1, 2, 3]
    assert len(heads) == 4 * 2 * 4
    assert any(not torch.equal(a, b) for a, b in zip(before, handle.parameters()))  # the AAH parameters adapted


def test_lightning_callback_records_a_patched_model(base, tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from instrumentation.integrations.lightning import AAHRoutingCallback
    from instrumentation.retrofit import patch_model

    model = fresh_base(base)
    handle = patch_model(model, "full_adaptive", (8, 16, 32), controller_training="soft_mixture")
    handle.train_parameters("aah")
    model.train()  # Lightning keeps the mode a module starts in

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"], use_cache=False).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(handle.parameters(), lr=1e-2)

    loader = torch.utils.data.DataLoader(_Texts(8, 32, 300), batch_size=2)
    trainer = pl.Trainer(
        max_steps=4,
        accelerator="cpu",
        devices=1,
        callbacks=[AAHRoutingCallback(tmp_path / "pl-run", detail="full")],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loader)
    assert validate_run(tmp_path / "pl-run") == []
    heads = load_run(tmp_path / "pl-run").table("heads")
    assert sorted(set(heads["step"])) == [0, 1, 2, 3]
    last = heads[heads["step"] == 3].sort_values(["layer", "head"])
    assert last["window"].tolist() == handle.current_windows().reshape(-1).tolist()  # what the model executed


@pytest.mark.slow  # two processes under torchrun (about a minute); train's twin runs by default
def test_torchrun_two_ranks_one_run_identical_windows(base, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(repo))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "aah_viz"]
    cmd += ["retrofit", str(base / "qwen"), "--data", str(base / "text.txt"), "--out", str(out), "--steps", "6"]
    cmd += ["--windows", "8,16,32", "--eval-interval", "3", "--eval-batches", "1", "--no-progress", "--threads", "1"]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validate_run(out) == []
    run = load_run(out)
    assert run.manifest["retrofit"]["world_size"] == 2
    assert run.manifest["distributed"]["divergent_steps"] == []
    assert "rank_divergence" not in set(run.table("events")["kind"])
    heads = run.table("heads")
    assert sorted(heads["step"].unique()) == list(range(6)) and not heads.duplicated(["step", "layer", "head"]).any()
    assert (heads["window"] < 32).any()  # routing narrowed windows, so agreement means something


def _event(run_dir, kind):
    ev = load_run(run_dir).events()
    (detail,) = [json.loads(d) for d in ev.loc[ev["kind"] == kind, "detail"]]
    return detail


def test_evaluate_and_profile_of_a_later_adapter_write_runs_that_validate(base, tmp_path):
    """A new --out run holds one step (0) and names the source's step; validate and the dashboard accept it."""
    from aah_viz.runlog.damage import damage_warnings

    run = tmp_path / "run"
    assert retrofit(base, run, "--steps", "3") == 0  # its adapter is at step 2
    data = str(base / "text.txt")
    evaluated, profiled = tmp_path / "evaluated", tmp_path / "profiled"
    assert main(["evaluate", str(run), "--data", data, "--out", str(evaluated), "--batches", "1", "--no-progress"]) == 0
    assert main(["profile", str(run), "--data", data, "--out", str(profiled), "--batches", "1"]) == 0
    for out, kind in ((evaluated, "inference"), (profiled, "profile")):
        assert validate_run(out) == []
        r = load_run(out)
        assert damage_warnings(r) == []
        assert set(r.table("heads")["step"]) == {0}
        assert r.manifest["evaluation_of"] == str(run) and r.manifest["evaluation_of_step"] == 2
        assert _event(out, kind)["checkpoint_step"] == 2
    assert set(load_run(profiled).table("head_spans")["step"]) == {0}


def test_a_never_trained_model_folder_records_the_windows_it_executed(base, tmp_path):
    """A patched folder without routing state decides its windows at each forward: the run records those
    (the heads table, the profile's executed windows), not the full windows it never executed."""
    data = str(base / "text.txt")
    model = str(base / "qwen")
    evaluated, profiled = tmp_path / "evaluated", tmp_path / "profiled"
    common = ["--data", data, "--windows", "8,16,32", "--batches", "1"]
    assert main(["evaluate", model, *common, "--out", str(evaluated), "--no-progress"]) == 0
    assert main(["profile", model, *common, "--out", str(profiled)]) == 0
    executed = _event(evaluated, "inference")["windows"]  # from the routing events of the forward
    assert any(w < 32 for row in executed for w in row)  # routing narrowed windows: the check means something
    heads = load_run(evaluated).table("heads").sort_values(["layer", "head"])
    assert heads["window"].tolist() == [w for row in executed for w in row]
    spans = load_run(profiled).table("head_spans")
    spans = spans[spans["window"] == 8].sort_values(["layer", "head"])
    assert spans["executed_window"].tolist() == [w for row in executed for w in row]


def test_a_moved_retrofit_run_finds_its_base_model_or_takes_model(base, tmp_path):
    """The base model is recorded relative to the run: run and model moved together still load; a model
    moved alone is named as the user gave it, and --model points at its new place."""
    root = tmp_path / "project"
    shutil.copytree(base / "qwen", root / "models" / "qwen")
    run = root / "runs" / "r"
    args = ["retrofit", str(root / "models" / "qwen"), "--data", str(base / "text.txt"), "--out", str(run)]
    assert main(args + ["--windows", "8,16,32", "--steps", "1", "--no-progress", "--threads", "1"]) == 0
    assert load_run(run).manifest["base_model"] == "../../models/qwen"
    moved = tmp_path / "moved"
    shutil.move(root, moved)
    data = str(base / "text.txt")
    run = moved / "runs" / "r"
    evaluate = ["evaluate", str(run), "--data", data, "--batches", "1", "--no-progress"]
    assert main(evaluate + ["--out", str(tmp_path / "e1")]) == 0
    shutil.move(moved / "models" / "qwen", tmp_path / "elsewhere")
    assert main(evaluate + ["--out", str(tmp_path / "e2")]) == 2
    assert main(evaluate + ["--out", str(tmp_path / "e3"), "--model", str(tmp_path / "elsewhere")]) == 0
    assert _event(tmp_path / "e3", "inference")["checkpoint_step"] == 0
    probe = ["probe", str(run), "--no-progress", "--bootstrap", "5", "--max-docs", "2"]
    assert main(probe) == 2  # the recorded base model is gone
    assert main(probe + ["--model", str(tmp_path / "elsewhere")]) == 0
    assert "probe_heads" in load_run(run).tables()


def test_a_moved_base_model_is_one_clear_line(base, tmp_path, capsys):
    root = tmp_path / "project"
    shutil.copytree(base / "qwen", root / "qwen")
    run = tmp_path / "run"
    args = ["retrofit", str(root / "qwen"), "--data", str(base / "text.txt"), "--out", str(run)]
    assert main(args + ["--windows", "8,16,32", "--steps", "1", "--no-progress", "--threads", "1"]) == 0
    shutil.rmtree(root)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--data", str(base / "text.txt"), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert str(root / "qwen") in err and "--model" in err
    assert main(["profile", str(tmp_path / "run"), "--data", "x", "--out", str(tmp_path / "p"), "--model", "nope"]) == 2
    assert "--model nope is not a Hugging Face model folder" in capsys.readouterr().err


def test_default_windows_beyond_the_models_positions_are_clamped_and_said(base, tmp_path, capsys):
    """The base model has 128 positions: the paper's default windows (up to 4096) become 128, with a message."""
    out = tmp_path / "out"
    args = ["evaluate", str(base / "qwen"), "--data", str(base / "text.txt"), "--out", str(out), "--batches", "1"]
    with pytest.warns(UserWarning, match="windows 512, 1024, 2048, 4096 exceed the model's 128 positions"):
        assert main(args + ["--no-progress"]) == 0
    detail = _event(out, "inference")
    assert detail["seq_len"] == 128 and detail["window_frac"] == {"128": 1.0}


def test_a_warm_up_that_trains_nothing_is_a_step_not_a_crash(base, tmp_path):
    """With --train aah, a warm-up step's loss depends on no trained parameter (routing waits): the step is
    recorded and nothing moves; the controller trains from the first step after it."""
    out = tmp_path / "run"
    assert retrofit(base, out, "--steps", "3", "--set", "warmup_steps=1", "--set", "control_interval=1") == 0
    assert validate_run(out) == []
    run = load_run(out)
    assert sorted(set(run.scalar("loss")["step"])) == [0, 1, 2]
    handle = load_adapter(fresh_base(base), sorted((out / "adapters").glob("*.safetensors"))[-1])
    assert any(not torch.equal(p, q) for p, q in zip(handle.parameters(), handle.controller_initial_parameters()))
