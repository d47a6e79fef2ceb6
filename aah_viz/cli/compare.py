"""``aah-viz compare RUN [RUN...]``: AAH head groups against probe-derived clusters; windows against probes."""

from __future__ import annotations

import argparse
import json

import numpy as np

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_runs_argument


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="agreement of AAH groups with probe clusters, and window-vs-probe association (needs aah-viz probe)",
        description="For each run (after `aah-viz probe`), within every layer: agreement between the AAH groups at "
        "each hierarchy level and clusters of the layer's heads built from their probe profiles (k-means and "
        "agglomerative on relation scores, coreference by distance and attention distance; Clark's Jensen-Shannon "
        "clustering), as ARI, NMI and V-measure against a permutation null, pooled over layers with a "
        "layer-stratified null, degenerate rows flagged with their reason; and Spearman's rho between each head's "
        "window and its syntax and coreference scores within layers, with a bootstrap interval and a permutation "
        "p-value. Prints both tables (runs side by side) and writes each run's comparisons and window_association "
        "tables (docs/probes.md).",
    )
    add_runs_argument(p, help="probed run directories")
    p.add_argument("--level", type=int, default=None, help="only this hierarchy level (default: every level)")
    p.add_argument("--step", type=int, default=None, help="the probed step (default: each run's newest)")
    p.add_argument("--permutations", type=int, default=200, help="permutations of the null (default: 200)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals (default: 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of clustering, permutations and bootstrap (default: 0)")
    p.add_argument("--all-layers", action="store_true", help="print every layer's rows, not only the pooled ones")
    p.add_argument("--no-write", action="store_true", help="print only; do not write the tables")
    p.add_argument("--json", action="store_true", help="print JSON records instead of tables")
    p.set_defaults(func=run)


def _fmt(v) -> str:
    return "nan" if isinstance(v, float) and np.isnan(v) else f"{v:.3f}"


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from aah_viz.errors import InputFormatError
    from aah_viz.probes.compare import compare_run
    from aah_viz.probes.partition_agreement import SHOWN_COMPARISON_COLUMNS
    from aah_viz.probes.store import write_probe_tables
    from aah_viz.runlog import load_run
    from aah_viz.runlog.containment import refuse_escapes

    if args.permutations < 1 or args.bootstrap < 1:
        raise InputFormatError("--permutations and --bootstrap must be at least 1")
    for path in args.runs:  # a link out of any run: refused before anything is read or written
        refuse_escapes(path, "read" if args.no_write else "compared")
    results = []
    for path in args.runs:  # compute every run before writing any
        opened = load_run(path)
        results.append(
            (opened, compare_run(opened, args.step, args.level, args.permutations, args.bootstrap, args.seed))
        )
    frames: dict[str, list] = {"comparisons": [], "window_association": []}
    for opened, tables in results:
        step = next((int(t["step"].iloc[0]) for t in tables.values() if len(t)), None)
        if not args.no_write and step is not None:
            write_probe_tables(opened.path, tables, step)
        for name, table in tables.items():
            frames[name].append(table.assign(run=opened.run_id, regime=opened.regime, seed=opened.seed))
    out = {name: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame() for name, parts in frames.items()}
    if args.json:
        print(json_text({name: json.loads(t.to_json(orient="records")) for name, t in out.items()}, indent=2))
        return 0
    if all(t.empty for t in out.values()):
        print("nothing to compare")
        return 0
    show = {
        "comparisons": ["run", "regime", "seed", *SHOWN_COMPARISON_COLUMNS],
        "window_association": [
            "run",
            "regime",
            "seed",
            "layer",
            "target",
            "rho",
            "ci_low",
            "ci_high",
            "p_value",
            "n_heads",
            "n_layers",
            "reason",
        ],
    }
    for name, table in out.items():
        if table.empty:
            continue
        if not args.all_layers:
            table = table[table["layer"].isna()]
        print(f"{name} ({'every layer' if args.all_layers else 'pooled over layers; --all-layers for each layer'}):")
        with pd.option_context("display.width", 220, "display.max_rows", 500, "display.max_colwidth", 60):
            print(table[show[name]].to_string(index=False, float_format=_fmt, na_rep="-"))
    return 0
