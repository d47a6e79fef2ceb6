"""``aah-viz bench attention``: attention backends side by side at one shape and window mix.

Compares, in one process with paired rounds (``aah_viz.paired_timing``): full causal attention
(``scaled_dot_product_attention`` with ``is_causal``), ``dense_masked`` and ``banded`` (and
``flex`` / ``flash`` where they run), forward and forward+backward, and prints the median per-round
ratios with bootstrap 95% intervals, the raw times, the causal-pair coverage of the mix and each
backend's realised work as JSON.
"""

from __future__ import annotations

from aah_viz.cli._bench import pairs_bar, print_result
from aah_viz.paired_timing import add_clock_argument, add_pairs_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "attention",
        help="attention backends vs full causal attention, forward and forward+backward (JSON)",
        description="Time full causal attention (SDPA is_causal), dense_masked, banded and, where available, flex and "
        "flash on one (batch, heads, seq-len, head-dim) shape with a per-head window mix. Every round runs each "
        "variant once; ratios such as banded_vs_full_fwdbwd are medians of the per-round ratios with a bootstrap "
        "95% interval.",
    )
    parser.add_argument("--seq-len", type=int, default=4096, help="sequence length T (default 4096)")
    parser.add_argument("--heads", type=int, default=16, help="number of heads H (default 16)")
    parser.add_argument("--head-dim", type=int, default=64, help="head dimension D (default 64)")
    parser.add_argument("--batch", type=int, default=1, help="batch size B (default 1)")
    parser.add_argument(
        "--mix",
        default="paper",
        help="per-head windows: 'paper' (Table 1 Full-adaptive fractions: 10/16 at T/8, 2/16 each at T/4, T/2, T), "
        "'uniform:W', or a comma-separated list of H windows",
    )
    add_pairs_argument(parser)
    add_clock_argument(parser)
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated variants among full, dense_masked, banded, flex, flash; unavailable ones are "
        "listed under 'notes' (default: full,dense_masked,banded, plus flex,flash on CUDA; flex on CPU compiles "
        "for minutes and runs forward only)",
    )
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    parser.add_argument("--stats", action="store_true", help="also time banded with head statistics (banded_stats)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    parser.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import limit_threads

    limit_threads(args.threads)
    from instrumentation import bench_attention

    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    else:
        backends = ["full", "dense_masked", "banded"] + (["flex", "flash"] if args.device.startswith("cuda") else [])
    with pairs_bar("attention", args.pairs, unit="round") as (pairs, bar):
        result = bench_attention(
            seq_len=args.seq_len,
            heads=args.heads,
            head_dim=args.head_dim,
            batch=args.batch,
            mix=args.mix,
            pairs=pairs,
            clock=args.clock,
            backends=backends,
            device=args.device,
            dtype=args.dtype,
            stats_variant=args.stats,
            progress=bar,
        )
    if args.json:
        print_result(result)
        return 0
    summary = {key: {k: fig[k] for k in ("median", "ci95")} for key, fig in result["ratios"].items()}
    short = {"clock": result["clock"], "ratios": summary, "causal_coverage": result["causal_coverage"]}
    print_result({**short, "warnings": result["warnings"]}, keep=tuple(short), indent=None)
    return 0
