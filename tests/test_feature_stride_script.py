"""scripts/feature_stride_accuracy.py: strided against exact routing features on a (tiny) trained model."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_stride_one_is_the_exact_method_and_a_real_stride_moves_the_moments():
    cmd = [sys.executable, str(ROOT / "scripts" / "feature_stride_accuracy.py"), "--preset", "tiny"]
    cmd += ["--seq-len", "64", "--heads", "12", "--steps", "2", "--batch", "2", "--strides", "1,2", "--threads", "1"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout)
    exact, halved = out["strides"]["1"], out["strides"]["2"]
    assert exact["moment_rel_dev"] == {"median": 0.0, "max": 0.0}
    assert exact["level0_identical"] == "2/2" and exact["level0_ari"] == 1.0  # tiny: two AAH layers
    assert 0.0 < halved["moment_rel_dev"]["median"] <= halved["moment_rel_dev"]["max"]
    assert out["another_batch"]["moment_rel_dev"]["median"] > 0.0  # a different batch has different moments
