"""The Hugging Face TrainerCallback and the Lightning Callback, each on a real tiny run."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402

pytestmark = pytest.mark.torch
STEPS = 6  # warm-up 3 + one post-warm-up routing update at step 3


class BlockDataset(torch.utils.data.Dataset):
    def __init__(self, n, seq_len, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.blocks = torch.randint(0, 256, (n, seq_len + 1), generator=gen)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        b = self.blocks[i]
        return {"input_ids": b[:-1], "labels": b[1:]}


def _check_run(run_dir, cfg, steps):
    assert validate_run(run_dir) == []
    run = load_run(run_dir)
    assert run.manifest["status"] == "finished"
    heads = run.table("heads")
    assert sorted(heads["step"].unique()) == list(range(steps))
    assert len(heads) == steps * cfg.n_layer * cfg.n_head
    events = run.table("events")
    upd = events[events["kind"] == "routing_update"]
    # set_step reached the model before every forward: the first applied update is at the warm-up end
    assert cfg.warmup_steps in set(upd["step"])
    assert (events["kind"] == "warmup_end").sum() == 1
    warm = heads[heads["step"] < cfg.warmup_steps]
    assert (warm["window"] == cfg.block_size).all()
    return run


def test_hf_trainer_callback(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the hf extra)")
    from instrumentation.integrations.hf import AAHForCausalLM, AAHRoutingCallback

    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    model = AAHForCausalLM(AAHTransformer(cfg))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        eval_strategy="steps",
        eval_steps=5,
        per_device_eval_batch_size=2,
        learning_rate=1e-3,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    with AAHRoutingCallback(tmp_path / "hf-run", detail="full") as cb:
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=BlockDataset(16, cfg.block_size),
            eval_dataset=BlockDataset(4, cfg.block_size, seed=1),
            callbacks=[cb],
        )
        trainer.train()
    assert not any(layer.has_subscribers for layer in model.aah.aah_layers())
    run = _check_run(tmp_path / "hf-run", cfg, STEPS)
    sc = run.table("scalars")
    loss = sc[sc["name"] == "loss"].sort_values("step")
    assert list(loss["step"]) == list(range(STEPS)) and np.isfinite(loss["value"]).all()
    lr = sc[sc["name"] == "lr"]
    assert len(lr) == STEPS and (lr["value"] >= 0).all()
    assert 4 in set(sc[sc["name"] == "val_loss"]["step"])
    assert run.manifest["integration"] == "transformers.Trainer"


def test_hf_callback_detaches_when_training_raises(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the hf extra)")
    from instrumentation.integrations.hf import AAHForCausalLM, AAHRoutingCallback

    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    inner = AAHTransformer(cfg)

    class Exploding(AAHForCausalLM):
        def forward(self, input_ids, labels=None, **kw):
            if self.aah.h[0].attn.step == 2:
                raise RuntimeError("boom at step 2")
            return super().forward(input_ids, labels=labels)

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "o"),
        max_steps=5,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    with pytest.raises(RuntimeError, match="boom"):
        with AAHRoutingCallback(tmp_path / "run") as cb:
            transformers.Trainer(
                model=Exploding(inner), args=args, train_dataset=BlockDataset(8, cfg.block_size), callbacks=[cb]
            ).train()
    assert not any(layer.has_subscribers for layer in inner.aah_layers())
    run = load_run(tmp_path / "run")
    assert run.manifest["status"] == "failed"
    assert sorted(run.table("heads")["step"].unique()) == [0, 1]


def test_lightning_callback(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from instrumentation.integrations.lightning import AAHRoutingCallback

    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="shallow_freeze")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = AAHTransformer(cfg)

        def training_step(self, batch, batch_idx):
            return self.model(batch["input_ids"], targets=batch["labels"]).loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.model(batch["input_ids"], targets=batch["labels"]).loss)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.1)

    module = Module()
    loader = torch.utils.data.DataLoader(BlockDataset(16, cfg.block_size), batch_size=2)
    val = torch.utils.data.DataLoader(BlockDataset(4, cfg.block_size, seed=1), batch_size=2)
    cb = AAHRoutingCallback(tmp_path / "pl-run", detail="light")
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        callbacks=[cb],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        val_check_interval=5,
        num_sanity_val_steps=0,
        limit_val_batches=1,
    )
    trainer.fit(module, loader, val)
    assert not any(layer.has_subscribers for layer in module.model.aah_layers())
    run = _check_run(tmp_path / "pl-run", cfg, STEPS)
    sc = run.table("scalars")
    assert list(sc[sc["name"] == "loss"].sort_values("step")["step"]) == list(range(STEPS))
    assert "val_loss" in set(sc["name"])
    assert (run.table("events")["kind"] == "freeze").sum() == cfg.n_layer


def test_a_control_off_run_through_the_lightning_callback_matches_aah_viz_train(tmp_path):
    """The callback prepares every step as ``aah-viz train`` does (set_step, then set_control), so with
    control off (the hierarchy rebuilt every step) the same data, schedule and seed give the same run."""
    pl = pytest.importorskip("lightning.pytorch")
    from aah_viz.cli import main
    from instrumentation import data as data_mod
    from instrumentation.integrations.lightning import AAHRoutingCallback
    from instrumentation.training.schedule import lr_multiplier

    steps, batch, lr, seed, n_docs = 12, 2, 1e-3, 5, 24
    train_dir = tmp_path / "train"
    args = ["train", "--out", str(train_dir), "--preset", "tiny", "--regime", "control_off", "--steps", str(steps)]
    args += ["--seed", str(seed), "--batch-size", str(batch), "--lr", str(lr), "--lr-warmup", "3", "--n-docs"]
    args += [str(n_docs), "--eval-interval", str(steps), "--keep-checkpoints", "0", "--no-progress"]
    assert main([*args, "--set", "warmup_steps=2", "--set", "control_interval=2"]) == 0
    cfg = load_run(train_dir).manifest["config"]
    assert cfg["apply_window_control"] is False

    # the same run written as a user would in Lightning: the project's batches and schedule
    tokens = data_mod.load_token_stream(data_mod.SYNTHETIC, seed=0, n_docs=n_docs)
    splits = data_mod.split_blocks(tokens, cfg["block_size"], val_fraction=0.1, min_val_blocks=min(4 * batch, 64))

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(seed)
            self.model = AAHTransformer(AAHConfig.from_dict(cfg))

        def training_step(self, unused, batch_idx):
            x, y = data_mod.training_batch(splits, self.global_step, batch, seed=seed)
            return self.model(x, targets=y).loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.1)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_multiplier(s, 3, steps))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[AAHRoutingCallback(tmp_path / "pl", detail="light")],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(Module(), torch.utils.data.DataLoader(BlockDataset(steps, 8), batch_size=1))
    cols = ["step", "layer", "head", "window", "group_l0"]
    ours = load_run(tmp_path / "pl").table("heads", columns=cols).sort_values(cols[:3]).reset_index(drop=True)
    ref = load_run(train_dir).table("heads", columns=cols).sort_values(cols[:3]).reset_index(drop=True)
    assert ours["step"].max() == steps - 1
    assert ours.equals(ref)
    loss = {}
    for name, d in (("pl", tmp_path / "pl"), ("train", train_dir)):
        sc = load_run(d).table("scalars")
        loss[name] = sc[sc["name"] == "loss"].sort_values("step")["value"].to_numpy()
    assert np.allclose(loss["pl"], loss["train"], rtol=1e-5, atol=1e-6)
