"""The run writer's per-update summaries (``updates``, ``margins``): equal to the analysis computed
from the rows, across segment boundaries and a resume; older runs without them read the same."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from aah_viz.analysis import queries, stability
from aah_viz.figures import data
from aah_viz.runlog import RunWriter, load_run
from aah_viz.samples import make_synthetic_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # flush_every is not a multiple of the control interval: updates straddle segments
    return make_synthetic_run(
        tmp_path_factory.mktemp("sum") / "r", n_layer=3, n_head=7, steps=260, flush_every=37, seed=4
    )


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["layer", "step"]).reset_index(drop=True)


def test_summaries_equal_the_comparison_of_head_rows(run_dir):
    run = load_run(run_dir)
    assert queries.has_summaries(run)
    table = _sorted(run.table("updates"))
    heads = queries.heads_at_updates(run)
    want = _sorted(stability.update_frame(heads, run.n_head))
    assert len(table) == len(want) == len(run.events("routing_update"))
    for col in ["step", "layer", "prev_step", "ari", "group_switch_share", "window_switch_share", "n_groups"]:
        np.testing.assert_allclose(table[col].astype(float), want[col].astype(float), equal_nan=True, err_msg=col)
    topo = table["topology_changed"].astype("boolean")
    assert topo.equals(want["topology_changed"].astype("boolean"))
    # the head lists, recomputed here from the head rows of consecutive updates
    for layer in range(run.n_layer):
        rows = table[table["layer"] == layer]
        w = np.stack([np.asarray(v) for v in rows["window_idx"]])
        h = heads[heads["layer"] == layer].sort_values(["step", "head"])
        np.testing.assert_array_equal(w, h["window_idx"].to_numpy().reshape(-1, run.n_head))
        for i in range(1, len(w)):
            assert list(rows["window_switched"].iloc[i]) == np.flatnonzero(w[i] != w[i - 1]).tolist()
            if i > 1:
                flips = (w[i] == w[i - 2]) & (w[i - 1] != w[i])
                assert list(rows["flipped"].iloc[i]) == np.flatnonzero(flips).tolist()


def test_stability_from_summaries_equals_the_head_row_path(run_dir, tmp_path):
    run = load_run(run_dir)
    fast = data.stability_data(run)
    heads = queries.heads_at_updates(run)
    slow_heads = stability.head_switch_stats(heads, run.n_head)
    pd.testing.assert_frame_equal(
        fast["heads"].astype(float), slow_heads.astype(float), check_dtype=False, check_exact=False
    )
    # an older run (no summaries): the same figures' data through the rows
    import shutil

    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    shutil.rmtree(old / "updates")
    shutil.rmtree(old / "margins")
    m = json.loads((old / "manifest.json").read_text())
    m.pop("update_summaries")
    (old / "manifest.json").write_text(json.dumps(m))
    legacy = load_run(old)
    assert not queries.has_summaries(legacy)
    slow = data.stability_data(legacy)
    cols = stability.UPDATE_COLUMNS
    a, b = _sorted(fast["updates"][cols]), _sorted(slow["updates"][cols])
    np.testing.assert_allclose(a[["ari", "window_switch_share"]], b[["ari", "window_switch_share"]], equal_nan=True)
    pd.testing.assert_frame_equal(fast["layers"], slow["layers"], check_dtype=False)
    t_fast, t_slow = data.timeline_data(run, 1), data.timeline_data(legacy, 1)
    np.testing.assert_array_equal(t_fast["matrix"], t_slow["matrix"])
    np.testing.assert_array_equal(t_fast["steps"], t_slow["steps"])
    np.testing.assert_array_equal(
        queries.tree_steps(run, 2), np.unique(legacy.table("tree", filters=[("layer", "==", 2)])["step"])
    )
    c_fast, c_slow = data.controller_data(run)["margins"], data.controller_data(legacy)["margins"]
    np.testing.assert_allclose(c_fast["margin"], c_slow["margin"], rtol=1e-5)


def test_summaries_survive_a_resume(run_dir, tmp_path):
    """Rows replayed in two writer sessions with a resume in between give the same summaries."""
    src = load_run(run_dir)
    heads = src.arrow_table("heads")
    target = tmp_path / "replayed"
    manifest = dict(src.manifest)
    for k in ("status", "last_step", "finished_at", "update_summaries"):
        manifest.pop(k, None)
    w = RunWriter.create(target, manifest)
    steps = heads.column("step").to_numpy()
    cut = 133
    w.append("heads", heads.filter(steps <= cut))
    w.close("failed")
    w = RunWriter.resume(target, keep_through_step=cut)
    w.append("heads", heads.filter(steps > cut))
    w.close()
    got = _sorted(load_run(target).table("updates"))
    want = _sorted(src.table("updates"))
    np.testing.assert_allclose(got["ari"], want["ari"], equal_nan=True)
    assert [list(x) for x in got["flipped"]] == [list(x) for x in want["flipped"]]
    assert [list(x) for x in got["window_switched"]] == [list(x) for x in want["window_switched"]]
