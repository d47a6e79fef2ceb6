"""``aah-viz bench dashboard``: load-plus-build time and payload of each page's heavy figures.

Generates a paper-shaped synthetic run (24 layers x 16 heads x 10,000 steps = 3.84M head rows by
default; ``--steps 100000`` for a long run) in a temporary folder, then builds every heavy figure
of every page from a freshly opened run (as a page does on a cache miss). Rounds are interleaved
across figures; ``seconds`` (wall time, what a user waits for) is the median over ``--repeats`` rounds and
``times`` keeps every round. ``payload_bytes`` is ``len(fig.to_json())``, what reaches the browser.
``peak_rss_mb`` is the process's peak resident memory, generation included. ``--pages`` times whole
pages instead (``aah_viz.dashboard.page_bench``: Streamlit's own test runner, the server's CPU
seconds, cold and warm). ``--fallback`` also times the figures that read the writer's per-update
summaries with those summaries ignored (the path of runs recorded before them), paired against
reading them (``aah_viz.paired_timing``: the median per-pair ratio with its bootstrap interval, raw
seconds of both clocks kept).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.errors import ConfigError

MAX_SECONDS = 1.5
GOAL_SECONDS = 1.0
MAX_PAYLOAD = 5_000_000
MAX_PEAK_MB = 3072

# (page, figure kind, options): the figures each page builds on a cache miss
PAGE_FIGURES = [
    ("training", "training_curves", {"smoothing": 0.6}),
    ("hierarchy", "hierarchy", {"layer": 0, "head": 3}),
    ("windows", "window_heatmap", {}),
    ("windows", "head_timeline", {"layer": 0}),
    ("windows", "branch_bars", {}),
    ("windows", "coverage_over_training", {}),
    ("windows", "bucket_heatmap", {}),
    ("stability", "stability", {}),
    ("stability", "switch_rate", {}),
    ("stability", "controller_health", {}),
    ("probes", "probe_heatmap", {"probe": "syntax"}),
    ("probes", "window_vs_probe", {"probe": "syntax"}),
    ("compare", "regime_summary", {}),
]


def add_probe_rows(run_dir: Path) -> None:
    """Per-head probe scores at the last step, shaped like ``aah-viz probe`` output."""
    import numpy as np
    import pandas as pd

    from aah_viz.runlog import RunWriter, load_run

    run = load_run(run_dir)
    last = int(run.steps()[-1])
    heads = run.table("heads", columns=["layer", "head", "window"], filters=[("step", "==", last)])
    rng = np.random.default_rng(0)
    rows = pd.DataFrame(
        {
            "step": last,
            "layer": heads["layer"].to_numpy(),
            "head": heads["head"].to_numpy(),
            "probe": "syntax",
            "metric": "uas",
            "value": rng.uniform(0, 1, len(heads)),
            "window": heads["window"].to_numpy(),
        }
    )
    writer = RunWriter.resume(run_dir)
    writer.append("probe_heads", rows)
    writer.close("finished")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _summaries_ignored(run_dir: Path, ignored: bool) -> None:
    """Flip the manifest's summary flag: readers then compute what the summaries hold from the rows."""
    from aah_viz.runlog.manifest import read_manifest, write_manifest
    from aah_viz.schema import MANIFEST_FLAG

    m = read_manifest(run_dir)
    m[MANIFEST_FLAG] = not ignored
    write_manifest(run_dir, m)


SUMMARY_KINDS = {"hierarchy", "head_timeline", "stability", "switch_rate", "controller_health"}


def _time_one(run_dir: Path, kind: str, opts: dict) -> tuple[float, int]:
    from aah_viz.figures import FIGURE_KINDS
    from aah_viz.runlog import load_run

    t0 = time.perf_counter()
    run = load_run(run_dir)
    fig = FIGURE_KINDS[kind]([run], **opts)
    text = fig.to_json()
    return time.perf_counter() - t0, len(text)


def measure(run_dir: Path, repeats: int, progress=None) -> list[dict]:
    times: dict[int, list[float]] = {i: [] for i in range(len(PAGE_FIGURES))}
    payload: dict[int, int] = {}
    for _ in range(repeats):
        for i, (_page, kind, opts) in enumerate(PAGE_FIGURES):  # interleaved: every figure once per round
            seconds, payload[i] = _time_one(run_dir, kind, opts)
            times[i].append(seconds)
            if progress is not None:
                progress.update(1)
    out = []
    for i, (page, kind, _) in enumerate(PAGE_FIGURES):
        seconds = statistics.median(times[i])
        out.append(
            {
                "page": page,
                "name": kind,
                "seconds": round(seconds, 3),
                "times": [round(t, 3) for t in times[i]],
                "payload_bytes": payload[i],
                "within_goal": seconds <= GOAL_SECONDS,
                "within_limits": seconds <= MAX_SECONDS and payload[i] <= MAX_PAYLOAD,
            }
        )
    return out


