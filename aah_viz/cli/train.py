"""``aah-viz train``: train an AAH model and record its routing into a run directory."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options, add_torch_options

PRESETS = ("tiny", "small", "paper-1b")
DETAILS = ("full", "light", "minimal")


def add_overrides_argument(p, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``, a list of (key, parsed value)."""
    p.add_argument("--set", dest="overrides", type=_override, action="append", default=[], metavar="KEY=VALUE",
                   help=help)  # fmt: skip


def _override(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE (a model config key), got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip(), parsed


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train an AAH model on CPU or GPU and record its routing into a run directory",
        description="Train an AAH-v3 model (or a baseline regime) with the reference loop and record every "
        "routing update, per-step head windows and groups, and training scalars into --out. "
        "See docs/training.md.",
    )
    p.add_argument("--preset", choices=PRESETS, default=None, help="model size preset (default: tiny)")
    p.add_argument(
        "--regime",
        default=None,
        help="routing regime, e.g. full_adaptive, shallow_freeze, full_attention (aah-viz regimes lists all)",
    )
    p.add_argument("--steps", type=int, default=None, help="number of optimiser steps (default: 100)")
    p.add_argument("--seed", type=int, default=None, help="seed of weights and batch order (default: 0)")
    p.add_argument("--out", required=True, help="run directory to create (or to continue with --resume)")
    p.add_argument(
        "--data",
        default=None,
        help="'synthetic' (the project's corpus with planted structure, default) or a plain-text file",
    )
    p.add_argument("--n-docs", type=int, default=None, help="synthetic documents to generate (default: 400)")
    p.add_argument("--data-seed", type=int, default=None, help="seed of the synthetic corpus (default: 0)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="sequences per step and rank (default: tiny 2, small 4, paper-1b 1)",
    )
    p.add_argument("--lr", type=float, default=None, help="peak learning rate of AdamW (default: 3e-4)")
    p.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay (default: 0.1)")
    p.add_argument(
        "--lr-warmup",
        type=int,
        default=None,
        help="linear learning-rate warm-up steps (default: min(100, steps // 20))",
    )
    p.add_argument(
        "--eval-interval",
        type=int,
        default=None,
        help="evaluate every N steps and at the end (default: tiny 10, small 50, paper-1b 200)",
    )
    p.add_argument("--eval-batches", type=int, default=None, help="validation batches per evaluation (default: 4)")
    p.add_argument(
        "--checkpoint-interval",
        type=int,
        default=None,
        help="save a checkpoint every N steps (default 0: only at the end)",
    )
    p.add_argument(
        "--keep-checkpoints",
        type=int,
        default=None,
        help="newest checkpoints to keep; 0 saves none at all (default: 2)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint (rows after it are dropped) with the run's own "
        "recorded settings; an argument that contradicts them is refused; --steps above the recorded steps "
        "extends the run",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument(
        "--detail",
        choices=DETAILS,
        default=None,
        help="recording detail: full, light (no feature rows or logit vectors), minimal (heads+scalars)",
    )
    p.add_argument("--flush-every", type=int, default=None, help="write a Parquet segment every N steps (default: 50)")
    p.add_argument("--backend", default=None, help="attention execution backend (default: the config's dense_masked)")
    p.add_argument(
        "--window",
        type=int,
        default=None,
        help="window of fixed_window / sliding_window / local_global_layers (tokens)",
    )
    add_overrides_argument(p, "override a model config key (repeatable), e.g. --set warmup_steps=10")
    add_torch_options(p)
    p.add_argument(
        "--routing-sync",
        choices=("mean", "off"),
        default=None,
        help="under torchrun: average routing inputs across ranks (mean, default) or not (off)",
    )
    from aah_viz.reporting.options import add_report_arguments

    add_report_arguments(p)
    add_output_options(p, "print a JSON summary at the end")
    p.set_defaults(func=run)


# TrainConfig field <- argparse destination, for every argument that defines the run. Their parser
# defaults are None, so the ones given are known: a --resume takes the others from the run.
RUN_ARGS = {
    "preset": "preset",
    "regime": "regime",
    "steps": "steps",
    "seed": "seed",
    "data": "data",
    "n_docs": "n_docs",
    "data_seed": "data_seed",
    "batch_size": "batch_size",
    "lr": "lr",
    "weight_decay": "weight_decay",
    "lr_warmup_steps": "lr_warmup",
    "eval_interval": "eval_interval",
    "eval_batches": "eval_batches",
    "checkpoint_interval": "checkpoint_interval",
    "keep_checkpoints": "keep_checkpoints",
    "detail": "detail",
    "flush_every": "flush_every",
    "backend": "backend",
    "window": "window",
    "routing_sync": "routing_sync",
}


def end_summary(result) -> str:
    """Where the run is and what to open next: two lines printed when training ends."""
    run_dir = Path(result.run_dir)
    losses = []
    if result.final_loss is not None:
        losses.append(f"final loss {result.final_loss:.4f}")
    if result.final_val_loss is not None:
        losses.append(f"validation loss {result.final_val_loss:.4f}")
    steps = f"steps {result.first_step}-{result.last_step}" if result.last_step >= result.first_step else "no step"
    said = ", ".join([steps, f"{result.seconds:.0f} s", *losses])
    logs = run_dir.parent if str(run_dir.parent) not in ("", ".") else Path(".")
    return (
        f"run written to {run_dir} ({said})\n"
        f"next: aah-viz dashboard --logs {logs}   (or: aah-viz validate {run_dir}; aah-viz probe {run_dir})"
    )


def run(args) -> int:
    import sys

    from aah_viz.reporting.options import report_settings
    from aah_viz.torch_import import require_torch

    report = report_settings(args)  # a missing package is refused before anything trains
    require_torch()
    from instrumentation import TrainConfig, train_model

    given = {field: getattr(args, dest) for field, dest in RUN_ARGS.items() if getattr(args, dest) is not None}
    tc = TrainConfig(
        **given,
        out=args.out,
        resume=args.resume,
        overwrite=args.overwrite,
        device=args.device,
        threads=args.threads,
        progress=not args.no_progress,
        overrides=dict(args.overrides),
        explicit=frozenset(given),
        report=report,
    )
    result = train_model(tc)
    if result.note:
        print(result.note, file=sys.stderr)
    elif not args.json and int(os.environ.get("RANK", "0")) == 0:  # one summary under torchrun
        print(end_summary(result))
    if args.json:
        print(
            json_text(
                {
                    "run_dir": str(result.run_dir),
                    "first_step": result.first_step,
                    "last_step": result.last_step,
                    "final_loss": result.final_loss,
                    "final_val_loss": result.final_val_loss,
                    "seconds": round(result.seconds, 3),
                }
            )
        )
    return 0
