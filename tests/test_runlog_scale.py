"""The dashboard-scale synthetic run (24 layers x 16 heads x 10,000 steps): written, read, valid."""

from __future__ import annotations

import pytest

from aah_viz.runlog import load_run, validate_run
from aah_viz.samples import make_synthetic_run


@pytest.mark.slow
def test_scale_synthetic_run_is_complete_and_valid(tmp_path):
    path = make_synthetic_run(tmp_path / "big", n_layer=24, n_head=16, steps=10_000, flush_every=1000)
    run = load_run(path)
    heads = run.table("heads", columns=["step", "layer", "head", "window"])
    assert len(heads) == 24 * 16 * 10_000
    assert not heads.duplicated(["step", "layer", "head"]).any()
    one_layer = run.table("heads", filters=[("layer", "==", 23), ("step", ">=", 9_000)])
    assert len(one_layer) == 16 * 1_000
    assert validate_run(path) == []
