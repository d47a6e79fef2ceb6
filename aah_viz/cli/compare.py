"""``aah-viz compare RUN [RUN...]``: AAH head groups against probe-derived clusters; windows against probes."""

from __future__ import annotations

import argparse
import json

import numpy as np


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="agreement of AAH groups with probe clusters, and window-vs-probe association (needs aah-viz probe)",
        description="For each run (after `aah-viz probe`): agreement between the AAH groups at each hierarchy level "
        "and head clusters derived from the probes (k-means and agglomerative on probe profiles, Clark's "
        "Jensen-Shannon clustering), as ARI, NMI and V-measure with a permutation null; and Spearman's rho between "
        "each head's window and its syntax and coreference scores, with a bootstrap interval and a permutation "
        "p-value. Prints the table (runs side by side) and writes each run's rows to its comparisons table.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="probed run directories")
    p.add_argument("--level", type=int, default=None, help="only this hierarchy level (default: every level)")
    p.add_argument("--step", type=int, default=None, help="the probed step (default: each run's newest)")
    p.add_argument("--permutations", type=int, default=200, help="permutations of the null (default: 200)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals (default: 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of clustering, permutations and bootstrap (default: 0)")
    p.add_argument("--no-write", action="store_true", help="print only; do not write the comparisons table")
    p.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from aah_viz.errors import InputFormatError
    from aah_viz.probes.compare import compare_run
    from aah_viz.probes.store import write_probe_tables
    from aah_viz.runlog import load_run

    if args.permutations < 1 or args.bootstrap < 1:
        raise InputFormatError("--permutations and --bootstrap must be at least 1")
    frames = []
    results = []
    for path in args.runs:  # compute every run before writing any
        opened = load_run(path)
        table = compare_run(opened, args.step, args.level, args.permutations, args.bootstrap, args.seed)
        results.append((opened, table))
    for opened, table in results:
        if not args.no_write and len(table):
            write_probe_tables(opened.path, {"comparisons": table}, int(table["step"].iloc[0]))
        frames.append(table.assign(run=opened.run_id, regime=opened.regime, seed=opened.seed))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if args.json:
        records = json.loads(out.to_json(orient="records"))
        print(json.dumps(records, indent=2))
        return 0
    if out.empty:
        print("nothing to compare")
        return 0
    shown = out[
        [
            "run",
            "regime",
            "seed",
            "step",
            "kind",
            "level",
            "target",
            "metric",
            "value",
            "chance_mean",
            "p_value",
            "ci_low",
            "ci_high",
            "n",
        ]
    ]
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(shown.to_string(index=False, float_format=lambda v: "nan" if np.isnan(v) else f"{v:.3f}"))
    return 0
