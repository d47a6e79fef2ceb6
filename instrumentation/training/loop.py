"""The training loop of ``aah-viz train`` and ``aah-viz retrofit``, with the recorder attached.

One step: the learning rate of the schedule, ``prepare_step(step)`` (set_step + set_control, as the
reference trainer does), the step's deterministic batch, forward, a non-finite loss refused before
anything trains on it, backward, gradients averaged over ranks, an optional gradient-norm clip, the
optimizer step, the step's rows. Then, on their cadences: the ranks' windows compared, evaluation
(rank 0, dropout off), a checkpoint (rank 0; written after the rows of its step are on disk).

What differs between the two commands is handed in as a ``Loop``: the model and its routed layers,
what trains, the loss, how a checkpoint is saved, and the recorder's run description
(``Recording``). Resuming is theirs too (their checkpoint formats differ): they load the newest
checkpoint and pass the first step to run and the step the recorded rows are kept through.

Step numbering: step ``s`` is the (s+1)-th optimiser step; the model sees ``set_step(s)``, i.e. the
number of optimiser steps already completed. A checkpoint of step S holds the state after step S;
a resume continues at S + 1 after dropping every recorded row past S.

Reporting (``Loop.report``, ``--report-to``): on rank 0, the ``aah/`` scalars with the loss and
learning rate every ``every`` steps and at the last step, each evaluation's loss, and the window
heatmap every ``images`` routing updates, to TensorBoard (``<run>/tensorboard``), W&B or MLflow
(``aah_viz.reporting``). They read the recorder's last closed step, so the values are the run's.

A SIGTERM (single process) ends the loop after the current step: its rows and a checkpoint are
saved, a ``terminated`` event is written and the run is closed as ``stopped``, ready to resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aah_viz.errors import TrainingError
from aah_viz.reporting.reporter import Reporter, ReportSettings
from aah_viz.reporting.sinks import open_sinks
from aah_viz.runlog.paths import TENSORBOARD_DIR, run_entry
from aah_viz.stop import StopRequest
from instrumentation import data as data_mod
from instrumentation.recorder import Recording, RoutingRecorder
from instrumentation.training.distributed import Dist, average_gradients, ranks_agree, routing_sync
from instrumentation.training.schedule import lr_multiplier, set_lr


class StoppedBySignal(TrainingError):
    """A signal ended the loop after a step (its rows and checkpoint saved): the run closes as ``stopped``."""

    closes_run_as = "stopped"


@dataclass
class Loop:
    """One run of the loop: the model, what trains, the data, the cadences and the checkpoint writer."""

    module: torch.nn.Module  # what train() / eval() switch
    routed: Any  # its RoutedLayers: prepare_step, windows, feature reducer, routing events
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (inputs, targets) -> mean loss
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]  # what trains: averaged over ranks, clipped
    splits: data_mod.BlockSplits
    batch_size: int  # per rank
    seed: int  # of the batch order
    dist: Dist
    device: str
    steps: int
    first_step: int
    lr: float
    lr_warmup: int
    eval_interval: int
    eval_batches: int
    checkpoint_interval: int  # 0: only at the end (and on a stop)
    keep_checkpoints: int  # 0: no checkpoint at all
    checkpoint_path: Callable[[int], Path]
    save_checkpoint: Callable[[int, RoutingRecorder], None]  # writes the step's checkpoint, prunes old ones
    resume_hint: str  # how the user continues a stopped run
    progress: bool
    progress_desc: str
    grad_clip: float = 0.0  # max gradient norm; 0: no clip (the reference trainer's)
    sync_mode: str = "mean"  # "mean": routing inputs averaged over ranks; "off"
    on_open: Callable[[RoutingRecorder], None] | None = None  # first records once the run is open
    report: ReportSettings | None = None  # routing to TensorBoard / W&B / MLflow (rank 0)


@dataclass
class LoopResult:
    last_loss: float | None
    last_val: float | None


def check_loss(loss: torch.Tensor, step: int, lr: float, rec: RoutingRecorder) -> None:
    """A non-finite loss ends the run as failed, with an event naming the step (nothing is trained on it)."""
    if bool(torch.isfinite(loss.detach())):
        return
    value = float(loss.detach())
    rec.event(step, "non_finite_loss", value=str(value), lr=lr)
    raise TrainingError(
        f"the loss is {value} at step {step} (learning rate {lr:.3g}); the run is closed as failed "
        "(lower --lr, or resume from an earlier checkpoint)"
    )


@torch.no_grad()
def validation_loss(loop: Loop, step: int) -> float | None:
    """Mean loss over the first ``eval_batches`` validation batches, dropout off, on this rank alone."""
    was_training = loop.module.training
    loop.module.eval()
    losses = []
    routing_sync.paused = True
    try:
        loop.routed.set_step(step)
        for x, y in data_mod.validation_batches(loop.splits, loop.eval_batches, loop.batch_size, device=loop.device):
            losses.append(float(loop.loss(x, y)))
    finally:
        routing_sync.paused = False
        loop.module.train(was_training)
    return sum(losses) / len(losses) if losses else None


def progress_bar(total: int, initial: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit="step", dynamic_ncols=True)


def train_step(loop: Loop, rec: RoutingRecorder, step: int) -> torch.Tensor:
    """One optimiser step and its recorded rows; returns the step's loss."""
    dist = loop.dist
    lr = loop.lr * lr_multiplier(step, loop.lr_warmup, loop.steps)
    set_lr(loop.optimizer, lr)
    loop.module.train()
    loop.routed.prepare_step(step)  # set_step + set_control, as the reference trainer does
    x, y = data_mod.training_batch(
        loop.splits,
        step,
        loop.batch_size,
        seed=loop.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        device=loop.device,
    )
    loop.optimizer.zero_grad(set_to_none=True)
    loss = loop.loss(x, y)
    check_loss(loss, step, lr, rec)
    # a step whose loss depends on no trained parameter (a retrofit's warm-up trains only the AAH parameters,
    # which routing does not use yet) has nothing to learn: it is recorded, nothing moves
    if loss.requires_grad:
        loss.backward()
        if dist.active:
            average_gradients(loop.params, dist.world_size)
        if loop.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(loop.params, loop.grad_clip)
        loop.optimizer.step()
    rec.step(step, loss=loss, lr=lr, tokens=loop.batch_size * loop.splits.seq_len * dist.world_size)
    return loss


