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
    p.add_argument(
        "--retrieval",
        type=int,
        default=0,
        metavar="N",
        help="also find the heads a passkey check needs: N questions at each of five depths (a five-digit key in "
        "filler, prompts --seq-len long), asked with every head at full attention and then with each head alone "
        "cut to --retrieval-window (the head_retrieval table; one forward per question per head) (default: 0, none)",
    )
    p.add_argument(
        "--retrieval-window",
        type=int,
        default=None,
        metavar="W",
        help="the window each head is cut to alone for --retrieval, keeping the first k positions for the largest "
        "k of --sink-tokens (default: the smallest candidate window below --seq-len, else an eighth of it)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (--retrieval shows one per head)")
    add_source_options(p)
    add_model_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.errors import ConfigError

    if not 0 <= args.retrieval <= 1000:
        raise ConfigError(f"--retrieval {args.retrieval}: give the passkey questions per depth, from 0 to 1000")
    if args.retrieval_window is not None and not args.retrieval:
        raise ConfigError("--retrieval-window needs --retrieval N (the questions the cut heads are asked)")
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
        retrieval=args.retrieval,
        retrieval_window=args.retrieval_window,
        progress=not args.no_progress,
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
    found = detail.get("head_retrieval")
    if found:
        print(
            f"  passkey: {found['baseline_retrieved']} of {found['asked']} answered with every head at full attention; "
            f"{found['heads_losing_any']} of {found['heads']} heads lose answers when cut alone to {found['window']} "
            f"tokens{' + ' + str(found['sink_tokens']) + ' sinks' if found['sink_tokens'] else ''} "
            f"({found['heads_losing_half']} lose half or more)"
        )
    return 0
