"""``aah-viz bench generate``: cached generation with the per-head bounded cache against the unpatched model's."""

from __future__ import annotations

from aah_viz.cli._bench import (
    add_device_arguments,
    add_random_model_arguments,
    pairs_bar,
    print_result,
)
from aah_viz.paired_timing import resolve_clock


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate",
        help="decode tokens/s and KV-cache bytes: patched model with WindowedKVCache vs unpatched (JSON ratios)",
        description="Patch a copy of a model (a Hugging Face folder, or a random Llama built from one seed: no "
        "download) with regime full_adaptive, candidate windows T/8, T/4, T/2, T for the prompt length T and every "
        "layer executing the paper's window mix; prefill one prompt of random tokens into WindowedKVCache (each "
        "key/value head keeps what its windows reach) and, for the unpatched model, into its own cache; time the "
        "greedy decode steps of both in interleaved pairs. Prints the median per-pair ratio of decode tokens/s with "
        "a bootstrap 95 percent interval, the bytes each cache holds and the share the windows predict, as JSON. "
        "See docs/retrofit.md.",
    )
    p.add_argument("--prompt-len", type=int, default=1024, help="prompt tokens T (default 1024)")
    p.add_argument(
        "--new-tokens",
        type=int,
        default=64,
        help="tokens to generate; all but the first are timed decode steps (default 64)",
    )
    p.add_argument("--batch", type=int, default=1, help="prompts per batch (default 1)")
    p.add_argument(
        "--sink-tokens",
        type=int,
        default=0,
        help="the patched model keeps the first k positions visible to every query, and its cache keeps them "
        "(sink_tokens; default 0)",
    )
    add_random_model_arguments(p, "Llama")
    add_device_arguments(p)
    p.add_argument("--json", action="store_true", help="print the whole JSON document (raw times included)")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import limit_threads

    limit_threads(args.threads)
    from instrumentation import bench_generate

    with pairs_bar("generate", args.pairs) as (pairs, bar):
        doc = bench_generate(
            model_dir=args.model,
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
            batch=args.batch,
            n_layer=args.layers,
            n_head=args.heads,
            n_kv=args.kv_heads,
            head_dim=args.head_dim,
            pairs=pairs,
            clock=resolve_clock(args.clock, args.device),
            device=args.device,
            progress=bar,
            sink_tokens=args.sink_tokens,
        )
    print_result(doc, keep=None if args.json else ("clock", "ratios", "decode_tokens_per_s", "kv_cache", "warnings"))
    return 0
