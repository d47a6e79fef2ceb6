"""The reference training loop behind ``aah-viz train`` (method section 2, reference section 1).

Faithful to the reference loop where it shapes AAH behaviour: AdamW (lr 3e-4, weight decay 0.1,
one parameter group), linear learning-rate warm-up then cosine to 0 (the multiplier is 0 at
step 0), ``model.set_step(step)`` before every training forward, no gradient clipping,
evaluation on a cadence with dropout off. Added for diagnostics: the ``RoutingRecorder``,
checkpoints with routing state and the optimiser, exact resume, and data-parallel runs.

Step numbering: step ``s`` is the (s+1)-th optimiser step; the model sees ``set_step(s)``,
i.e. the number of optimiser steps already completed. A checkpoint ``step-S`` holds the state
after step S; a resume continues at S + 1 after dropping every recorded row past S.

Data parallel (``torchrun --nproc_per_node N``): every rank holds the whole model and a
different slice of each global batch; gradients are averaged with one all-reduce per step. AAH
routing reads batch statistics, so ranks would drift apart; with ``routing_sync="mean"`` (the
default when world_size > 1) the inputs of every routing decision are averaged across ranks
before the decision (see ``distributed_routing``), so all ranks take identical decisions.
Only rank 0 writes the run directory and the checkpoints.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from aah_viz.errors import ConfigError, RunLogError, TrainingError
from instrumentation import checkpoint as ckpt
from instrumentation import data as data_mod
from instrumentation import train_settings
from instrumentation.recorder import RoutingRecorder

DEFAULT_BATCH = {"tiny": 2, "small": 4, "paper-1b": 1}
DEFAULT_EVAL_INTERVAL = {"tiny": 10, "small": 50, "paper-1b": 200}


@dataclass
class TrainConfig:
    preset: str = "tiny"
    regime: str = "full_adaptive"
    steps: int = 100
    seed: int = 0
    out: str = "runs/run"
    data: str = data_mod.SYNTHETIC
    n_docs: int = data_mod.DEFAULT_SYNTHETIC_DOCS
    data_seed: int = 0  # synthetic corpus seed: the same corpus across runs and seeds by default
    batch_size: int | None = None
    lr: float = 3e-4
    weight_decay: float = 0.1
    lr_warmup_steps: int | None = None  # default: min(100, max(1, steps // 20))
    eval_interval: int | None = None
    eval_batches: int = 4
    val_fraction: float = 0.1
    checkpoint_interval: int = 0  # 0: only a final checkpoint when keep_checkpoints != 0
    keep_checkpoints: int = 2  # newest checkpoints kept; 0 keeps none at all (no final checkpoint)
    resume: bool = False
    overwrite: bool = False
    detail: str = "full"
    flush_every: int = 50
    backend: str | None = None
    window: int | None = None
    device: str = "cpu"
    threads: int | None = None
    routing_sync: str | None = None  # "mean" or "off"; default "mean" when world_size > 1
    progress: bool = True
    overrides: dict = field(default_factory=dict)
    # Names of the run-defining fields the user set explicitly (the CLI fills it); None: those off
    # the defaults. A resume takes every other field from the run (see train_settings).
    explicit: frozenset | None = None


@dataclass
class TrainResult:
    run_dir: Path
    first_step: int
    last_step: int
    final_loss: float | None
    final_val_loss: float | None
    seconds: float
    note: str | None = None  # said to the user when nothing was trained (a finished run resumed)


def lr_multiplier(step: int, warmup: int, total: int) -> float:
    """Linear warm-up (0 at step 0) then cosine to 0 at ``total`` (the reference schedule)."""
    if warmup > 0 and step < warmup:
        return step / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def default_lr_warmup(steps: int) -> int:
    return min(100, max(1, steps // 20))


# ---------------------------------------------------------------------------- distributed
@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    initialised_here: bool = False

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str) -> Dist:
    """Join the process group ``torchrun`` describes (gloo on CPU, nccl on CUDA); single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    dist = torch.distributed
    if dist.is_initialized():
        return Dist(dist.get_rank(), dist.get_world_size(), False)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend=backend)
    return Dist(dist.get_rank(), dist.get_world_size(), True)