def measure_fallback(run_dir: Path, pairs: int, progress=None) -> dict:
    """Paired rounds (aah_viz.paired_timing) of each summary-reading figure: summaries ignored over
    summaries read. Each side opens the run afresh and builds the figure; its wall and CPU time."""
    from aah_viz.paired_timing import interleave, paired_report

    def side(kind: str, opts: dict, ignored: bool):
        def call() -> dict:
            _summaries_ignored(run_dir, ignored)
            try:
                wall, cpu = time.perf_counter(), time.process_time()
                _time_one(run_dir, kind, opts)
                return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
            finally:
                _summaries_ignored(run_dir, False)

        return call

    comparisons = {
        kind: (side(kind, opts, True), side(kind, opts, False))
        for _, kind, opts in PAGE_FIGURES
        if kind in SUMMARY_KINDS
    }
    raw = interleave(comparisons, pairs=max(2, pairs), warmup=0, progress=progress)
    return paired_report(raw, sides={k: ("without_summaries", "with_summaries") for k in comparisons}, clock="wall")


def run(args) -> int:
    from tqdm import tqdm

    from aah_viz.samples import make_synthetic_run

    if args.logs is not None or args.page or args.runs is not None or args.address:
        if not args.pages:
            raise ConfigError("--logs, --page, --runs and --address time whole pages: add --pages")
        address_query(args.address)  # a bad one is refused before anything runs
        if args.runs is not None and args.runs < 1:
            raise ConfigError(f"--runs {args.runs}: give one run or more")
        from aah_viz.dashboard.app import PAGE_FILES

        unknown = [p for p in args.page if p not in PAGE_FILES]
        if unknown:
            raise ConfigError(f"--page {unknown[0]}: not a page; choose from {', '.join(PAGE_FILES)}")
    if args.logs is not None:
        if not Path(args.logs).is_dir():
            raise ConfigError(f"--logs {args.logs} is not a folder; give a folder holding runs")
        from aah_viz.runlog import run_dirs
        from aah_viz.runlog.containment import refuse_escapes

        for run in run_dirs([args.logs]):  # a run with a link out is refused, not timed through the link
            refuse_escapes(run, "timed")
        return _pages(args, Path(args.logs), None)
    if args.runs is not None:
        return _many_runs_pages(args)

    with tempfile.TemporaryDirectory(prefix="aah-viz-bench-") as tmp:
        run_dir = Path(tmp) / "paper-shaped"
        t0 = time.perf_counter()
        print(f"generating a {args.layers} x {args.heads} x {args.steps} synthetic run ...", file=sys.stderr)
        make_synthetic_run(
            run_dir,
            n_layer=args.layers,
            n_head=args.heads,
            steps=args.steps,
            windows=(512, 1024, 2048, 4096),
            seq_len=4096,
            flush_every=args.flush_every,
        )
        add_probe_rows(run_dir)
        generated = time.perf_counter() - t0
        generate_peak = _peak_rss_mb()
        if args.pages:
            return _pages(args, Path(tmp), generated)
        with tqdm(total=args.repeats * len(PAGE_FIGURES), desc="figures", file=sys.stderr, disable=args.quiet) as bar:
            figures = measure(run_dir, args.repeats, bar)
        fallback = None
        if args.fallback:
            with tqdm(total=max(2, args.repeats), desc="pairs", file=sys.stderr, disable=args.quiet) as bar:
                fallback = measure_fallback(run_dir, args.repeats, bar)
    peak = _peak_rss_mb()
    result = {
        "figures": figures,
        "run": {
            "n_layer": args.layers,
            "n_head": args.heads,
            "steps": args.steps,
            "head_rows": args.layers * args.heads * args.steps,
            "generate_seconds": round(generated, 1),
        },
        "memory": {
            "peak_rss_mb": round(peak, 1),
            "peak_rss_mb_after_generation": round(generate_peak, 1),
            "limit_mb": MAX_PEAK_MB,
            "within_limit": peak <= MAX_PEAK_MB,
        },
        "limits": {"seconds": MAX_SECONDS, "goal_seconds": GOAL_SECONDS, "payload_bytes": MAX_PAYLOAD},
        "repeats": args.repeats,
        "slowest_seconds": max(f["seconds"] for f in figures),
        "all_within_limits": all(f["within_limits"] for f in figures) and peak <= MAX_PEAK_MB,
    }
    if fallback is not None:
        result["without_summaries"] = fallback
    if args.json:
        print(json_text(result, indent=2))
    else:
        for f in figures:
            flag = "" if f["within_limits"] else "  OVER LIMIT"
            extra = ""
            if fallback is not None and f["name"] in fallback["ratios"]:
                extra = f"  (without summaries x{fallback['ratios'][f['name']]['median']:.1f})"
            print(
                f"{f['page']:10s} {f['name']:24s} {f['seconds']:6.2f} s {f['payload_bytes'] / 1e3:9.1f} kB{flag}{extra}"
            )
        print(f"peak memory {peak:.0f} MB (limit {MAX_PEAK_MB} MB), generation {generated:.0f} s")
    return 0


