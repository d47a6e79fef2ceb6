"""Pool the ``head_similarity`` tables of several runs into the numbers of docs/head-groups.md.

    .venv/bin/python scripts/head_groups_report.py RUN [RUN ...] [--procedure method] [--json]

Per similarity, over every (run, layer): the groupings judged, the share that are real (beat both
validity nulls), stable (split-half ARI beats its null) and agree with the span and probe groupings,
each with a Clopper-Pearson 95% interval, and the median silhouette minus its chance bar with a
bootstrap 95% interval over (run, layer) cells. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
from scipy.stats import beta

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import head_similarity as hs
from aah_viz.runlog import load_run


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return np.nan, np.nan
    lo = beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def share(k: int, n: int) -> str:
    if n == 0:
        return "–"
    lo, hi = clopper_pearson(k, n)
    return f"{k}/{n} [{lo:.2f}, {hi:.2f}]"


def median_interval(values: np.ndarray, seed: int = 0, n_boot: int = 2000) -> str:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return "–"
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(values, size=(n_boot, values.size)), axis=1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return f"{np.median(values):+.3f} [{lo:+.3f}, {hi:+.3f}]"


def pooled(tables: list[pd.DataFrame], procedure: str) -> list[dict]:
    rows = pd.concat([hs.groupings(t) for t in tables], ignore_index=True)
    rows = rows[rows["procedure"] == procedure]
    pairs = pd.concat([hs.agreements(t) for t in tables], ignore_index=True)
    pairs = pairs[pairs["procedure"] == procedure]
    out = []
    for name in [s for s in hs.SIMILARITIES if s in set(rows["similarity"])]:
        mine = rows[rows["similarity"] == name]
        judged = mine[mine["verdict"] != cv.UNDEFINED]
        stab = mine[mine["stability"] != hs.UNDEFINED]
        margin = (judged["silhouette"] - judged.apply(lambda r: cv.chance_bar(r.to_dict()), axis=1)).to_numpy(float)
        entry = {
            "similarity": name,
            "cells": len(mine),
            "median_groups": float(np.nanmedian(mine["n_groups"].astype(float))) if len(mine) else np.nan,
            "real": share(int((judged["verdict"] == cv.REAL).sum()), len(judged)),
            "stable": share(int((stab["stability"] == hs.STABLE).sum()), len(stab)),
            "margin": median_interval(margin),
        }
        for target in ("span", "probe"):
            pair = pairs[((pairs["similarity"] == name) & (pairs["other"] == target))
                         | ((pairs["similarity"] == target) & (pairs["other"] == name))]  # fmt: skip
            pair = pair[pair["agreement"] != hs.UNDEFINED]
            entry[f"agrees_{target}"] = share(int((pair["agreement"] == hs.AGREE).sum()), len(pair))
        out.append(entry)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories holding a head_similarity table")
    parser.add_argument("--procedure", default="method", choices=hs.PROCEDURES, help="grouping procedure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args()
    tables = []
    for path in args.runs:
        run = load_run(path)
        if "head_similarity" not in run.tables():
            sys.exit(f"{path} has no head_similarity table: run aah-viz head-similarity on it first")
        t = run.table("head_similarity")
        tables.append(t[t["step"] == t["step"].max()])
    rows = pooled(tables, args.procedure)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cols = list(rows[0]) if rows else []
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) if not isinstance(r[c], float) else f"{r[c]:g}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
