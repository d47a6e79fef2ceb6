"""Routing scalars in the trainer's own logger: a Hugging Face ``Trainer`` with ``report_to=["tensorboard"]``
and a Lightning ``Trainer`` with a ``TensorBoardLogger``, each a few steps on a tiny model, read back with
TensorBoard's own reader and checked against the run directory."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard", reason="the report extra (tensorboard) is not installed")

from routing_expect import check_against_run, read_tensorboard  # noqa: E402
from test_integrations import BlockDataset  # noqa: E402  (tests/ is on sys.path under pytest)

from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402

pytestmark = pytest.mark.torch
STEPS = 8  # warm-up 3, then routing updates


def test_hf_trainer_reports_routing_to_tensorboard(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the hf extra)")
    from instrumentation.integrations.hf import AAHForCausalLM, AAHRoutingCallback

    logdir = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logdir))
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")
    model = AAHForCausalLM(AAHTransformer(cfg))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        logging_steps=2,
        report_to=["tensorboard"],
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-3,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    cb = AAHRoutingCallback(tmp_path / "hf-run", detail="full")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=BlockDataset(32, cfg.block_size))
    trainer.add_callback(cb)  # last, after report_to's TensorBoardCallback: it must still add its scalars first
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert names.index("TensorBoardCallback") < names.index("AAHRoutingCallback")
    trainer.train()
    assert trainer.callback_handler.callbacks[0] is cb
    logged = read_tensorboard(logdir, prefix="train/")
    # the Trainer logs at global_step g (g optimiser steps done); the recorder numbers that step g - 1
    checked = check_against_run(logged, tmp_path / "hf-run", step_of=lambda g: g - 1)
    assert checked == {1, 3, 5, 7}
    assert {"aah/acr", "aah/causal_coverage", "aah/controller_grad_norm", "aah/groups/l0"} <= set(logged)
    assert not any(k.startswith("aah/mean_window/") for k in logged)  # per-layer keys are off by default
    assert set(logged["loss"]) == set(logged["aah/acr"])  # on the Trainer's logging cadence, beside the loss


def test_lightning_reports_routing_to_every_logger(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from instrumentation.integrations.lightning import AAHRoutingCallback

    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = AAHTransformer(cfg)

        def training_step(self, batch, batch_idx):
            loss = self.model(batch["input_ids"], targets=batch["labels"]).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    tb = TensorBoardLogger(str(tmp_path / "tb"), name="pl", version=0)
    csv = CSVLogger(str(tmp_path / "csv"), name="pl", version=0)
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        callbacks=[AAHRoutingCallback(tmp_path / "pl-run", detail="full", report_layers=True)],
        logger=[tb, csv],
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    loader = torch.utils.data.DataLoader(BlockDataset(32, cfg.block_size), batch_size=2)
    trainer.fit(Module(), loader)
    logged = read_tensorboard(tmp_path / "tb" / "pl" / "version_0")
    # Lightning's loggers get the step index of the batch: the recorder's step
    checked = check_against_run(logged, tmp_path / "pl-run", step_of=lambda s: s, per_layer=True)
    assert checked == {1, 3, 5, 7}
    assert {f"aah/mean_window/layer{l:02d}" for l in range(cfg.n_layer)} <= set(logged)
    # the CSV logger received the same values: every attached logger does
    import csv as csv_mod

    with open(tmp_path / "csv" / "pl" / "version_0" / "metrics.csv") as f:
        rows = [r for r in csv_mod.DictReader(f) if r.get("aah/acr")]
    assert sorted(int(r["step"]) for r in rows) == sorted(checked)
    for r in rows:
        assert float(r["aah/acr"]) == pytest.approx(logged["aah/acr"][int(r["step"])], rel=1e-6)
