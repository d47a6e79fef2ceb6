"""Hugging Face ``transformers``: a ``TrainerCallback`` that records AAH routing.

    from instrumentation.integrations.hf import AAHForCausalLM, AAHRoutingCallback
    model = AAHForCausalLM(AAHTransformer(cfg))
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[AAHRoutingCallback("runs/hf-run", detail="full")])
    trainer.train()

The callback calls ``prepare_step(state.global_step)`` at the start of every training step (before
its forwards), closes one recorder step at its end (``global_step - 1``: the step just
completed), records the Trainer's logged loss and every evaluation's ``eval_loss``, and always
detaches at the end of training (use it as a context manager around ``trainer.train()`` to
detach on exceptions too: the Trainer calls no callback when training raises). Only the main
process writes.

Routing in the Trainer's own logs: on every training log (the Trainer's ``logging_steps``) the
callback adds the ``aah/`` scalars of the step just completed (``aah_viz.reporting.scalars``; per-layer
mean windows with ``report_layers=True``; none with ``report=False``) to the logged metrics, so
whatever ``report_to`` names receives them beside the loss. It moves itself to the front of the
Trainer's callback list when training begins, so it adds them before any reporting callback reads
the logs, whatever order the callbacks were given in. The full per-head detail stays in the run
directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler

from aah_viz.reporting.scalars import step_scalars
from instrumentation.integrations import find_aah_model, prepare_step
from instrumentation.recorder import RoutingRecorder
from instrumentation.recorder.recording import recording_and_options


class AAHForCausalLM(torch.nn.Module):
    """The Trainer-facing face of an ``AAHTransformer``: ``forward(input_ids, labels)`` -> dict.

    ``labels`` are the next-token targets aligned with ``input_ids`` (already shifted by one, as
    the T+1 blocks of ``instrumentation.data`` give them), so no shift happens here.
    """

    def __init__(self, aah: torch.nn.Module):
        super().__init__()
        self.aah = aah

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **_: Any) -> dict:
        out = self.aah(input_ids, targets=labels)
        return {"loss": out.loss, "logits": out.logits}


class AAHRoutingCallback(TrainerCallback):
    """Attach a ``RoutingRecorder`` for the length of ``Trainer.train()``."""

    def __init__(
        self,
        run_dir: str | Path,
        detail: str = "full",
        *,
        report: bool = True,
        report_layers: bool = False,
        **recorder_kwargs: Any,
    ):
        self.run_dir = Path(run_dir)
        self.detail = detail
        self.report = report
        self.report_layers = report_layers
        self.recorder_kwargs = recorder_kwargs
        self.recorder: RoutingRecorder | None = None
        self.aah: torch.nn.Module | None = None
        self._tokens = None

    def on_init_end(self, args, state, control, **kwargs):
        _move_first(self)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        _move_first(self)
        self.aah = find_aah_model(model)
        rank = 0 if state.is_world_process_zero else 1
        kwargs = dict(self.recorder_kwargs)
        kwargs.setdefault("steps", int(state.max_steps) if state.max_steps else None)
        kwargs.setdefault("seed", int(args.seed))
        kwargs.setdefault("manifest_extra", {"integration": "transformers.Trainer"})
        recording, options = recording_and_options(self.run_dir, self.detail, kwargs)
        self.recorder = RoutingRecorder(self.aah, recording, rank=rank, **options).attach()
        self._tokens = (
            args.per_device_train_batch_size
            * max(1, args.gradient_accumulation_steps)
            * int(self.aah.cfg.block_size)
            * max(1, args.world_size)
        )

    def on_step_begin(self, args, state, control, **kwargs):
        if self.aah is not None:
            prepare_step(self.aah, state.global_step)

    def on_step_end(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if self.recorder is None:
            return
        lr = None
        if lr_scheduler is not None:
            lr = float(lr_scheduler.get_last_lr()[0])
        elif optimizer is not None:
            lr = float(optimizer.param_groups[0]["lr"])
        self.recorder.step(int(state.global_step) - 1, lr=lr, tokens=self._tokens)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.recorder is not None and logs and "loss" in logs and state.global_step > 0:
            self.recorder.scalars(int(state.global_step) - 1, loss=float(logs["loss"]))
            if self.report and self.recorder.is_writer:
                rows = self.recorder.routing_rows()
                if rows is not None:
                    logs.update(step_scalars(rows, per_layer=self.report_layers))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.recorder is not None and metrics and "eval_loss" in metrics:
            self.recorder.eval(max(0, int(state.global_step) - 1), val_loss=float(metrics["eval_loss"]))

    def on_save(self, args, state, control, **kwargs):
        if self.recorder is not None:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.recorder.event(
                max(0, int(state.global_step) - 1), "checkpoint", path=str(path), framework="transformers"
            )

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def __enter__(self) -> AAHRoutingCallback:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """``with AAHRoutingCallback(...) as cb: trainer.train()`` detaches even when training raises."""
        self.close("failed" if exc_type is not None else None)

    def close(self, status: str | None = None) -> None:
        """Detach the recorder (also safe to call after an exception in ``trainer.train()``)."""
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            recorder.detach(status)


def _move_first(callback: TrainerCallback) -> None:
    """Put ``callback`` first in the list of the ``CallbackHandler`` calling it, so its ``on_log`` adds
    to the logs before the reporting callbacks (which ``report_to`` puts before the user's) read them.

    The handler is the caller's ``self`` a frame or two up; moving the running callback to the front
    while the handler iterates its list leaves every later callback called once.
    """
    frame = sys._getframe(1)
    for _ in range(4):
        frame = frame.f_back
        if frame is None:
            return
        handler = frame.f_locals.get("self")
        if isinstance(handler, CallbackHandler):
            callbacks = handler.callbacks
            if callbacks and callbacks[0] is not callback and callback in callbacks:
                callbacks.remove(callback)
                callbacks.insert(0, callback)
            return
