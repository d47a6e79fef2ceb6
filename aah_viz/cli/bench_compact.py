"""``aah-viz bench compact``: reading ``heads`` of a run of many small segments, before and after compaction.

Generates a synthetic run flushed every step (one segment per table and step), copies it, compacts
the copy, then times ``load_run(path).table("heads")`` on both in paired rounds
(``aah_viz.paired_timing``) and reports ``ratios.after_vs_before_read`` (the median per-round ratio
with a bootstrap 95% interval), the median seconds and whether the two reads gave the same rows.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.errors import ConfigError
from aah_viz.paired_timing import (
    add_clock_argument,
    add_pairs_argument,
    by_clock,
    check_pairs,
    paired_report,
    resolve_clock,
    round_robin,
    timed,
)

MAX_SECONDS_AFTER = 0.1  # the target for a compacted 5,000-segment run


def _reader(path: Path, frames: dict, name: str):
    """A timed side that reads the run's heads table and keeps the rows it read."""
    from aah_viz.runlog import load_run

    def read():
        frames[name] = load_run(path).table("heads")

    return timed(read)


def run(args) -> int:
    from aah_viz.runlog import load_run
    from aah_viz.runlog.compact import compact_run
    from aah_viz.samples import make_synthetic_run

    for flag, value, lo, hi in (
        ("--segments", args.segments, 2, 1_000_000),
        ("--layers", args.layers, 1, 1024),
        ("--heads", args.heads, 1, 1024),
    ):
        if not lo <= value <= hi:
            raise ConfigError(f"{flag} {value}: give a whole number from {lo} to {hi}")
    with tempfile.TemporaryDirectory(prefix="aah-viz-bench-") as tmp:
        before = Path(tmp) / "segments"
        print(f"generating a run of {args.segments} heads segments ...", file=sys.stderr)
        make_synthetic_run(before, n_layer=args.layers, n_head=args.heads, steps=args.segments, flush_every=1)
        after = Path(tmp) / "compacted"
        shutil.copytree(before, after)
        t0 = time.perf_counter()
        compact_run(after)
        compact_seconds = time.perf_counter() - t0
        pairs, clock = check_pairs(args.pairs), resolve_clock(args.clock, "cpu")
        frames = {}
        sides = {name: _reader(path, frames, name) for name, path in (("before", before), ("after", after))}
        times = round_robin(sides, pairs=pairs)
        key = "after_vs_before_read"
        doc = paired_report({key: (times["after"], times["before"])}, sides={key: ("after", "before")}, clock=clock)
        seconds = {name: statistics.median(by_clock(values)[clock]) for name, values in times.items()}
        result = {
            "clock": clock,
            "ratios": doc["ratios"],
            "segments_before": len(load_run(before).segments("heads")),
            "files_after": len(load_run(after).segments("heads")),
            "head_rows": len(frames["after"]),
            "read_heads_seconds_before": round(seconds["before"], 4),
            "read_heads_seconds_after": round(seconds["after"], 4),
            "speedup": round(seconds["before"] / seconds["after"], 1),
            "same_rows": bool(frames["before"].equals(frames["after"])),
            "compact_seconds": round(compact_seconds, 2),
            "pairs": pairs,
            "limit_seconds_after": MAX_SECONDS_AFTER,
            "within_limit": seconds["after"] <= MAX_SECONDS_AFTER,
            "ratios_by_clock": doc["ratios_by_clock"],
            "raw_s": doc["raw_s"],
            "warnings": doc["warnings"],
        }
    if args.json:
        print(json_text(result, indent=2))
    else:
        for name, value in result.items():
            if name not in ("raw_s", "ratios_by_clock"):
                print(f"{name:28s} {value}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compact",
        help="time reading heads of a many-segment run before and after aah-viz compact",
        description="Generate a synthetic run flushed every step, compact a copy, and print the median time of "
        "load_run(...).table('heads') on both in paired rounds, the median per-round ratio after/before with a "
        "bootstrap 95% interval, the median seconds and whether the rows are the same.",
    )
    p.add_argument("--segments", type=int, default=5000, help="steps of the run = heads segments (default 5000)")
    p.add_argument("--layers", type=int, default=2, help="layers of the generated run (default 2)")
    p.add_argument("--heads", type=int, default=12, help="heads per layer (default 12)")
    add_pairs_argument(p)
    add_clock_argument(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)
