"""``aah-viz bench retrofit``: a patched model (random Qwen3, or ``--model DIR``) against itself unpatched."""

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
        "retrofit",
        help="patched (full_adaptive, banded) vs unpatched forward+backward of a model (JSON ratios)",
        description="Build a random Qwen3 (no download) from one seed, or load --model DIR, patch copies with regime "
        "full_adaptive (banded backend, candidate windows T/8, T/4, T/2, T): one executing the paper's window mix, "
        "one routing live, one running the soft-mixture step aah-viz retrofit trains with (all candidate windows "
        "mixed, gradients for the AAH parameters only); and one with full_attention; time forward + backward of each "
        "against the unpatched model in interleaved pairs, and the forward pass alone (no gradients) of the paper "
        "mix and of the full-attention patch against the unpatched forward. Prints the median per-pair ratios with "
        "bootstrap 95% intervals, the windows and their causal coverage as JSON.",
    )
    p.add_argument("--seq-len", type=int, default=1024, help="sequence length T (default 1024)")
    add_random_model_arguments(p, "Qwen3")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    from aah_viz.cli.evaluate import windows_arg

    p.add_argument(
        "--windows", type=windows_arg, default=None, help="comma-separated candidate windows (default T/8,T/4,T/2,T)"
    )
    p.add_argument("--backend", default="banded", help="attention backend of the patched model (default banded)")
    p.add_argument(
        "--sink-tokens",
        type=int,
        default=0,
        help="the routed variants keep the first k positions visible to every query (sink_tokens; default 0)",
    )
    add_device_arguments(p)
    p.add_argument("--json", action="store_true", help="print only the JSON document")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import limit_threads

    limit_threads(args.threads)
    from instrumentation import bench_retrofit

    windows = args.windows
    with pairs_bar("retrofit", args.pairs) as (pairs, bar):
        doc = bench_retrofit(
            seq_len=args.seq_len,
            n_layer=args.layers,
            n_head=args.heads,
            n_kv=args.kv_heads,
            head_dim=args.head_dim,
            batch=args.batch,
            windows=windows,
            backend=args.backend,
            pairs=pairs,
            clock=resolve_clock(args.clock, args.device),
            device=args.device,
            model_dir=args.model,
            progress=bar,
            sink_tokens=args.sink_tokens,
        )
    keep = ("clock", "ratios", "paper_mix_causal_coverage", "live_routing_window_share", "warnings")
    print_result(doc, keep=None if args.json else keep)
    return 0
