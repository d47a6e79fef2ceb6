"""``aah-viz retrofit``: adapt a pretrained Hugging Face model patched with AAH-v3, recording its routing."""

from __future__ import annotations

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options
from aah_viz.cli.evaluate import add_model_options, model_overrides

DETAILS = ("full", "light", "minimal")
TRAIN_CHOICES = ("aah", "aah+head", "all")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "retrofit",
        help="patch a pretrained Hugging Face model with AAH-v3 and adapt it on a text, recording its routing",
        description="Patch every self-attention of a local Hugging Face model folder (Llama, Mistral, Qwen2, Qwen3) "
        "with AAH-v3 routing, adapt it on a plain-text file with the routing recorder attached, and save "
        "adapters (safetensors: the AAH parameters and routing state) as checkpoints. Same loop as "
        "aah-viz train: evaluation, --resume, torchrun data parallelism. See docs/retrofit.md.",
    )
    p.add_argument("model_dir", help="a local Hugging Face model folder (config.json and weights)")
    p.add_argument("--data", required=True, help="plain-text (UTF-8) file to adapt on (the last blocks validate)")
    p.add_argument("--out", required=True, help="run directory to create (or to continue with --resume)")
    p.add_argument("--steps", type=int, default=100, help="optimiser steps (default: 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the AAH parameters and the batch order (default: 0)")
    p.add_argument(
        "--train",
        choices=TRAIN_CHOICES,
        default="aah",
        help="what adapts: aah (the AAH parameters, default), aah+head (plus the output head), all",
    )
    p.add_argument("--batch-size", type=int, default=1, help="sequences per step and rank (default: 1)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the largest window)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak AdamW learning rate (default: 1e-4)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default: 0)")
    p.add_argument("--grad-clip", type=float, default=1.0, help="gradient norm clip, 0 for none (default: 1.0)")
    p.add_argument("--eval-interval", type=int, default=50, help="evaluate every N steps and at the end (default: 50)")
    p.add_argument("--eval-batches", type=int, default=4, help="validation batches per evaluation (default: 4)")
    p.add_argument(
        "--checkpoint-interval", type=int, default=0, help="save an adapter every N steps (default 0: at the end)"
    )
    p.add_argument("--keep-checkpoints", type=int, default=2, help="newest adapters to keep; 0 saves none (default: 2)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest adapter")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--detail", choices=DETAILS, default="full", help="recording detail (default: full)")
    p.add_argument("--flush-every", type=int, default=50, help="write a Parquet segment every N steps (default: 50)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--diagnostics-csv",
        default=None,
        help="also write the per-layer, per-head windows of the last forward to this CSV (the reference's heatmap)",
    )
    from aah_viz.reporting.options import add_report_arguments

    add_report_arguments(p)
    add_output_options(p, "print a JSON summary at the end")
    add_model_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.reporting.options import report_settings
    from aah_viz.torch_import import require_torch

    report = report_settings(args)  # a missing package is refused before anything trains
    require_torch()
    from instrumentation import RetrofitConfig, retrofit_adapt

    kwargs = dict(
        model_dir=args.model_dir,
        out=args.out,
        data=args.data,
        regime=args.regime,
        steps=args.steps,
        seed=args.seed,
        train=args.train,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        weight_decay=args.weight_decay,
        grad_clip=args.grad_clip,
        eval_interval=args.eval_interval,
        eval_batches=args.eval_batches,
        checkpoint_interval=args.checkpoint_interval,
        keep_checkpoints=args.keep_checkpoints,
        resume=args.resume,
        overwrite=args.overwrite,
        detail=args.detail,
        flush_every=args.flush_every,
        device=args.device,
        threads=args.threads,
        progress=not args.no_progress,
        overrides=model_overrides(args),
        diagnostics_csv=args.diagnostics_csv,
        report=report,
    )
    if args.windows is not None:
        kwargs["windows"] = args.windows
    result = retrofit_adapt(RetrofitConfig(**kwargs))
    print(json_text(result) if args.json else f"retrofit run written to {result['run_dir']}")
    return 0
