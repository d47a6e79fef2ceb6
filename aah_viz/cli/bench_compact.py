"""``aah-viz bench compact``: reading ``heads`` of a run of many small segments, before and after compaction.

Generates a synthetic run flushed every step (one segment per table and step), copies it, compacts
the copy, then times ``load_run(path).table("heads")`` on both, interleaved, and reports the
medians, their ratio and whether the two reads gave the same rows.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

MAX_SECONDS_AFTER = 0.1  # the target for a compacted 5,000-segment run


def _read_heads(path: Path):
    from aah_viz.runlog import load_run

    t0 = time.perf_counter()
    heads = load_run(path).table("heads")
    return time.perf_counter() - t0, heads


def run(args) -> int:
    from aah_viz.runlog import paths
    from aah_viz.runlog.compact import compact_run
    from aah_viz.runlog.synthetic import make_synthetic_run

    with tempfile.TemporaryDirectory(prefix="aah-viz-bench-") as tmp:
        before = Path(tmp) / "segments"
        print(f"generating a run of {args.segments} heads segments ...", file=sys.stderr)
        make_synthetic_run(before, n_layer=args.layers, n_head=args.heads, steps=args.segments, flush_every=1)
        after = Path(tmp) / "compacted"
        shutil.copytree(before, after)
        t0 = time.perf_counter()
        compact_run(after)
        compact_seconds = time.perf_counter() - t0
        times: dict[str, list[float]] = {"before": [], "after": []}
        frames = {}
        for _ in range(args.repeats):  # interleaved: both variants once per round
            for name, path in (("before", before), ("after", after)):
                seconds, frames[name] = _read_heads(path)
                times[name].append(seconds)
        seconds = {name: statistics.median(values) for name, values in times.items()}
        result = {
            "segments_before": len(paths.list_segments(before / "heads")),
            "files_after": len(paths.list_segments(after / "heads")),
            "head_rows": len(frames["after"]),
            "read_heads_seconds_before": round(seconds["before"], 4),
            "read_heads_seconds_after": round(seconds["after"], 4),
            "speedup": round(seconds["before"] / seconds["after"], 1),
            "same_rows": bool(frames["before"].equals(frames["after"])),
            "compact_seconds": round(compact_seconds, 2),
            "repeats": args.repeats,
            "limit_seconds_after": MAX_SECONDS_AFTER,
            "within_limit": seconds["after"] <= MAX_SECONDS_AFTER,
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compact",
        help="time reading heads of a many-segment run before and after aah-viz compact",
        description="Generate a synthetic run flushed every step, compact a copy, and print the median time of "
        "load_run(...).table('heads') on both (interleaved rounds), their ratio and whether the rows are the same.",
    )
    p.add_argument("--segments", type=int, default=5000, help="steps of the run = heads segments (default 5000)")
    p.add_argument("--layers", type=int, default=2, help="layers of the generated run (default 2)")
    p.add_argument("--heads", type=int, default=12, help="heads per layer (default 12)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds; seconds are medians (default 5)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)