def _many_runs_pages(args) -> int:
    """The pages on ``--runs`` runs of the sample runs' shape (``_many_runs``) under one logs root: first
    with each run's ``summary.json``, then with those deleted (runs recorded before them: every figure
    of the run list computed from the tables), in one process; the ratios side by side."""
    from tqdm import tqdm

    from aah_viz.cli._many_runs import SHAPE, drop_summaries, make_many_runs
    from aah_viz.dashboard import live_bench, page_bench

    chosen = list(args.page) or None
    with tempfile.TemporaryDirectory(prefix="aah-viz-bench-runs-") as tmp:
        t0 = time.perf_counter()
        with tqdm(total=args.runs, desc="runs", file=sys.stderr, disable=args.quiet) as bar:
            made = make_many_runs(Path(tmp), args.runs, args.steps, flush_every=args.flush_every, progress=bar)
        made["generate_seconds"] = round(time.perf_counter() - t0, 1)
        sides = {}
        for side in ("with_summaries", "without_summaries"):
            if side == "without_summaries":
                live = live_bench.measure_live(Path(tmp), SHAPE)  # idle cost and a new run's latency, with summaries
                made["summaries_dropped"] = drop_summaries(Path(tmp))
            with tqdm(total=len(chosen or _page_urls()), desc=side, file=sys.stderr, disable=args.quiet) as bar:
                sides[side] = page_bench.measure_pages(
                    Path(tmp), warm_rounds=args.repeats, pages=chosen, progress=bar, address=address_query(args.address)
                )
    pages = sides["with_summaries"]
    ratios = {
        name: {
            clock: round(sides["without_summaries"][name][clock] / max(p[clock], 1e-9), 2)
            for clock in ("cold_cpu_s", "warm_cpu_s")
        }
        for name, p in pages.items()
    }
    result = {
        "pages": pages,
        "without_summaries": sides["without_summaries"],
        "ratios_without_over_with": ratios,
        "run": made,
        "live_refresh": live,
        **_page_figures(pages, args.repeats),
    }
    if args.json:
        print(json_text(result, indent=2))
        return 0
    print(f"{'page':10s} {'cold CPU s':>10s} {'warm CPU s':>10s}   without summaries: {'cold':>6s} {'warm':>6s}")
    for name, p in pages.items():
        old = sides["without_summaries"][name]
        print(
            f"{name:10s} {p['cold_cpu_s']:10.2f} {p['warm_cpu_s']:10.2f}   {'':19s}{old['cold_cpu_s']:6.2f} "
            f"{old['warm_cpu_s']:6.2f}  (x{ratios[name]['cold_cpu_s']:.1f} cold)"
        )
    idle, new = live["idle"], live["new_run"]
    print(
        f"live refresh, idle tab: {idle['idle_cpu_s_per_30s']:.3f} CPU s per 30 s (before: "
        f"{idle['before_cpu_s_per_30s']:.3f}); a new run's row within {new['latency_s_at_most']:.1f} s"
    )
    print(f"{made['n_runs']} runs of 4 x 12 x {args.steps}; peak memory {result['peak_rss_mb']:.0f} MB")
    return 0


