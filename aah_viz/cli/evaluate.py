"""``aah-viz evaluate``: a stand-alone inference pass that writes an ``inference`` event."""

from __future__ import annotations

import argparse

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options, add_source_argument
from aah_viz.cli.train import add_overrides_argument


def windows_arg(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(w) for w in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--windows expects ascending integers, e.g. 512,1024,2048,4096; got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("--windows needs at least one window")
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"--windows expects positive windows in tokens; got {text!r}")
    return values


def sink_tokens_arg(text: str) -> tuple[int, ...]:
    """``--sink-tokens 1,4``: distinct positive counts of first positions kept visible (sink_tokens)."""
    try:
        values = tuple(sorted({int(k) for k in text.replace(",", " ").split()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sink-tokens expects positive integers, e.g. 1,4; got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--sink-tokens expects positive integers, e.g. 1,4; got {text!r}")
    return values


def add_model_options(p) -> None:
    """Options that patch a Hugging Face model folder (shared by evaluate, retrofit and profile)."""
    p.add_argument(
        "--regime",
        default="full_adaptive",
        help="routing regime for a model folder (aah-viz regimes lists all; default: full_adaptive)",
    )
    p.add_argument(
        "--windows",
        type=windows_arg,
        default=None,
        help="candidate windows in tokens, comma-separated (default for a model folder: 512,1024,2048,4096)",
    )
    p.add_argument(
        "--window", type=int, default=None, help="window of fixed_window / sliding_window / local_global_layers"
    )
    p.add_argument("--backend", default=None, help="attention backend (default for a model folder: banded)")
    add_overrides_argument(
        p, "override an AAH config key of a patched model (repeatable), e.g. --set control_interval=10"
    )
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")


def model_overrides(args) -> dict:
    overrides = dict(args.overrides)
    if args.window is not None:
        overrides["window"] = args.window
    if args.backend is not None:
        overrides["attention_backend"] = args.backend
    return overrides


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="stand-alone inference pass of a run's checkpoint or a (patched) Hugging Face model",
        description="Evaluate a run of aah-viz train or aah-viz retrofit at a checkpoint, or a Hugging Face model "
        "folder patched with a regime, on a text: loss, perplexity, tokens/s, elapsed time, peak memory, ACR, "
        "causal-pair coverage, realised work and the executed windows, written as an inference event "
        "(aah-viz export --table inference). Routing is frozen as loaded unless --reference-eval. "
        "See docs/retrofit.md.",
    )
    add_source_argument(p)
    p.add_argument("--data", required=True, help="plain-text (UTF-8) file to evaluate on")
    p.add_argument(
        "--out",
        required=True,
        help="run directory for the inference event: the source run itself (appended) or a new folder",
    )
    p.add_argument("--checkpoint", type=int, default=None, help="checkpoint or adapter step (default: the newest)")
    p.add_argument("--adapter", default=None, help="adapter file (.safetensors) to load onto a model folder")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the config's block_size)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per forward (default: 1)")
    p.add_argument("--batches", type=int, default=None, help="evaluate at most N batches (default: all of --data)")
    p.add_argument(
        "--reference-eval",
        action="store_true",
        help="let evaluation forwards update routing, as the reference does (needed to reproduce the paper's "
        "Table 2); by default routing stays as loaded",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    add_output_options(p, "print the measured figures as JSON")
    add_source_options(p)
    add_model_options(p)
    p.set_defaults(func=run)


def add_source_options(p) -> None:
    """Options of commands that load a source to run it (evaluate and profile)."""
    p.add_argument(
        "--model",
        default=None,
        help="the base model folder of a retrofit run, where it is not where the run records it (default: the "
        "folder its manifest names)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; on a shared machine fewer threads can be faster)",
    )


def load_model(args):
    """The model ``--source`` names (run, checkpoint, model folder, adapter), as evaluate and profile load it."""
    from aah_viz.torch_import import require_torch

    require_torch()
    from instrumentation import check_device, load_for_evaluation

    check_device(args.device)  # an unknown device is the argument's fault, never the checkpoint's
    from aah_viz.torch_import import limit_threads

    limit_threads(args.threads)
    return load_for_evaluation(
        args.source,
        checkpoint=args.checkpoint,
        base_model=args.model,
        regime=args.regime,
        windows=args.windows,
        overrides=model_overrides(args),
        adapter=args.adapter,
        device=args.device,
    )


def run(args) -> int:
    loaded = load_model(args)
    from instrumentation import evaluate_loaded, inference_summary, write_inference

    detail = evaluate_loaded(
        loaded,
        args.data,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        max_batches=args.batches,
        reference_eval=args.reference_eval,
        progress=not args.no_progress,
    )
    from aah_viz.torch_import import require_torch

    detail["threads"] = require_torch().get_num_threads()  # tokens_per_s depends on it
    out = write_inference(args.out, loaded, detail, overwrite=args.overwrite)
    if args.json:
        print(json_text(inference_summary(detail)))
    else:
        print(f"inference event written to {out}: val_loss {detail['val_loss']:.4f}, ACR {detail['acr']:.3f}")
    return 0