def average_gradients(params: list[torch.nn.Parameter], world_size: int) -> None:
    """One all-reduce of all gradients (flattened), then divide: plain data-parallel SGD."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or world_size <= 1:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def broadcast_model(model: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers everywhere (identical start, also after a resume)."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            torch.distributed.broadcast(t.data, src=0)


class routing_sync:
    """Average the inputs of every routing decision across ranks (training forwards only).

    AAH routing reads statistics of the current batch (per-head Q/K/V moments and the previous
    forward's entropy / norm / usage). Each rank sees a different batch, so without help the
    ranks would cluster differently and execute different windows. Inside this context the
    model's feature reducer (``AAHTransformer.set_feature_reducer``) averages both feature kinds
    that feed all routing (method section 4) over ranks, so the EMA, the clustering, the
    controller inputs and hence every decision are identical on all ranks: routing behaves as if
    computed on the global batch's mean statistics. Evaluation runs on rank 0 alone and is not
    synced (``routing_sync.paused``); with frozen evaluation routing it computes no features
    anyway. With ``world_size <= 1`` it does nothing.
    """

    paused = False  # set while one rank runs forwards alone (evaluation on rank 0)

    def __init__(self, model: torch.nn.Module, world_size: int):
        self.model = model
        self.world_size = int(world_size)

    def reduce(self, feats: torch.Tensor) -> torch.Tensor:
        if routing_sync.paused or not torch.distributed.is_initialized():
            return feats
        out = feats.detach().clone()
        torch.distributed.all_reduce(out)
        return out / self.world_size

    def __enter__(self) -> routing_sync:
        if self.world_size > 1:
            self.model.set_feature_reducer(self.reduce)
        return self

    def __exit__(self, *exc) -> None:
        self.model.set_feature_reducer(None)


def ranks_agree(model: torch.nn.Module, device: str = "cpu") -> bool:
    """Do all ranks execute the same window in every head? (one small all-gather)."""
    mine = model.current_windows().to(device=device, dtype=torch.long)
    world = torch.distributed.get_world_size()
    everyone = [torch.empty_like(mine) for _ in range(world)]
    torch.distributed.all_gather(everyone, mine)
    return all(torch.equal(everyone[0], other) for other in everyone[1:])


# ---------------------------------------------------------------------------- pieces of the loop
def build_config(tc: TrainConfig):
    from instrumentation.config import AAHConfig

    kwargs = dict(tc.overrides)
    if tc.window is not None:
        kwargs["window"] = tc.window
    if tc.backend is not None:
        kwargs["attention_backend"] = tc.backend
    return AAHConfig.from_preset(tc.preset, regime=tc.regime, **kwargs)


def resolve_backend(cfg, device: str) -> dict:
    """What the configured attention backend resolves to on this device (and why, if it fell back)."""
    if not cfg.enabled:
        return {"requested": cfg.attention_backend, "resolved": "sdpa", "fallback_reason": None}
    from instrumentation.backends import get_backend

    _, resolved, reason = get_backend(
        cfg.attention_backend, device=torch.device(device), training=True, dropout_p=cfg.dropout
    )
    return {"requested": cfg.attention_backend, "resolved": resolved, "fallback_reason": reason}


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, splits: data_mod.BlockSplits, n_batches: int, batch_size: int, step: int, device: str
) -> float | None:
    """Mean validation loss over the first ``n_batches`` validation batches, dropout off."""
    was_training = model.training
    model.eval()
    losses = []
    routing_sync.paused = True
    try:
        model.set_step(step)
        for x, y in data_mod.validation_batches(splits, n_batches, batch_size, device=device):
            losses.append(float(model(x, targets=y).loss))
    finally:
        routing_sync.paused = False
        model.train(was_training)
    return sum(losses) / len(losses) if losses else None


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _progress(total: int, initial: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit="step", dynamic_ncols=True)


def _plan_resume(tc: TrainConfig, out: Path):
    """(the run's own settings, its newest checkpoint or None) for ``--resume``; see train_settings."""
    from aah_viz.runlog import read_manifest

    if not (out / "manifest.json").is_file():
        raise RunLogError(f"--resume: {out} holds no run (no manifest.json); start it without --resume")
    manifest = read_manifest(out)
    latest = ckpt.latest_checkpoint(out)
    plan = train_settings.resume_settings(tc, manifest, latest[0] if latest else None)
    return plan, manifest, latest


class StopRequest:
    """SIGTERM during training asks the loop to stop after the current step: its rows and a checkpoint
    are written and the run is closed (as failed, with a ``terminated`` event), so a plain ``kill`` never
    leaves a half-closed run. A second SIGTERM acts as usual. Single-process runs only: under torchrun
    every rank would have to agree on the step, and the launcher's SIGKILL follows anyway."""

    def __init__(self, enabled: bool = True):
        import threading

        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested: str | None = None
        self._previous = None

    def _handle(self, signum, frame) -> None:
        import signal

        self.requested = signal.Signals(signum).name
        signal.signal(signum, self._previous)  # a second signal is not delayed

    def __enter__(self) -> StopRequest:
        if self.enabled:
            import signal

            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            import signal

            signal.signal(signal.SIGTERM, self._previous)


def _finished_note(out: Path, manifest: dict, steps: int) -> str:
    return (
        f"{out} is a finished run ({steps} steps, last step {manifest.get('last_step')}); nothing to resume, "
        f"nothing changed; to train it further pass --steps above {steps}"
    )


def _check_loss(loss: torch.Tensor, step: int, lr: float, rec) -> None:
    """A non-finite loss ends the run as failed, with an event naming the step (nothing is trained on it)."""
    if bool(torch.isfinite(loss.detach())):
        return
    value = float(loss.detach())
    rec.event(step, "non_finite_loss", value=str(value), lr=lr)
    raise TrainingError(
        f"the loss is {value} at step {step} (learning rate {lr:.3g}); the run is closed as failed "
        "(lower --lr, or resume from an earlier checkpoint)"
    )


# ---------------------------------------------------------------------------- the loop
def train(tc: TrainConfig) -> TrainResult:
    """Train one run and record it into ``tc.out``; see the module docstring."""
    from instrumentation.config import AAHConfig
    from instrumentation.model import AAHTransformer

    train_settings.check_values(tc)
    train_settings.check_device(tc.device)
    out = Path(tc.out)
    plan = manifest = latest = None
    if tc.resume:
        plan, manifest, latest = _plan_resume(tc, out)
        tc = plan.settings
        if manifest.get("status") == "finished" and not plan.extends:
            last = manifest.get("last_step")
            return TrainResult(
                out, -1 if last is None else last + 1, last, None, None, 0.0, _finished_note(out, manifest, tc.steps)
            )
    if tc.threads:
        torch.set_num_threads(int(tc.threads))
    dist = init_distributed(tc.device)
    device = tc.device
    if device.startswith("cuda") and dist.active:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', dist.rank))}"
        torch.cuda.set_device(device)
    t0 = time.perf_counter()
    exit_stack: list = []
    try:
        payload, keep_through = (None, None)
        if tc.resume:
            # no checkpoint yet: start over, dropping every recorded row
            keep_through = latest[0] if latest else -1
            payload = ckpt.load_checkpoint(latest[1], map_location=device) if latest else None
        if payload is not None:
            cfg = AAHConfig.from_dict(payload["config"])
        elif tc.resume:
            cfg = AAHConfig.from_dict(manifest["config"])
        else:
            cfg = build_config(tc)
        if cfg.vocab_size < data_mod.VOCAB_SIZE:
            raise ConfigError(
                f"config key 'vocab_size': {cfg.vocab_size} is below the byte tokenizer's {data_mod.VOCAB_SIZE} "
                f"symbols; allowed values are >= {data_mod.VOCAB_SIZE}"
            )
        torch.manual_seed(tc.seed)
        model = AAHTransformer(cfg).to(device)
        sync_mode = tc.routing_sync or "mean"
        sync = routing_sync(model, dist.world_size if sync_mode == "mean" else 1)
        sync.__enter__()
        exit_stack.append(sync)
        batch_size = tc.batch_size or DEFAULT_BATCH.get(cfg.preset, 2)
        eval_interval = tc.eval_interval or DEFAULT_EVAL_INTERVAL.get(cfg.preset, 50)
        lr_warmup = tc.lr_warmup_steps if tc.lr_warmup_steps is not None else default_lr_warmup(tc.steps)
        optimizer = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
        first_step = 0
        if payload is not None:
            model.load_state_dict(payload["model"])
            if payload.get("optimizer"):
                optimizer.load_state_dict(payload["optimizer"])
            ckpt.set_rng_state(payload.get("rng", {"torch": torch.get_rng_state()}))
            if payload.get("controller_init"):
                model.load_controller_initial_parameters(payload["controller_init"])
            first_step = int(payload["step"]) + 1
        if dist.active:
            broadcast_model(model)
        tokens = data_mod.load_token_stream(tc.data, seed=tc.data_seed, n_docs=tc.n_docs)
        splits = data_mod.split_blocks(
            tokens, cfg.block_size, val_fraction=tc.val_fraction, min_val_blocks=min(tc.eval_batches * batch_size, 64)
        )
        params = list(model.parameters())
        backend_info = resolve_backend(cfg, device)
        data_info = {
            "source": str(tc.data),
            "n_docs": tc.n_docs if tc.data == data_mod.SYNTHETIC else None,
            "data_seed": tc.data_seed,
            "tokens": int(tokens.size),
            "train_blocks": splits.n_train,
            "val_blocks": splits.n_val,
            "tokenizer": "bytes",
        }
        run_args = {k: v for k, v in asdict(tc).items() if k not in ("overrides", "progress", "out", "explicit")}
        run_args.update(
            batch_size=batch_size, eval_interval=eval_interval, lr_warmup_steps=lr_warmup, world_size=dist.world_size
        )
        recorder = RoutingRecorder(
            model,
            out,
            tc.detail,
            flush_every=tc.flush_every,
            resume_from_step=keep_through if tc.resume else None,
            seed=tc.seed,
            preset=cfg.preset,
            steps=tc.steps,
            data=data_info,
            overwrite=tc.overwrite,
            rank=dist.rank,
            manifest_extra={"train": run_args},
            backend=backend_info,
        )
        last_loss, last_val = None, None
        divergent_steps: list[int] = []
        tokens_per_step = batch_size * cfg.block_size * dist.world_size
        stop = StopRequest(enabled=not dist.active)
        with recorder as rec, stop:
            if plan is not None and plan.extends:
                rec.event(first_step, "extend", from_steps=plan.recorded_steps, to_steps=tc.steps)
                rec.update_manifest(steps=tc.steps, train=run_args)
            bar = _progress(tc.steps, first_step, tc.progress and dist.rank == 0, f"{cfg.regime} seed {tc.seed}")
            try:
                for step in range(first_step, tc.steps):
                    lr = tc.lr * lr_multiplier(step, lr_warmup, tc.steps)
                    _set_lr(optimizer, lr)
                    model.train()
                    model.prepare_step(step)  # set_step + set_control, as the reference trainer does
                    x, y = data_mod.training_batch(
                        splits,
                        step,
                        batch_size,
                        seed=tc.seed,
                        rank=dist.rank,
                        world_size=dist.world_size,
                        device=device,
                    )
                    optimizer.zero_grad(set_to_none=True)
                    loss = model(x, targets=y).loss
                    _check_loss(loss, step, lr, rec)
                    loss.backward()
                    if dist.active:
                        average_gradients(params, dist.world_size)
                    optimizer.step()
                    rec.step(step, loss=loss, lr=lr, tokens=tokens_per_step)
                    if dist.active and not ranks_agree(model, device):
                        divergent_steps.append(step)
                        rec.event(step, "rank_divergence", routing_sync=sync_mode)
                    last = step == tc.steps - 1
                    if (step + 1) % eval_interval == 0 or last:
                        if dist.rank == 0:
                            last_val = evaluate(model, splits, tc.eval_batches, batch_size, step, device)
                            if last_val is not None:
                                rec.eval(step, val_loss=last_val, n_batches=tc.eval_batches)
                    stopping = stop.requested is not None
                    want_ckpt = tc.keep_checkpoints != 0 and (
                        (tc.checkpoint_interval > 0 and (step + 1) % tc.checkpoint_interval == 0) or last or stopping
                    )
                    if want_ckpt and dist.rank == 0:
                        path = ckpt.checkpoint_path(out, step)
                        rec.checkpoint(step, path)  # rows through this step are on disk before the file
                        ckpt.save_checkpoint(
                            out,
                            step,
                            model=model,
                            optimizer=optimizer,
                            config=cfg.to_dict(),
                            extra={"controller_init": rec.controller_reference()},
                        )
                        ckpt.prune_checkpoints(out, tc.keep_checkpoints)
                    if bar is not None:
                        bar.update(1)
                        if step % 10 == 0 or last:
                            last_loss = float(loss.detach())
                            bar.set_postfix(loss=f"{last_loss:.3f}", refresh=False)
                    if stopping and not last:
                        rec.event(step, "terminated", signal=stop.requested)
                        raise TrainingError(
                            f"stopped by {stop.requested} after step {step}; its rows and a checkpoint are saved "
                            f"and the run is closed as failed; continue it with aah-viz train --out {out} --resume"
                        )
            finally:
                bar.close()
            if dist.active:
                rec.update_manifest(
                    distributed={
                        "world_size": dist.world_size,
                        "routing_sync": sync_mode,
                        "ranks_consistent": not divergent_steps,
                        "divergent_steps": divergent_steps[:100],
                    }
                )
        return TrainResult(out, first_step, tc.steps - 1, last_loss, last_val, time.perf_counter() - t0)
    finally:
        for ctx in reversed(exit_stack):
            ctx.__exit__(None, None, None)
        if dist.initialised_here:
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
