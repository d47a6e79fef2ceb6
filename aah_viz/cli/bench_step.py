"""``aah-viz bench step``: one whole training step of AAH (banded execution) vs full attention.

A training step is forward, backward and an AdamW step of the whole model on one batch. The
AAH model is regime ``full_adaptive`` with ``attention_backend="banded"``; the baseline is
regime ``full_attention``. Both run at a sequence length where windows matter (candidate
windows T/8, T/4, T/2, T by default), past warm-up so that the controller's windows are
executed, in paired rounds (``aah_viz.paired_timing``): ``ratios.aah_vs_full_step`` is the median
of the per-round ratios with a bootstrap 95% interval.
"""

from __future__ import annotations

from aah_viz.cli._bench import pairs_bar, print_result
from aah_viz.paired_timing import add_clock_argument, add_pairs_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "step",
        help="a whole training step of full_adaptive (banded) vs full_attention (JSON)",
        description="Time forward + backward + AdamW step of the full_adaptive regime with the banded backend "
        "against the full_attention regime on the same preset shape in paired rounds, and print the median "
        "per-round ratio aah_vs_full_step with a bootstrap 95% interval as JSON, with the windows the AAH model "
        "executed; the same AAH model with stats_on_update_only runs in the same rounds "
        "(aah_stats_on_update_only_vs_aah_step).",
    )
    parser.add_argument("--preset", default="small", help="size preset (default small)")
    parser.add_argument("--seq-len", type=int, default=1024, help="sequence length T, sets block_size (default 1024)")
    parser.add_argument(
        "--windows",
        default=None,
        help="comma-separated candidate windows (default T/8,T/4,T/2,T, the paper's ratios)",
    )
    parser.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    add_pairs_argument(parser)
    add_clock_argument(parser)
    parser.add_argument("--backend", default="banded", help="attention_backend of the AAH model (default banded)")
    parser.add_argument("--dropout", type=float, default=None, help="override the preset's dropout")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: on shared cores, single-threaded steps are not distorted by "
        "other processes preempting a parallel region; 0 = torch's choice)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    parser.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import limit_threads

    limit_threads(args.threads)
    from aah_viz.errors import ConfigError
    from instrumentation import bench_step

    windows = None
    if args.windows:
        try:
            windows = [int(w) for w in args.windows.split(",") if w.strip()]
        except ValueError:
            raise ConfigError(f"--windows {args.windows!r}: expected comma-separated integers") from None
    with pairs_bar("step", args.pairs, extra=2, unit="step") as (pairs, bar):
        result = bench_step(
            preset=args.preset,
            seq_len=args.seq_len,
            windows=windows,
            batch=args.batch,
            pairs=pairs,
            clock=args.clock,
            backend=args.backend,
            dropout=args.dropout,
            progress=bar,
        )
    keep = ("clock", "ratios", "medians_s", "executed_causal_coverage", "warnings")
    print_result(result, keep=None if args.json else keep)
    return 0
