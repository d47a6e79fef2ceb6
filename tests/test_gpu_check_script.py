"""scripts/gpu_check.sh on a machine without CUDA: it refuses in one clear line, runs nothing, exits 2."""

import os
import sys
from pathlib import Path

import pytest
import waiting

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the script would run the real check")
def test_gpu_check_without_cuda_explains_and_exits_2():
    env = {**os.environ, "PYTHON": sys.executable}
    proc = waiting.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")], "gpu_check.sh", capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no CUDA device" in proc.stderr and "nothing was run" in proc.stderr
