"""``aah-viz bench hooks``: what the recorder costs a training step (the measurement and its fields
are described in ``instrumentation.bench.hooks``)."""

from __future__ import annotations

import sys

from aah_viz.cli._json import json_text
from aah_viz.paired_timing import add_clock_argument, resolve_clock


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hooks",
        help="recorder overhead: step time with and without the recorder, and bytes written per step",
        description="Train the same model twice, interleaved step by step, with and without the routing "
        "recorder (with --report-every, a third time: recorded and reporting its aah/ scalars), and print the "
        "median per-step-pair ratio with a bootstrap 95% interval, the ratio of median "
        "step times and the bytes written per step as JSON.",
    )
    p.add_argument(
        "--preset", default="small", choices=("tiny", "small", "paper-1b"), help="model size (default: small)"
    )
    p.add_argument("--regime", default="full_adaptive", help="routing regime (default: full_adaptive)")
    p.add_argument(
        "--detail", default="full", choices=("full", "light", "minimal"), help="recorder detail (default: full)"
    )
    p.add_argument("--steps", type=int, default=100, help="timed steps per variant (default: 100)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the medians (default: 5)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=4,
        help="sequences per step (default: 4, what aah-viz train uses at the small preset)",
    )
    p.add_argument("--flush-every", type=int, default=50, help="recorder flush cadence in steps (default: 50)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1, steadier timings)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--out", default=None, help="keep the recorded run in this new folder (default: a temporary folder)")
    p.add_argument(
        "--report-every",
        type=int,
        default=0,
        metavar="N",
        help="also time a third model that reports its aah/ scalars every N steps, a trainer's logging cadence "
        "(default: 0, not timed; 50 is Lightning's default cadence)",
    )
    p.add_argument(
        "--report-to",
        default="tensorboard",
        choices=("tensorboard", "wandb", "mlflow", "none"),
        help="where the reporting model sends them (default: tensorboard, event files beside the run; "
        "none: computed, sent nowhere)",
    )
    add_clock_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON (the only output format; accepted for symmetry)")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.torch_import import limit_threads, require_torch

    if args.report_every < 0:
        raise ConfigError(f"--report-every must be >= 0, got {args.report_every}")
    if not 0 <= args.skip < args.steps:  # the medians need at least one timed step
        raise ConfigError(f"--skip {args.skip}: must be from 0 to --steps - 1 ({args.steps - 1})")
    if args.report_every and args.report_to != "none":
        from aah_viz.reporting.options import check_installed

        check_installed([args.report_to])
    require_torch()
    from instrumentation import bench_hooks

    limit_threads(args.threads)
    result = bench_hooks(
        preset=args.preset,
        regime=args.regime,
        detail=args.detail,
        steps=args.steps,
        skip=args.skip,
        batch_size=args.batch_size,
        flush_every=args.flush_every,
        seed=args.seed,
        out=args.out,
        clock=resolve_clock(args.clock, "cpu"),
        report_every=args.report_every,
        report_to=args.report_to,
    )
    print(json_text(result, indent=None))
    for line in result["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    return 0
