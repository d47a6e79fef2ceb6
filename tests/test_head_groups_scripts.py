"""scripts/feature_normalization_experiment.py and scripts/head_groups_report.py on real (tiny) runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aah_viz.analysis import cluster_validity as cv
from aah_viz.cli import main
from aah_viz.runlog import load_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from head_groups_report import clopper_pearson, pooled  # noqa: E402


def test_clopper_pearson_is_scipys_exact_interval():
    from scipy.stats import binomtest

    for k, n in ((0, 6), (1, 6), (3, 13), (16, 16)):
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert np.allclose(clopper_pearson(k, n), (ci.low, ci.high), atol=1e-9)


def test_the_report_pools_the_runs_cells(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "sample_logs" / "full_adaptive_seed0", run)
    assert main(["head-similarity", str(run), "--no-progress", "--agreement-samples", "99"]) == 0
    table = load_run(run).table("head_similarity")
    rows = {r["similarity"]: r for r in pooled([table, table], "method")}
    mine = table[table["other"].isna() & (table["procedure"] == "method") & (table["similarity"] == "attention")]
    real = int((mine["verdict"] == cv.REAL).sum()) * 2
    judged = int((mine["verdict"] != cv.UNDEFINED).sum()) * 2
    assert rows["attention"]["cells"] == 2 * len(mine)
    assert rows["attention"]["real"].startswith(f"{real}/{judged} ")


@pytest.mark.torch
def test_the_experiment_trains_both_modes_and_summarises_them(tmp_path):
    pytest.importorskip("torch")
    cmd = [sys.executable, str(ROOT / "scripts" / "feature_normalization_experiment.py"), "--out", str(tmp_path)]
    cmd += ["--preset", "tiny", "--steps", "10", "--seeds", "0", "--eval-interval", "5", "--eval-batches", "1"]
    done = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=600, check=True)
    rows = json.loads(done.stdout[done.stdout.index("[") :])
    assert [r["mode"] for r in rows] == ["none", "zscore"]
    for r in rows:
        run = load_run(tmp_path / r["run"])
        warmup = run.config["warmup_steps"]
        v = run.table("cluster_validity")
        v = v[(v["step"] >= warmup) & ~v["shadow"].astype(bool)]
        assert r["partitions"] == len(v) > 0
        assert r["forced_share"] == pytest.approx(float((v["origin"] == cv.FORCED).mean()))
        val = run.table("scalars")
        assert r["val_loss"] == pytest.approx(
            float(val[val["name"] == "val_loss"].sort_values("step")["value"].iloc[-1])
        )
        assert run.config["feature_normalization"] == r["mode"]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)  # finished runs: no training
    assert "| none_seed0 |" in again.stdout
