"""Window statistics, hierarchy graphs and their layout, run queries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from aah_viz.analysis import hierarchy, queries, windows
from aah_viz.runlog import load_run
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(make_synthetic_run(tmp_path_factory.mktemp("an") / "r", n_layer=3, n_head=8, steps=150, seed=2))


def test_window_matrix_places_each_row_and_leaves_missing_cells_nan():
    heads = pd.DataFrame({"layer": [0, 1, 1], "head": [2, 0, 3], "window": [64, 128, 32]})
    m = windows.window_matrix(heads, 2, 4)
    assert m[0, 2] == 64 and m[1, 0] == 128 and m[1, 3] == 32
    assert np.isnan(m).sum() == 5


def test_sample_steps_prefers_updates_and_stays_bounded():
    steps = np.arange(1000)
    ups = np.arange(20, 1000, 5)
    got = windows.sample_steps(steps, 300, prefer=ups)
    assert len(got) <= 300 and got[-1] == 999 and got[0] == 0
    assert set(got) <= set(steps)
    few = windows.sample_steps(steps, 400, prefer=np.arange(20, 1000, 50))
    assert set(np.arange(20, 1000, 50)) <= set(few) and few[-1] == 999


def test_bucket_fractions_fill_missing_windows_and_accept_model_wide_rows():
    branch = pd.DataFrame({"layer": [0, 0, 1, None], "window": [32, 64, 64, 32], "fraction": [0.25, 0.75, 1.0, 0.5]})
    per_layer = windows.bucket_fractions(branch, [32, 64, 128])
    assert per_layer.loc[0].tolist() == [0.25, 0.75, 0.0]
    assert per_layer.loc[1].tolist() == [0.0, 1.0, 0.0]
    assert per_layer.loc[-1].tolist() == [0.5, 0.0, 0.0]
    heads = pd.DataFrame({"layer": [0, 0, 0, 0], "window": [32, 32, 32, 64]})
    assert windows.bucket_fractions_from_heads(heads, [32, 64]).loc[0].tolist() == [0.75, 0.25]


def test_binned_series_keeps_the_mean_and_bounds_the_points():
    df = pd.DataFrame({"step": np.arange(10_000), "value": np.arange(10_000) % 7})
    b = windows.binned_series(df, "step", "value", max_points=500)
    assert len(b) <= 500
    assert b["value"].mean() == pytest.approx(df["value"].mean(), rel=1e-3)
    # the line spans the steps logged (Training's range slider reads them): 0 to 9,999, not 5 to 9,994
    assert (b["step"].iloc[0], b["step"].iloc[-1]) == (0, 9_999) and b["step"].is_monotonic_increasing
    late = windows.binned_series(df.assign(step=df["step"] + 3), "step", "value", max_points=500)
    assert (late["step"].min(), late["step"].max()) == (3, 10_002)
    small = windows.binned_series(df.head(50), "step", "value", max_points=500)
    assert small["value"].tolist() == df.head(50)["value"].tolist()


def test_tree_graph_has_every_head_once_as_a_leaf_and_windows_from_final_idx(run):
    step = int(queries.tree_steps(run, 1)[-1])
    tree = queries.tree_at(run, 1, step)
    g = hierarchy.tree_graph(tree, run.n_head, run.windows)
    leaves = [n for n in g.nodes if g.out_degree(n) == 0]
    assert sorted(leaves) == [("head", h) for h in range(run.n_head)]
    assert all(g.in_degree(("head", h)) == 1 for h in range(run.n_head))
    for rec in tree.to_dict("records"):
        node = g.nodes[("group", rec["level"], rec["node"])]
        assert node["window"] == run.windows[int(rec["final_idx"])]
        assert node["members"] == sorted(int(m) for m in rec["members"])
        # a group's leaves are exactly its members
        below = [
            n[1] for n in __import__("networkx").descendants(g, ("group", rec["level"], rec["node"])) if n[0] == "head"
        ]
        assert sorted(below) == node["members"]


def test_tree_layout_centres_parents_and_orders_leaves(run):
    step = int(queries.tree_steps(run, 0)[-1])
    g = hierarchy.tree_graph(queries.tree_at(run, 0, step), run.n_head, run.windows)
    pos = hierarchy.tree_layout(g)
    xs = sorted(pos[("head", h)][0] for h in range(run.n_head))
    assert xs == [float(i) for i in range(run.n_head)]
    for n in g.nodes:
        kids = list(g.successors(n))
        if kids:
            assert pos[n][0] == pytest.approx(np.mean([pos[c][0] for c in kids]))
            assert pos[n][1] == g.nodes[n]["level"] + 1


LAYOUT_SCRIPT = """
import json, sys
from aah_viz.analysis import hierarchy, queries
from aah_viz.runlog import load_run
run = load_run(sys.argv[1])
step = int(queries.tree_steps(run, 0)[-1])
g = hierarchy.tree_graph(queries.tree_at(run, 0, step), run.n_head, run.windows)
print(json.dumps(sorted([list(map(str, k)), list(v)] for k, v in hierarchy.tree_layout(g).items())))
"""


def test_tree_layout_does_not_depend_on_the_hash_seed(run):
    outs = []
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run(
            [sys.executable, "-c", LAYOUT_SCRIPT, str(run.path)],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        outs.append(json.loads(res.stdout))
    assert outs[0] == outs[1]


def test_run_overview_reads_the_last_values(run):
    o = queries.run_overview(run)
    loss = run.scalar("loss")
    assert o["final_loss"] == pytest.approx(loss["value"].iloc[-1])
    assert o["steps"] == 149 and o["regime"] == run.regime and o["seed"] == 2
    acr = run.scalar("acr")
    assert o["final_acr"] == pytest.approx(acr["value"].iloc[-1])


def test_nearest_step():
    steps = np.array([0, 10, 20])
    assert [queries.nearest(steps, s) for s in (-5, 4, 5, 6, 25)] == [0, 0, 0, 10, 20]
    assert queries.nearest(np.array([], dtype=int), 3) is None


def test_repeated_levels_collapse_and_say_what_they_chose():
    from aah_viz.analysis.hierarchy import collapse_repeated_levels, group_id, tree_graph

    windows = [16, 32, 64]
    # level 0: {0,1} {2,3}; level 1 repeats it exactly (one child each); level 2 joins them
    tree = pd.DataFrame(
        {
            "level": [0, 0, 1, 1, 2],
            "node": [0, 1, 0, 1, 0],
            "parent": [0, 1, 0, 0, None],
            "members": [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1, 2, 3]],
            "children": [[0, 1], [2, 3], [0], [1], [0, 1]],
            "final_idx": [0, 1, 1, 2, 2],
            "joint_paired": [False, False, True, False, False],
        }
    )
    g = tree_graph(tree, 4, windows)
    small, dropped = collapse_repeated_levels(g)
    assert dropped == [1]
    assert {d["level"] for _, d in small.nodes(data=True) if d["kind"] == "group"} == {0, 2}
    kept = small.nodes[group_id(0, 0)]
    assert kept["also_levels"] == [(1, 0, 32)]  # level 1, group 0 chose 32 tokens
    assert kept["joint_paired"] and kept["joint_levels"] == [1]  # its joint scoring is not lost
    assert set(small.successors(group_id(2, 0))) == {group_id(0, 0), group_id(0, 1)}
    # a level that regroups heads is kept
    assert (
        collapse_repeated_levels(tree_graph(tree[tree["level"] != 1].assign(parent=[0, 0, None]), 4, windows))[1] == []
    )
