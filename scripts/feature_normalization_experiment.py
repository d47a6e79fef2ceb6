"""Routing with standardised head features: full_adaptive with feature_normalization none and zscore.

    .venv/bin/python scripts/feature_normalization_experiment.py --out runs/fn --steps 1500 [--seeds 0,1]

Trains ``full_adaptive`` at the small preset (``--preset``) for every seed, once with the paper's features
(``feature_normalization=none``) and once standardised across each layer's heads (``zscore``), two
runs at a time on one thread each, keeping the final checkpoint (``aah-viz head-similarity`` can
then measure the groups on held-out text). A run already finished in ``--out`` is not trained again,
so a second call only summarises. Per run it reports, after the routing warm-up:

- ``forced_share``: level-0 partitions that are forced bipartitions (``cluster_validity``);
- ``real_share``: assessed partitions that beat both nulls;
- ``stability``: mean ARI of each layer's level-0 partition against its previous update (``updates``);
- ``acr``: mean executed ACR over the steps after warm-up, and ``final_acr`` at the last step;
- ``val_loss``: the final validation loss (nats).

Prints a Markdown table and, with ``--json``, the rows as JSON. Read the validation losses at equal
ACR: the table says when the ACRs differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("none", "zscore")


def train_command(out: Path, mode: str, seed: int, args) -> list[str]:
    return [
        sys.executable, "-m", "aah_viz", "train", "--preset", args.preset, "--regime", "full_adaptive",
        "--seed", str(seed), "--steps", str(args.steps), "--batch-size", str(args.batch_size),
        "--eval-interval", str(args.eval_interval), "--eval-batches", str(args.eval_batches),
        "--keep-checkpoints", "1", "--threads", "1", "--detail", "light", "--no-progress",
        "--set", f"feature_normalization={mode}", "--out", str(out), "--overwrite",
    ]  # fmt: skip


def finished(run: Path) -> bool:
    try:
        return json.loads((run / "manifest.json").read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def train(out: Path, mode: str, seed: int, args) -> Path:
    run = out / f"{mode}_seed{seed}"
    if finished(run):
        return run
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    log = out / f"{mode}_seed{seed}.log"
    with log.open("w") as fh:
        done = subprocess.run(train_command(run, mode, seed, args), stdout=fh, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"training {run.name} failed (exit {done.returncode}); see {log}")
    return run


def summarise(run_dir: Path) -> dict:
    """The measured facts of one run (see the module docstring)."""
    import numpy as np

    from aah_viz.analysis.cluster_validity import run_shares
    from aah_viz.runlog import load_run

    run = load_run(run_dir)
    warmup = int(run.config.get("warmup_steps", 0))
    validity = run.table("cluster_validity")
    validity = validity[(validity["step"] >= warmup) & ~validity["shadow"].astype(bool)]
    shares = run_shares(validity)
    updates = run.table("updates")
    updates = updates[(updates["step"] >= warmup) & updates["prev_step"].notna()]
    scalars = run.table("scalars")
    acr = scalars[(scalars["name"] == "acr") & (scalars["step"] >= warmup)].groupby("step")["value"].mean()
    val = scalars[scalars["name"] == "val_loss"].sort_values("step")
    return {
        "run": run_dir.name,
        "mode": run.config.get("feature_normalization", "none"),
        "seed": run.seed,
        "steps": int(run.manifest.get("last_step", -1)) + 1,
        "partitions": shares["partitions"],
        "forced_share": shares["forced_share"],
        "real_share": shares["real_share"],
        "stability": float(updates["ari"].mean()) if len(updates) else float("nan"),
        "acr": float(acr.mean()) if len(acr) else float("nan"),
        "final_acr": float(acr.iloc[-1]) if len(acr) else float("nan"),
        "val_loss": float(val["value"].iloc[-1]) if len(val) else float("nan"),
        "groups_per_layer": float(np.mean(updates["n_groups"])) if len(updates) else float("nan"),
    }


def markdown(rows: list[dict]) -> str:
    cols = ["run", "forced_share", "real_share", "stability", "groups_per_layer", "acr", "final_acr", "val_loss"]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        cells = [r[c] if isinstance(r[c], str) else f"{r[c]:.3f}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the runs (created)")
    parser.add_argument("--preset", default="small", help="model size preset (default: small)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps per run (default: 1500)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (default: 0,1)")
    parser.add_argument("--batch-size", type=int, default=2, help="sequences per step (default: 2)")
    parser.add_argument("--eval-interval", type=int, default=200, help="evaluate every N steps (default: 200)")
    parser.add_argument("--eval-batches", type=int, default=8, help="validation batches (default: 8)")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one thread each (default: 2)")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    plan = [(mode, seed) for seed in seeds for mode in MODES]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(lambda job: train(out, job[0], job[1], args), plan))
    rows = [summarise(run) for run in runs]
    print(markdown(rows))
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
