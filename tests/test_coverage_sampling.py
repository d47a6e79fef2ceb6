"""A long run's coverage over training is read from evenly spread stretches of its scalars (the Windows page's
figure and cost table, ``figures.data.coverage_and_cost``): checked against the segment files themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from aah_viz.figures import data
from aah_viz.runlog import load_run
from aah_viz.samples import make_synthetic_run

LAST = ["ACR", "causal-pair coverage", "realised work", "FLOPs ratio (analytic estimate)"]


def model_wide_rows(seg, names) -> pd.DataFrame:
    rows = pq.read_table(seg).to_pandas()
    rows = rows[rows["name"].isin(names) & rows["layer"].isna()]
    return rows[["name", "step", "value"]]


def test_a_long_runs_coverage_is_read_from_spread_segments_and_its_last_values_from_its_end(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=48, flush_every=4)
    segs = sorted((run_dir / "scalars").glob("*.parquet"))
    assert len(segs) == 12
    every = 10_000  # more bins than rows: the lines are the rows themselves
    whole_cov, whole_cost = data.coverage_and_cost([load_run(run_dir)], max_points=every)
    cov, cost = data.coverage_and_cost([load_run(run_dir)], max_points=every, max_segments=4)
    label = cov["label"].iloc[0]
    assert cov.attrs["sampled"] == {label: (4, 12)} and whole_cov.attrs["sampled"] == {}

    per_segment = [model_wide_rows(seg, data.COVERAGE_SCALARS) for seg in segs]
    drawn = set(cov["step"].astype(int))
    read = [i for i, rows in enumerate(per_segment) if drawn & set(rows["step"].astype(int))]
    assert read[0] == 0 and read[-1] == 11 and len(read) == 4  # the first and last, spread between
    assert max(np.diff(read)) - min(np.diff(read)) <= 1
    want = pd.concat([per_segment[i] for i in read]).sort_values(["name", "step"]).reset_index(drop=True)
    got = cov[["name", "step", "value"]].sort_values(["name", "step"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)

    # last values from the run's end: the same as the whole run read; medians over the stretches read
    pd.testing.assert_frame_equal(cost[LAST], whole_cost[LAST])
    timing = pd.concat([model_wide_rows(segs[i], ["step_time_s"]) for i in read])
    assert cost["step time, median (s, measured)"].iloc[0] == timing["value"].median()

    # a run of no more segments than that is read whole
    cov12, cost12 = data.coverage_and_cost([load_run(run_dir)], max_points=every, max_segments=12)
    pd.testing.assert_frame_equal(cov12, whole_cov)
    pd.testing.assert_frame_equal(cost12, whole_cost)


def test_a_long_runs_controller_series_is_read_from_the_same_spread_segments(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=48, flush_every=4)
    segs = sorted((run_dir / "scalars").glob("*.parquet"))
    names = ["controller_grad_norm", "controller_weight_drift"]
    whole = data.controller_data(load_run(run_dir), max_points=10_000)
    part = data.controller_data(load_run(run_dir), max_points=10_000, max_segments=4)
    assert whole["series"].attrs["sampled"] is None and part["series"].attrs["sampled"] == (4, 12)
    per_segment = [model_wide_rows(seg, names) for seg in segs]
    drawn = set(part["series"]["step"].astype(int))
    read = [i for i, rows in enumerate(per_segment) if drawn & set(rows["step"].astype(int))]
    assert read[0] == 0 and read[-1] == 11 and len(read) == 4
    want = pd.concat([per_segment[i] for i in read]).sort_values(["name", "step"]).reset_index(drop=True)
    got = part["series"][["name", "step", "value"]].sort_values(["name", "step"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    pd.testing.assert_frame_equal(part["margins"], whole["margins"])  # the margins are read whole
