"""``aah-viz train``: an ``AAHTransformer`` trained by the reference loop (method section 2, reference section 1).

Faithful to the reference loop where it shapes AAH behaviour: AdamW (lr 3e-4, weight decay 0.1,
one parameter group), linear learning-rate warm-up then cosine to 0 (the multiplier is 0 at
step 0), ``model.prepare_step(step)`` (``set_step`` then ``set_control``) before every training
forward, no gradient clipping, evaluation on a cadence with dropout off. Added for diagnostics: the
``RoutingRecorder``, checkpoints with routing state and the optimiser, exact resume, and data-parallel
runs.

The loop itself, with its step numbering, stop on SIGTERM and non-finite-loss refusal, is
``instrumentation.training.loop`` (``aah-viz retrofit`` runs it too); this module builds the model,
the data and the checkpoints (``instrumentation.training.checkpoint``) and plans a resume (``settings``).

Data parallel (``torchrun --nproc_per_node N``): see ``instrumentation.training.distributed``;
with ``routing_sync="mean"`` (the default when world_size > 1) the inputs of every routing decision
are averaged across ranks, so all ranks take identical decisions; ``"off"`` lets them drift.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from aah_viz.errors import ConfigError, RunLogError
from aah_viz.reporting.reporter import ReportSettings
from aah_viz.runlog.paths import checkpoint_path, is_run, prune_checkpoints
from aah_viz.torch_import import limit_threads
from instrumentation import data as data_mod
from instrumentation.recorder import Recording, RoutingRecorder
from instrumentation.training import checkpoint as ckpt
from instrumentation.training import settings
from instrumentation.training.distributed import Dist, broadcast_model, process_group
from instrumentation.training.loop import Loop, run_loop
from instrumentation.training.schedule import default_lr_warmup

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
    report: ReportSettings | None = None  # routing to TensorBoard / W&B / MLflow; how this process reports
    # Names of the run-defining fields the user set explicitly (the CLI fills it); None: those off
    # the defaults. A resume takes every other field from the run (see training.settings).
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


def _plan_resume(tc: TrainConfig, out: Path):
    """(the run's own settings, its newest checkpoint or None) for ``--resume``; see settings."""
    from aah_viz.runlog import read_manifest

    if not is_run(out):
        raise RunLogError(f"--resume: {out} holds no run (no manifest.json); start it without --resume")
    manifest = read_manifest(out)
    latest = ckpt.latest_checkpoint(out)
    plan = settings.resume_settings(tc, manifest, latest[0] if latest else None)
    return plan, manifest, latest


def _finished_note(out: Path, manifest: dict, steps: int) -> str:
    return (
        f"{out} is a finished run ({steps} steps, last step {manifest.get('last_step')}); nothing to resume, "
        f"nothing changed; to train it further pass --steps above {steps}"
    )


def train(tc: TrainConfig) -> TrainResult:
    """Train one run and record it into ``tc.out``; see the module docstring."""
    settings.check_values(tc)
    settings.check_device(tc.device)
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
    limit_threads(tc.threads)
    with process_group(tc.device) as (dist, device):
        return _train(tc, out, dist, device, plan, manifest, latest)


def _train(tc: TrainConfig, out: Path, dist: Dist, device: str, plan, manifest, latest) -> TrainResult:
    from instrumentation.config import AAHConfig
    from instrumentation.model import AAHTransformer

    t0 = time.perf_counter()
    payload, keep_through = (None, None)
    if tc.resume:
        # no checkpoint yet: start over, dropping every recorded row
        keep_through = latest[0] if latest else -1
        payload = ckpt.load_checkpoint(latest[1], map_location=device) if latest else None
        if payload is not None:
            ckpt.check_belongs(payload, latest[1], latest[0], manifest)  # this run's own, of that step
        settings.check_same_data(tc.data, manifest.get("data"))
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
    data_info = {
        "source": str(tc.data),
        "n_docs": tc.n_docs if tc.data == data_mod.SYNTHETIC else None,
        "data_seed": tc.data_seed,
        "tokens": int(tokens.size),
        "train_blocks": splits.n_train,
        "val_blocks": splits.n_val,
        "tokenizer": "bytes",
    }
    if tc.data != data_mod.SYNTHETIC:  # what a resume checks the text against: resolved path, size, SHA-256
        data_info.update(data_mod.file_identity(tc.data))
    run_args = {k: v for k, v in asdict(tc).items() if k not in ("overrides", "progress", "out", "explicit", "report")}
    run_args.update(
        batch_size=batch_size, eval_interval=eval_interval, lr_warmup_steps=lr_warmup, world_size=dist.world_size
    )
    run_args["report"] = asdict(tc.report) if tc.report is not None else None  # a bare --resume reports the same

    owner = {"run_uid": manifest.get("run_uid") if manifest else None}  # whose checkpoints these are

    def on_open(rec: RoutingRecorder) -> None:
        if rec.writer is not None:
            owner["run_uid"] = rec.writer.manifest.get("run_uid")
        if plan is not None and plan.extends:
            rec.event(first_step, "extend", from_steps=plan.recorded_steps, to_steps=tc.steps)
            rec.update_manifest(steps=tc.steps, train=run_args)

    def save(step: int, rec: RoutingRecorder) -> None:
        ckpt.save_checkpoint(
            out,
            step,
            model=model,
            optimizer=optimizer,
            config=cfg.to_dict(),
            extra={
                "controller_init": rec.controller_reference(),
                "run_uid": owner["run_uid"],
                "seed": tc.seed,
                "data_sha256": data_info.get("sha256"),
            },
        )
        prune_checkpoints(out, tc.keep_checkpoints)

    loop = Loop(
        module=model,
        routed=model,
        loss=lambda x, y: model(x, targets=y).loss,
        optimizer=optimizer,
        params=list(model.parameters()),
        splits=splits,
        batch_size=batch_size,
        seed=tc.seed,
        dist=dist,
        device=device,
        steps=tc.steps,
        first_step=first_step,
        lr=tc.lr,
        lr_warmup=lr_warmup,
        eval_interval=eval_interval,
        eval_batches=tc.eval_batches,
        checkpoint_interval=tc.checkpoint_interval,
        keep_checkpoints=tc.keep_checkpoints,
        checkpoint_path=lambda step: checkpoint_path(out, step),
        save_checkpoint=save,
        resume_hint=f"aah-viz train --out {out} --resume",
        progress=tc.progress,
        progress_desc=f"{cfg.regime} seed {tc.seed}",
        sync_mode=tc.routing_sync or "mean",
        on_open=on_open,
        report=tc.report,
    )
    recording = Recording(
        run_dir=out,
        detail=tc.detail,
        flush_every=tc.flush_every,
        resume_from_step=keep_through if tc.resume else None,
        seed=tc.seed,
        preset=cfg.preset,
        steps=tc.steps,
        data=data_info,
        overwrite=tc.overwrite,
        manifest_extra={"train": run_args},
        backend=resolve_backend(cfg, device),
    )
    done = run_loop(loop, recording)
    return TrainResult(out, first_step, tc.steps - 1, done.last_loss, done.last_val, time.perf_counter() - t0)