def open_reporter(loop: Loop, recording: Recording, rec: RoutingRecorder) -> Reporter | None:
    """The run's reporter on rank 0 when ``--report-to`` names any target (None otherwise)."""
    settings = loop.report
    if settings is None or not settings.targets or loop.dist.rank != 0:
        return None
    manifest = rec.writer.manifest if rec.writer is not None else {}
    run_name = str(manifest.get("run_id") or recording.run_dir.name)
    config = {
        "run_dir": str(recording.run_dir),
        "regime": manifest.get("regime"),
        "seed": recording.seed,
        "preset": recording.preset,
        "steps": recording.steps,
    }
    resumed = recording.resume_from_step is not None
    sinks = open_sinks(
        settings.targets,
        tensorboard_dir=run_entry(recording.run_dir, TENSORBOARD_DIR),
        run_name=run_name,
        config=config,
        first_step=loop.first_step if resumed else None,
    )
    return Reporter(settings, sinks)


def report_step(
    loop: Loop, reporter: Reporter, rec: RoutingRecorder, step: int, loss: torch.Tensor, last: bool
) -> None:
    """The step's scalars on the reporting cadence; the heatmap when enough routing updates went by."""
    if reporter.due(step, last):
        lr = loop.lr * lr_multiplier(step, loop.lr_warmup, loop.steps)
        reporter.scalars(step, rec.routing_rows(), **{"train/loss": float(loss.detach()), "train/lr": lr})
    if reporter.image_due(rec.routing_update_steps):
        rows = rec.routing_rows()
        if rows is not None:
            reporter.image(step, rows, rec.routing_update_steps)


def run_loop(loop: Loop, recording: Recording) -> LoopResult:
    """Run steps ``first_step .. steps - 1`` with the recorder attached; see the module docstring."""
    dist = loop.dist
    recorder = RoutingRecorder(loop.routed, recording, rank=dist.rank)
    sync = routing_sync(loop.routed, dist.world_size if loop.sync_mode == "mean" else 1)
    result = LoopResult(None, None)
    divergent_steps: list[int] = []
    with sync, recorder as rec, StopRequest(enabled=not dist.active) as stop:
        if loop.on_open is not None:
            loop.on_open(rec)
        reporter = open_reporter(loop, recording, rec)
        bar = progress_bar(loop.steps, loop.first_step, loop.progress and dist.rank == 0, loop.progress_desc)
        try:
            for step in range(loop.first_step, loop.steps):
                loss = train_step(loop, rec, step)
                last = step == loop.steps - 1
                if reporter is not None:
                    report_step(loop, reporter, rec, step, loss, last)
                if dist.active and not ranks_agree(loop.routed, loop.device):
                    divergent_steps.append(step)
                    rec.event(step, "rank_divergence", routing_sync=loop.sync_mode)
                if dist.rank == 0 and ((step + 1) % loop.eval_interval == 0 or last):
                    result.last_val = validation_loss(loop, step)
                    if result.last_val is not None:
                        rec.eval(step, val_loss=result.last_val, n_batches=loop.eval_batches)
                        if reporter is not None:
                            reporter.scalars(step, None, **{"eval/val_loss": result.last_val})
                stopping = stop.requested is not None
                due = loop.checkpoint_interval > 0 and (step + 1) % loop.checkpoint_interval == 0
                if loop.keep_checkpoints != 0 and (due or last or stopping) and dist.rank == 0:
                    rec.checkpoint(step, loop.checkpoint_path(step))  # rows through this step are on disk first
                    loop.save_checkpoint(step, rec)
                bar.update(1)
                if step % 10 == 0 or last:
                    result.last_loss = float(loss.detach())
                    bar.set_postfix(loss=f"{result.last_loss:.3f}", refresh=False)
                if stopping and not last:
                    rec.event(step, "terminated", signal=stop.requested)
                    raise StoppedBySignal(
                        f"stopped by {stop.requested} after step {step}; its rows and a checkpoint are saved "
                        f"and the run is closed as stopped; continue it with {loop.resume_hint}"
                    )
        finally:
            bar.close()
            if reporter is not None:
                reporter.close()
        if dist.active:
            rec.update_manifest(
                distributed={
                    "world_size": dist.world_size,
                    "routing_sync": loop.sync_mode,
                    "ranks_consistent": not divergent_steps,
                    "divergent_steps": divergent_steps[:100],
                }
            )
    return result
