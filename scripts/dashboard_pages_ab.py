"""Dashboard pages before and after a change, side by side on one machine: the same pages on the same logs root,
timed as ``aah-viz bench dashboard --pages`` times them (``aah_viz.dashboard.page_bench``: Streamlit's test
runner, the server's CPU seconds, cold and warm), once per round with each of two code trees, the trees taking
turns going first. Prints per page the medians of both and their ratios (before / after) as JSON.

A shared machine's load moves both sides alike only when they alternate: read the ratios and the spread of the
rounds (kept in the output), not one side's absolute seconds.

    git archive BASE aah_viz | tar -x -C /tmp/before
    python -m aah_viz bench dashboard ...   # or any logs root: generated runs (see docs/dashboard.md, Scale)
    python scripts/dashboard_pages_ab.py --before /tmp/before --after . --logs LOGS --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# one process per side and round: imports, caches and memory start empty, as a server's would
CHILD = """
import json, resource, sys
from pathlib import Path
import aah_viz
from aah_viz.dashboard import page_bench
pages = page_bench.measure_pages(Path(sys.argv[1]), warm_rounds=int(sys.argv[2]), pages=sys.argv[3].split(","))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"pages": pages, "peak_rss_mb": peak, "package": str(Path(aah_viz.__file__).resolve().parent)}))
"""


def one_side(tree: Path, logs: Path, warm_rounds: int, pages: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(  # run in the tree: ``python -c`` puts its folder first on the path
        [sys.executable, "-c", CHILD, str(logs.resolve()), str(warm_rounds), ",".join(pages)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"dashboard_pages_ab: error: the pages did not draw with {tree}: {out.stderr.strip()[-300:]}")
    result = json.loads(lines[-1])
    if Path(result["package"]) != (tree / "aah_viz").resolve():
        sys.exit(f"dashboard_pages_ab: error: {tree} was given but aah_viz came from {result['package']}")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, type=Path, help="the code tree before the change (holds aah_viz/)")
    p.add_argument("--after", required=True, type=Path, help="the code tree after the change (holds aah_viz/)")
    p.add_argument("--logs", required=True, type=Path, help="the logs root whose runs every page shows")
    p.add_argument("--rounds", type=int, default=3, help="processes per side; medians over them (default 3)")
    p.add_argument("--warm", type=int, default=3, help="warm redraws per page and process (default 3)")
    p.add_argument(
        "--pages",
        default="runs,frontier,training,hierarchy,windows,stability,probes,lens,compare,export",
        help="pages by address, comma-separated (default: every page that reads runs)",
    )
    args = p.parse_args()
    for tree in (args.before, args.after):
        if not (tree / "aah_viz").is_dir():
            p.error(f"{tree} holds no aah_viz/; give a code tree (a checkout, or git archive's output)")
    if not args.logs.is_dir():
        p.error(f"--logs {args.logs} is not a folder; give the logs root")
    if args.rounds < 1 or args.warm < 1:
        p.error("--rounds and --warm: give 1 or more")
    pages = [x for x in args.pages.split(",") if x]
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            runs[side].append(one_side(sides[side], args.logs, args.warm, pages))
            print(f"round {r + 1}/{args.rounds}: {side} done", file=sys.stderr, flush=True)
    result = {"pages": {}, "rounds": args.rounds, "peak_rss_mb": {}}
    for page in pages:
        row = {}
        for side in sides:
            colds = [x["pages"][page]["cold_cpu_s"] for x in runs[side]]
            warms = [x["pages"][page]["warm_cpu_s"] for x in runs[side]]
            problems = sorted({m for x in runs[side] for m in x["pages"][page]["problems"]})
            row[side] = {"cold_cpu_s": statistics.median(colds), "warm_cpu_s": statistics.median(warms)}
            row[side].update(cold_rounds=colds, warm_rounds=warms, problems=problems)
        for clock in ("cold_cpu_s", "warm_cpu_s"):
            row[f"{clock}_before_over_after"] = round(row["before"][clock] / max(row["after"][clock], 1e-9), 2)
        result["pages"][page] = row
    result["peak_rss_mb"] = {s: round(max(x["peak_rss_mb"] for x in runs[s]), 1) for s in sides}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
