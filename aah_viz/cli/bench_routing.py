"""``aah-viz bench routing``: one routing update per layer next to that layer's attention forward.

A routing update is everything the control path does at a control step (head features, feature
EMA, clustering, hierarchy, controller, selection); the attention forward is the layer's Q/K/V
projection, execution (``--backend``, banded by default) and output projection, routing cached. Both are timed at a
preset's shape (``--seq-len`` sets T) for several head counts in paired rounds; each ratio is the median
per-round ratio with a bootstrap 95% interval (``aah_viz.paired_timing``). ``--feature-token-stride S``
adds the update under the approximate ``feature_token_stride=S`` option, timed in the same rounds.
"""

from __future__ import annotations

from aah_viz.cli._bench import print_result
from aah_viz.paired_timing import add_clock_argument, add_pairs_argument, check_pairs, resolve_clock


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "routing",
        help="routing-update time per layer vs that layer's attention forward (JSON)",
        description="Time one AAH-v3 routing update of one layer (features, EMA, clustering, hierarchy, controller, "
        "selection) next to the same layer's attention forward at a preset's shape, for several head counts, in "
        'paired rounds. Prints {"rows": [{"heads", "seq_len", "routing_update_ms", "attention_forward_ms", '
        '"ratio": {"median", "ci95", ...}}, ...]}: the median per-round ratio with a bootstrap 95% interval.',
    )
    parser.add_argument(
        "--heads", default="8,16,32,64", help="comma-separated head counts (each must divide the preset's n_embd)"
    )
    parser.add_argument("--preset", default="small", help="size preset whose layer is timed (default small)")
    parser.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="sequence length T, with candidate windows T/8, T/4, T/2, T (default: the preset's block_size)",
    )
    add_pairs_argument(parser)
    add_clock_argument(parser)
    parser.add_argument("--batch", type=int, default=4, help="batch size of the attention input")
    parser.add_argument("--regime", default="full_adaptive", help="regime whose update path is timed")
    parser.add_argument(
        "--backend",
        default="banded",
        help="attention_backend of the timed layer's forward (default banded, the fast exact backend; "
        "dense_masked is the presets' reference backend)",
    )
    parser.add_argument(
        "--feature-token-stride",
        type=int,
        default=1,
        help="also time the update with the approximate feature_token_stride option at this stride, in the same "
        'rounds (each row\'s "strided"; default 1: only the exact update)',
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    parser.add_argument("--json", action="store_true", help="print JSON (the default output; kept for symmetry)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.torch_import import limit_threads

    limit_threads(max(1, args.threads))
    from instrumentation import bench_routing

    try:
        heads = [int(h) for h in str(args.heads).split(",") if h.strip()]
    except ValueError as err:
        raise ConfigError(f"--heads: expected comma-separated integers, got {args.heads!r}") from err
    if not heads or min(heads) < 1:
        raise ConfigError(f"--heads {args.heads!r}: give positive head counts, e.g. 8,16")
    if args.seq_len is not None and args.seq_len < 2:
        raise ConfigError(f"--seq-len {args.seq_len}: must be at least 2")
    result = bench_routing(
        heads,
        preset=args.preset,
        seq_len=args.seq_len,
        pairs=check_pairs(args.pairs),
        clock=resolve_clock(args.clock, "cpu"),
        batch=max(1, args.batch),
        regime=args.regime,
        backend=args.backend,
        feature_token_stride=args.feature_token_stride,
    )
    print_result(result)
    return 0
