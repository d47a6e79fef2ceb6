"""PyTorch Lightning: a ``Callback`` that records AAH routing.

    from instrumentation.integrations.lightning import AAHRoutingCallback
    trainer = lightning.Trainer(max_steps=100, callbacks=[AAHRoutingCallback("runs/pl-run")])
    trainer.fit(module)     # module: a LightningModule holding the AAHTransformer (as .model/.aah or itself)

The callback calls ``prepare_step(trainer.global_step)`` before every training batch, closes one
recorder step per optimiser step (``global_step - 1`` after it advanced; gradient accumulation
gives one recorded step per optimiser step), takes the loss from ``training_step``'s output,
records ``val_loss`` when the module logs it, and detaches at the end of fitting and on any
exception. Only global rank 0 writes.

Routing in every attached logger: on the steps the Trainer sends metrics to its loggers
(``log_every_n_steps``), the callback logs the ``aah/`` scalars of the step just completed with
``log_dict`` (``aah_viz.reporting.scalars``; per-layer mean windows with ``report_layers=True``; none
with ``report=False``), so TensorBoard, W&B, MLflow or any other logger receives them at the
recorder's step number. The full per-head detail stays in the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - the older package name
    import pytorch_lightning as pl

import torch

from aah_viz.reporting.scalars import step_scalars
from instrumentation.integrations import find_aah_model, prepare_step
from instrumentation.recorder import RoutingRecorder
from instrumentation.recorder.recording import recording_and_options


def _loss_of(outputs: Any) -> torch.Tensor | None:
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return None


def _logs_now(trainer) -> bool:
    """Will the Trainer send this step's metrics to its loggers? (Its own test, after the optimiser step:
    every ``log_every_n_steps`` optimiser steps, and when it stops.)"""
    every = int(trainer.log_every_n_steps or 0)
    if every <= 0 or not trainer.loggers:
        return False
    return int(trainer.global_step) % every == 0 or bool(trainer.should_stop)


class AAHRoutingCallback(pl.Callback):
    """Attach a ``RoutingRecorder`` for the length of ``trainer.fit``."""

    def __init__(
        self,
        run_dir: str | Path,
        detail: str = "full",
        val_metric: str = "val_loss",
        *,
        report: bool = True,
        report_layers: bool = False,
        **recorder_kwargs: Any,
    ):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.detail = detail
        self.report = report
        self.report_layers = report_layers
        self.val_metric = val_metric
        self.recorder_kwargs = recorder_kwargs
        self.recorder: RoutingRecorder | None = None
        self.aah: torch.nn.Module | None = None
        self._recorded_step = -1

    def on_fit_start(self, trainer, pl_module) -> None:
        self.aah = find_aah_model(pl_module)
        kwargs = dict(self.recorder_kwargs)
        kwargs.setdefault("steps", int(trainer.max_steps) if trainer.max_steps and trainer.max_steps > 0 else None)
        kwargs.setdefault("manifest_extra", {"integration": "lightning.Trainer"})
        recording, options = recording_and_options(self.run_dir, self.detail, kwargs)
        self.recorder = RoutingRecorder(self.aah, recording, rank=int(trainer.global_rank), **options).attach()
        self._recorded_step = int(trainer.global_step) - 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.aah is not None:
            prepare_step(self.aah, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.recorder is None:
            return
        step = int(trainer.global_step) - 1
        if step <= self._recorded_step:  # no optimiser step yet (gradient accumulation)
            return
        self._recorded_step = step
        lr = None
        if trainer.optimizers:
            lr = float(trainer.optimizers[0].param_groups[0]["lr"])
        tokens = None
        x = (
            batch[0]
            if isinstance(batch, (list, tuple))
            else batch.get("input_ids")
            if isinstance(batch, dict)
            else batch
        )
        if isinstance(x, torch.Tensor):
            tokens = int(x.numel()) * int(trainer.accumulate_grad_batches) * int(trainer.world_size)
        loss = _loss_of(outputs)
        self.recorder.step(step, loss=loss, lr=lr, tokens=tokens)
        if self.report and _logs_now(trainer):
            rows = self.recorder.routing_rows() if self.recorder.is_writer else None
            scalars = step_scalars(rows, per_layer=self.report_layers) if rows is not None else {}
            if scalars:
                pl_module.log_dict(scalars, on_step=True, on_epoch=False, rank_zero_only=True, batch_size=1)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self.recorder is None or trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.val_metric)
        if value is not None:
            self.recorder.eval(max(0, int(trainer.global_step) - 1), val_loss=float(value))

    def on_fit_end(self, trainer, pl_module) -> None:
        self.close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.close("failed")

    def close(self, status: str | None = None) -> None:
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            recorder.detach(status)
