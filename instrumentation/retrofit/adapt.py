"""``aah-viz retrofit``: adapt a patched pretrained model on a text with the recorder attached.

The loop is ``aah-viz train``'s (``instrumentation.training.loop``): the same learning-rate schedule,
deterministic batch order, evaluation, checkpoint cadence, stop on SIGTERM, refusal of a non-finite
loss and ``torchrun`` data parallelism with routing inputs averaged over ranks. What differs: the
model is a Hugging Face model folder patched by ``patch_model``; only the chosen parameters train
(``--train aah``: the AAH parameters, as the reference's adaptation; ``aah+head``; ``all``), with a
gradient-norm clip; checkpoints are adapters (safetensors) plus the optimizer state beside them
(loaded with ``weights_only=True``; names in ``aah_viz.runlog.paths``). The AAH controller receives
a gradient only through a differentiable routing mode: ``controller_training`` defaults to
``soft_mixture`` here (the reference adaptation's soft routing over all candidate windows).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from aah_viz.errors import ConfigError, RunLogError
from aah_viz.reporting.reporter import ReportSettings
from aah_viz.runlog.paths import (
    ADAPTER_DIR,
    adapter_optimizer_path,
    adapter_path,
    atomic_path,
    is_run,
    list_adapters,
    prune_adapters,
    remove_adapters,
)
from aah_viz.torch_import import limit_threads
from instrumentation import data as data_mod
from instrumentation.recorder import Recording, RoutingRecorder
from instrumentation.retrofit.adapter import load_adapter, save_adapter
from instrumentation.retrofit.diagnostics import write_diagnostics_csv
from instrumentation.retrofit.load import load_causal_lm, recorded_model_path, text_tokens
from instrumentation.retrofit.patch import PAPER_WINDOWS, patch_model
from instrumentation.training.distributed import Dist, broadcast, process_group
from instrumentation.training.loop import Loop, run_loop
from instrumentation.training.schedule import default_lr_warmup


@dataclass
class RetrofitConfig:
    model_dir: str
    out: str
    data: str
    regime: str = "full_adaptive"
    windows: tuple[int, ...] = PAPER_WINDOWS
    steps: int = 100
    seed: int = 0
    train: str = "aah"
    batch_size: int = 1
    seq_len: int | None = None  # default: the config's block_size (the largest window)
    lr: float = 1e-4  # the reference adaptation: AdamW 1e-4, no weight decay, clip 1.0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    lr_warmup_steps: int | None = None
    eval_interval: int = 50
    eval_batches: int = 4
    checkpoint_interval: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    overwrite: bool = False
    detail: str = "full"
    flush_every: int = 50
    device: str = "cpu"
    threads: int | None = None
    progress: bool = True
    overrides: dict = field(default_factory=dict)
    diagnostics_csv: str | None = None  # the reference's per-(layer, head) windows of the last forward
    report: ReportSettings | None = None  # routing to TensorBoard / W&B / MLflow


def _save(run_dir: Path, step: int, handle, optimizer, base_names: list[str], keep: int) -> Path:
    from instrumentation.training.checkpoint import rng_state

    path = adapter_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(adapter_optimizer_path(run_dir, step)) as tmp:
        torch.save({"optimizer": optimizer.state_dict(), "rng": rng_state(), "step": int(step)}, tmp)
    save_adapter(handle, path, base_parameters=base_names, step=int(step))  # last: it marks the step complete
    prune_adapters(run_dir, keep)
    return path


def _base_names(model, handle, params) -> list[str]:
    """Names of the trained parameters that belong to the base model (stored in the adapter)."""
    aah = {id(p) for p in handle.parameters()}
    wanted = {id(p) for p in params} - aah
    return [n for n, p in model.named_parameters() if id(p) in wanted]


_RETROFIT_INTS = {
    "steps": ("--steps", 1),
    "seed": ("--seed", 0),
    "batch_size": ("--batch-size", 1),
    "seq_len": ("--seq-len", 1),
    "eval_interval": ("--eval-interval", 1),
    "eval_batches": ("--eval-batches", 1),
    "checkpoint_interval": ("--checkpoint-interval", 0),
    "keep_checkpoints": ("--keep-checkpoints", 0),
    "flush_every": ("--flush-every", 1),
    "lr_warmup_steps": ("--lr-warmup", 0),
    "threads": ("--threads", 1),
}


def check_retrofit_values(rc: RetrofitConfig) -> None:
    """One ConfigError naming the flag for any out-of-range setting, before a model is loaded."""
    import math

    from instrumentation.training.settings import check_device, check_ints

    check_ints(rc, _RETROFIT_INTS)
    for flag, value, positive in (
        ("--lr", rc.lr, True),
        ("--weight-decay", rc.weight_decay, False),
        ("--grad-clip", rc.grad_clip, False),
    ):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (positive and value == 0):
            raise ConfigError(f"{flag} must be a finite number {'above' if positive else '>='} 0, got {value!r}")
    if rc.resume and rc.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; pass one of them")
    check_device(rc.device)


def adapt(rc: RetrofitConfig) -> dict:
    """Adapt, record and checkpoint one retrofit run; returns a small summary."""
    check_retrofit_values(rc)
    limit_threads(rc.threads)
    t0 = time.perf_counter()
    with process_group(rc.device) as (dist, device):
        summary = _adapt(rc, dist, device)
    return dict(summary, seconds=round(time.perf_counter() - t0, 3))


def _adapt(rc: RetrofitConfig, dist: Dist, device: str) -> dict:
    from instrumentation.model import model_logits
    from instrumentation.training.checkpoint import set_rng_state

    out = Path(rc.out)
    model = load_causal_lm(rc.model_dir, device)
    keep_through, first_step, resume_state = None, 0, None
    torch.manual_seed(rc.seed)  # the AAH parameters start identical on every rank
    if rc.resume:
        if not is_run(out):
            raise RunLogError(f"--resume: {out} holds no run (no manifest.json); start it without --resume")
        from aah_viz.runlog import read_manifest
        from instrumentation.training.settings import resumed_report

        recorded = read_manifest(out).get("retrofit")
        rc = replace(
            rc, report=resumed_report(rc.report, recorded.get("report") if isinstance(recorded, dict) else None)
        )
        found = list_adapters(out)
        if found:
            step, path = found[-1]
            handle = load_adapter(model, path)
            resume_state = torch.load(adapter_optimizer_path(out, step), map_location=device, weights_only=True)
            keep_through, first_step = step, step + 1
        else:
            keep_through = -1
            handle = _patch(model, rc)
    else:
        handle = _patch(model, rc)
    cfg = handle.cfg
    params = handle.train_parameters(rc.train)
    if not params:
        raise ConfigError(f"--train {rc.train}: nothing to train in regime {cfg.regime}; use --train all")
    base_names = _base_names(model, handle, params)
    if dist.active:
        broadcast(params)
    optimizer = torch.optim.AdamW(params, lr=rc.lr, weight_decay=rc.weight_decay)
    if resume_state is not None:
        optimizer.load_state_dict(resume_state["optimizer"])
        set_rng_state(resume_state["rng"])
    T = int(rc.seq_len or cfg.block_size)
    tokens = text_tokens(rc.data, rc.model_dir, int(model.config.vocab_size))
    splits = data_mod.split_blocks(tokens, T, min_val_blocks=min(rc.eval_batches * rc.batch_size, 64))
    lr_warmup = rc.lr_warmup_steps if rc.lr_warmup_steps is not None else default_lr_warmup(rc.steps)
    args = {k: v for k, v in asdict(rc).items() if k not in ("progress", "out", "report")}
    args.update(world_size=dist.world_size, seq_len=T, lr_warmup_steps=lr_warmup, windows=list(rc.windows))
    args["report"] = asdict(rc.report) if rc.report is not None else None  # a bare --resume reports the same

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model_logits(model, x)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    def save(step: int, rec: RoutingRecorder) -> None:
        _save(out, step, handle, optimizer, base_names, rc.keep_checkpoints)

    loop = Loop(
        module=model,
        routed=handle,
        loss=loss,
        optimizer=optimizer,
        params=params,
        splits=splits,
        batch_size=rc.batch_size,
        seed=rc.seed,
        dist=dist,
        device=device,
        steps=rc.steps,
        first_step=first_step,
        lr=rc.lr,
        lr_warmup=lr_warmup,
        eval_interval=rc.eval_interval,
        eval_batches=rc.eval_batches,
        checkpoint_interval=rc.checkpoint_interval,
        keep_checkpoints=rc.keep_checkpoints,
        checkpoint_path=lambda step: adapter_path(out, step),
        save_checkpoint=save,
        resume_hint="the same aah-viz retrofit command with --resume",
        progress=rc.progress,
        progress_desc=f"retrofit {cfg.regime}",
        grad_clip=rc.grad_clip,
        report=rc.report,
        # once the replaced run is ours (its lock held): its adapters of later steps would pass for this run's
        on_open=(lambda rec: rec.writer is not None and remove_adapters(out))
        if rc.overwrite and not rc.resume
        else None,
    )
    recording = Recording(
        run_dir=out,
        detail=rc.detail,
        flush_every=rc.flush_every,
        resume_from_step=keep_through if rc.resume else None,
        seed=rc.seed,
        preset=cfg.preset,
        steps=rc.steps,
        data={"source": str(rc.data), "tokens": int(tokens.size), "train_blocks": splits.n_train}
        | {"sha256": data_mod.file_identity(rc.data)["sha256"]},
        overwrite=rc.overwrite,
        manifest_extra={
            "seq_len": T,  # the blocks it trains on, not the largest window
            "retrofit": args,
            "base_model": recorded_model_path(rc.model_dir, out),  # relative to the run where possible
            "base_model_as_given": str(rc.model_dir),
        },
        backend={"requested": cfg.attention_backend},
    )
    done = run_loop(loop, recording)
    if rc.diagnostics_csv and dist.rank == 0:
        write_diagnostics_csv(handle, rc.diagnostics_csv)
    return {
        "run_dir": str(out),
        "first_step": first_step,
        "last_step": rc.steps - 1,
        "final_loss": done.last_loss,
        "final_val_loss": done.last_val,
        "adapters": str(out / ADAPTER_DIR),
    }


def _patch(model, rc: RetrofitConfig):
    overrides = dict(rc.overrides)
    if rc.train in ("aah", "aah+head"):
        overrides.setdefault("controller_training", "soft_mixture")
    from aah_viz.regimes import REGIMES

    if not REGIMES.get(rc.regime, REGIMES["full_adaptive"]).controller:
        overrides.pop("controller_training", None)  # plain regimes have no controller
    return patch_model(model, rc.regime, rc.windows, **overrides)