def _page_figures(pages: dict, warm_rounds: int) -> dict:
    """What every page benchmark reports beside its pages: the goals, the slowest page, peak memory."""
    from aah_viz.dashboard import page_bench

    return {
        "goals": {"warm_cpu_s": page_bench.GOAL_WARM_CPU_S, "cold_cpu_s": page_bench.GOAL_COLD_CPU_S},
        "warm_rounds": warm_rounds,
        "slowest_cold_cpu_s": max(p["cold_cpu_s"] for p in pages.values()),
        "slowest_warm_cpu_s": max(p["warm_cpu_s"] for p in pages.values()),
        "all_within_goal": all(p["within_goal"] for p in pages.values()),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def _page_urls() -> list[str]:
    from aah_viz.dashboard.app import PAGE_FILES

    return list(PAGE_FILES)


def address_query(text: str | None) -> dict:
    """``--address 'a=1&b=2'`` as query parameters (a leading ``?`` or a whole URL's query part taken too)."""
    from urllib.parse import parse_qsl

    if not text:
        return {}
    try:
        pairs = parse_qsl(text.split("?", 1)[-1], keep_blank_values=True, strict_parsing=True)
    except ValueError:
        pairs = []
    if not pairs:
        raise ConfigError(f"--address {text!r}: give name=value pairs joined by &, as an address's query")
    return dict(pairs)


def _pages(args, logs_root: Path, generated: float | None) -> int:
    """Whole pages through Streamlit's test runner, cold and warm, in server CPU seconds; on the
    generated run, or on the runs under ``--logs`` (``generated`` None)."""
    from tqdm import tqdm

    from aah_viz.dashboard import page_bench
    from aah_viz.dashboard.app import PAGES

    chosen = list(args.page) or None
    with tqdm(total=len(chosen or PAGES), desc="pages", file=sys.stderr, disable=args.quiet) as bar:
        pages = page_bench.measure_pages(
            logs_root, warm_rounds=args.repeats, pages=chosen, progress=bar, address=address_query(args.address)
        )
    what = (
        {"logs": str(logs_root)}
        if generated is None
        else {
            "n_layer": args.layers,
            "n_head": args.heads,
            "steps": args.steps,
            "head_rows": args.layers * args.heads * args.steps,
            "generate_seconds": round(generated, 1),
        }
    )
    result = {
        "pages": pages,
        "run": what,
        **_page_figures(pages, args.repeats),
    }
    if args.json:
        print(json_text(result, indent=2))
    else:
        print(f"{'page':10s} {'cold CPU s':>10s} {'warm CPU s':>10s} {'cold wall s':>11s} {'warm wall s':>11s}")
        for name, p in pages.items():
            flag = "" if p["within_goal"] else "  OVER GOAL" + (" (page errors)" if p["problems"] else "")
            print(
                f"{name:10s} {p['cold_cpu_s']:10.2f} {p['warm_cpu_s']:10.2f} {p['cold_wall_s']:11.2f} "
                f"{p['warm_wall_s']:11.2f}{flag}"
            )
        shape = f"runs under {logs_root}" if generated is None else f"{args.layers} x {args.heads} x {args.steps} run"
        print(f"goals: warm < {page_bench.GOAL_WARM_CPU_S} CPU s, cold < {page_bench.GOAL_COLD_CPU_S} CPU s; {shape}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="time and size each dashboard page's heavy figures on a paper-shaped run",
        description="Generate a paper-shaped synthetic run and print, per page figure, the median load-plus-build "
        f"time and the JSON payload size (limits: {MAX_SECONDS} s, goal {GOAL_SECONDS} s, "
        f"{MAX_PAYLOAD / 1e6:.0f} MB), and the process's peak memory (limit {MAX_PEAK_MB} MB).",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--layers", type=int, default=24, help="layers of the generated run (default 24)")
    p.add_argument("--heads", type=int, default=16, help="heads per layer (default 16)")
    p.add_argument("--steps", type=int, default=10_000, help="training steps (default 10000)")
    p.add_argument("--flush-every", type=int, default=500, help="steps per Parquet segment (default 500)")
    p.add_argument(
        "--repeats", type=int, default=3, help="rounds over all figures; seconds is their median (default 3)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--logs",
        default=None,
        help="with --pages: time the pages on the runs under this folder instead of a generated run "
        "(each page opens on its default run)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="with --pages: time the pages on this many generated runs of the sample runs' shape (4 x 12 heads, "
        "--steps each, varied regimes and seeds, one in 50 still running) under one logs root",
    )
    p.add_argument(
        "--page",
        action="append",
        default=[],
        help="with --pages: time only this page (its address, e.g. lens; repeatable)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="with --pages: the address query each page opens with, as a copied link gives it, e.g. "
        "'run=smollm2_wikitext/frontier-full_adaptive&layer=14&head=3&doc=2' (default: none)",
    )
    p.add_argument(
        "--pages",
        action="store_true",
        help="time whole pages instead, through Streamlit's test runner: the server's CPU seconds to draw "
        "each page cold (caches cleared) and warm (the median of --repeats redraws)",
    )
    p.add_argument(
        "--fallback",
        action="store_true",
        help="also time the summary-reading figures with the summaries ignored (older runs), paired per round",
    )
    p.set_defaults(func=run)
