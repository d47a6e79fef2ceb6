"""``aah-viz profile``: per head, how much attention mass each candidate window keeps (``head_spans``)."""

from __future__ import annotations

from aah_viz.cli._options import add_source_argument
from aah_viz.cli.evaluate import add_model_options, add_source_options, load_model, sink_tokens_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="per head: attention mass inside each candidate window and the smallest window keeping 95 or 99 percent",
        description="Run a run's checkpoint or a (patched) Hugging Face model with full causal attention on a text "
        "and measure, per head, the share of its attention mass inside each candidate window and the smallest "
        "window that keeps 95% and 99% of it, beside the window routing executes. Writes the head_spans table "
        "and a profile event into --out (the source run itself or a new folder). See docs/retrofit.md.",
    )
    add_source_argument(p)
    p.add_argument("--data", required=True, help="plain-text (UTF-8) file to profile on")
    p.add_argument("--out", required=True, help="run directory: the source run itself (appended) or a new folder")
    p.add_argument("--checkpoint", type=int, default=None, help="checkpoint or adapter step (default: the newest)")
    p.add_argument("--adapter", default=None, help="adapter file (.safetensors) to load onto a model folder")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the config's block_size)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per forward (default: 1)")
    p.add_argument("--batches", type=int, default=4, help="batches to profile (default: 4)")
    p.add_argument(
        "--sink-tokens",
        type=sink_tokens_arg,
        default=(),
        help="also report each head's needed window (95%% and 90%% of its mass) with the first k positions kept "
        "besides the window, for each k given, e.g. 1,4 (the profile event's needed_with_sinks)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--no-progress", action="store_true", help="accepted for symmetry; profiling prints one line")
    add_source_options(p)
    add_model_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    loaded = load_model(args)
    from instrumentation import profile_source

    out, detail = profile_source(
        loaded,
        args.data,
        args.out,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        max_batches=args.batches,
        overwrite=args.overwrite,
        sink_tokens=args.sink_tokens,
    )
    print(
        f"head_spans written to {out}: {detail['heads_cut_below_95']} of {detail['heads']} heads execute a window "
        "below the one that keeps 95% of their attention mass"
    )
    for k, means in (detail.get("needed_mean") or {}).items():
        label = "without sinks" if k == "none" else f"with {k} sink token{'s' if k != '1' else ''} kept"
        print(
            f"  needed window {label}: {means['needed_95']:.0f} tokens at 95% of the mass, "
            f"{means['needed_90']:.0f} at 90% (mean over heads)"
        )
    if "first_token_share_mean" in detail:
        print(
            f"  first token: {detail['first_token_share_mean']:.1%} of the attention of queries beyond "
            f"{detail['first_token_from']} tokens (a window that size drops it); "
            f"{detail['heads_first_token_over_half']} of {detail['heads']} heads put more than half there"
        )
    return 0
