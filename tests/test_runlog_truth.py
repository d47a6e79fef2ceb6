"""``validate`` tells the truth, and ``load_run`` refuses every manifest ``validate`` would reject."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aah_viz.cli import main
from aah_viz.errors import RunLogError
from aah_viz.runlog import RunWriter, load_run, validate_run
from aah_viz.runlog import paths as run_paths
from aah_viz.samples import make_synthetic_run


@pytest.fixture
def run(tmp_path):
    return make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=20, flush_every=5)


def edit_manifest(run, **changes):
    path = run / "manifest.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"n_layer": 1_000_000_000}, "'n_layer' must be in [1, 1024]"),
        ({"n_head": "4"}, "'n_head' (heads per layer) must be an integer"),
        ({"n_layer": True}, "'n_layer' (number of layers) must be an integer"),
        ({"windows": [8, "16"]}, "'windows' must be a list of integers"),
        ({"windows": list(range(1, 300))}, "'windows' allows at most 127 windows"),
        ({"max_depth": 10_000}, "'max_depth' must be in [0, 64]"),
        ({"steps": "many"}, "'steps' must be an integer or null"),
        ({"last_step": 2.5}, "'last_step' must be an integer or null"),
        ({"resumes": {"at": 1}}, "'resumes' must be a list"),
        ({"backend": {"resolved": ["x"]}}, "'backend' must map names to strings or null"),
        ({"config": {"w_min": "4"}}, "'config.w_min' must be a number >= 0"),
        ({"config": {"window_ablation_mode": ["adaptive"]}}, "'config.window_ablation_mode' must be a string"),
        ({"n_layer": 3, "config": {"n_layer": 3}}, "'n_layer' is 3 but the heads table has layers 0..1"),
        ({"n_head": 8, "config": {"n_head": 8}}, "'n_head' is 8 but the heads table has heads 0..3"),
        ({"config": {"n_layer": 10**9}}, "'config.n_layer' must be an integer in [1, 1024]"),
        ({"config": {"n_head": 5}}, "'config.n_head' is 5, but field 'n_head' says 4"),
    ],
)
def test_a_bad_manifest_is_one_error_naming_the_key_for_load_run_and_validate(run, changes, named):
    edit_manifest(run, **changes)
    with pytest.raises(RunLogError) as err:
        load_run(run)
    assert named in str(err.value) and "\n" not in str(err.value)
    key = named.split("'")[1]
    assert any(key in p for p in validate_run(run)), validate_run(run)


def test_a_manifest_that_is_not_utf8_is_one_clear_error_everywhere(run, tmp_path, capsys):
    path = run / "manifest.json"
    path.write_bytes(path.read_bytes().replace(b'"regime": "', b'"regime": "\xff\xfe'))
    with pytest.raises(RunLogError, match="is not UTF-8 text"):
        load_run(run)
    assert "is not UTF-8 text" in validate_run(run)[0]
    for argv in (["validate", str(run)], ["export", str(run), "--table", "training", "--out", str(tmp_path / "t")]):
        assert main(argv) == 2
    err = capsys.readouterr()
    assert "UnicodeDecodeError" not in err.err and "Traceback" not in err.err
    assert "is not UTF-8 text" in err.err + err.out


def test_validate_reports_missing_steps_and_rows_past_the_plan(run):
    heads = run_paths.list_segments(run / "heads")
    scalars = run_paths.list_segments(run / "scalars")
    heads[2].unlink()  # steps 10-14 gone
    scalars[2].unlink()
    assert validate_run(run) == ["heads: 5 steps missing: 10-14"]
    edit_manifest(run, steps=12)
    problems = validate_run(run)
    assert "heads: rows up to step 19 but the manifest plans 12 steps (0..11); the manifest does not describe " \
        "these rows" in problems  # fmt: skip


def test_validate_reports_a_finished_run_that_stops_short_or_recorded_nothing(run, tmp_path):
    edit_manifest(run, steps=25)
    assert validate_run(run) == ["heads: 5 steps missing: 20-24"]
    empty = make_synthetic_run(tmp_path / "e", n_layer=2, n_head=4, steps=2, flush_every=5)
    for table in run_paths.list_table_dirs(empty):
        for seg in run_paths.list_segments(empty / table):
            seg.unlink()
    edit_manifest(empty, steps=None)
    assert validate_run(empty) == [
        "manifest.json: field 'last_step' is 1 but the tables hold no step; the manifest does not describe this run",
        "the run is finished but every table is empty: nothing was recorded",
    ]


def test_validate_reports_rows_lost_to_a_set_aside_segment(run):
    seg = run_paths.list_segments(run / "heads")[2]
    seg.write_bytes(seg.read_bytes()[:100])  # truncated
    RunWriter.resume(run).close()
    problems = validate_run(run)
    assert problems == [
        f"heads/{seg.name}: segment set aside as unreadable (kept as _{seg.name}.corrupt); its rows are lost",
        "heads: 5 steps missing: 10-14",
    ]
    (run / "heads" / f"_{seg.name}.corrupt").unlink()  # even with the evidence deleted, the manifest remembers
    assert problems[0] in validate_run(run)


def test_validate_reports_duplicated_rows(run):
    seg = run_paths.list_segments(run / "heads")[1]
    (run / "heads" / "part-99999999999999999999-000000.parquet").write_bytes(seg.read_bytes())
    problems = validate_run(run)
    assert any(p.startswith("heads: 80 rows share a (step, layer, head) key (first: step=5") for p in problems)


def test_an_interrupted_run_is_reported_and_a_live_one_is_not(run):
    writer = RunWriter.resume(run)
    assert validate_run(run) == []
    writer.closed = True  # stop without closing: as a killed process leaves it ...
    writer._lock.release()  # ... and the operating system frees the lock
    assert validate_run(run) == [
        f"interrupted: status is 'running' but no process is writing the run (it stopped after step 19); "
        f"resume it (aah-viz train --out {run} --resume)"
    ]


def test_missing_step_ranges_covers_gaps_overlaps_and_the_unfinished_end():
    from aah_viz.runlog.damage import missing_step_ranges

    bounds = np.array([[0, 4], [10, 14], [5, 6], [12, 20]])
    assert missing_step_ranges(bounds) == [(7, 9)]
    assert missing_step_ranges(bounds, planned_end=24) == [(7, 9), (21, 24)]
    assert missing_step_ranges(np.array([[3, 5]])) == [(0, 2)]
    assert missing_step_ranges(np.zeros((0, 2))) == []


def set_aside_one_heads_segment(run) -> list[int]:
    """Garble the heads segment holding steps 5-9 and resume (it is set aside): those steps are lost."""
    import pyarrow.parquet as pq

    victim = next(s for s in run_paths.list_segments(run / "heads") if pq.read_table(s)["step"][0].as_py() == 5)
    victim.write_bytes(b"garbage, not parquet")
    RunWriter.resume(run).close("finished")
    return list(range(5, 10))


def test_damage_warnings_name_set_aside_segments_and_the_missing_steps(run):
    from aah_viz.runlog.damage import damage_warnings

    assert damage_warnings(load_run(run)) == []
    lost = set_aside_one_heads_segment(run)
    notes = damage_warnings(load_run(run))
    assert any("set aside" in n and n.startswith("heads/") for n in notes)
    assert f"heads: {len(lost)} steps missing ({lost[0]}-{lost[-1]})" in " ".join(notes)
    # the independent full check agrees on the steps
    assert any(f"{len(lost)} steps missing: {lost[0]}-{lost[-1]}" in p for p in validate_run(run))


def test_validate_costs_nothing_per_planned_step(run):
    import tracemalloc

    edit_manifest(run, steps=10**15)  # finished, 20 steps recorded, 10**15 planned
    tracemalloc.start()
    try:
        problems = validate_run(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "manifest.json: field 'steps' must be in [0, 1000000000000], got 1000000000000000" in problems
    assert f"heads: {10**15 - 20} steps missing: 20-{10**15 - 1}" in problems
    assert peak < 64 * 2**20, f"validate allocated {peak / 2**20:.0f} MiB"


def test_missing_ranges_agree_with_a_set_difference():
    from aah_viz.runlog.validate import missing_ranges

    rng = np.random.default_rng(0)
    for _ in range(200):
        end = int(rng.integers(0, 40))
        steps = np.unique(rng.integers(-3, 45, size=int(rng.integers(1, 30))))
        absent = sorted(set(range(end + 1)) - set(steps.tolist()))
        ranges = missing_ranges(steps, end)
        assert [s for lo, hi in ranges for s in range(lo, hi + 1)] == absent
        assert all(b[0] > a[1] + 1 for a, b in zip(ranges, ranges[1:]))  # maximal, in order


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"last_step": 10**9}, "field 'last_step' is 1000000000 but the tables' last step is 19"),
        ({"last_step": 7}, "field 'last_step' is 7 but the tables' last step is 19"),
        ({"n_layer": 10**9}, "field 'n_layer' is 1000000000 but the heads table has 2 distinct layers"),
        ({"n_layer": 5}, "field 'n_layer' is 5 but the heads table has 2 distinct layers"),
        ({"n_head": 3}, "field 'n_head' is 3 but the heads table has 4 distinct heads"),
        ({"steps": 12}, "heads: rows up to step 19 but the manifest plans 12 steps"),
    ],
)
def test_a_manifest_that_contradicts_its_tables_is_damage_with_the_reason(run, changes, said, capsys):
    edit_manifest(run, **changes)
    assert main(["validate", str(run)]) == 2
    out = capsys.readouterr().out
    assert said in out, out


def test_a_live_writers_manifest_may_lag_behind_its_rows_but_never_lead(run):
    writer = RunWriter.resume(run)
    try:
        edit_manifest(run, status="running", last_step=15)  # a flush not yet in the manifest
        assert validate_run(run) == []
        edit_manifest(run, last_step=25)
        assert validate_run(run) == [
            "manifest.json: field 'last_step' is 25 but the tables' last step is 19; the manifest does not describe "
            "this run"
        ]
    finally:
        writer.closed = True
        writer._lock.release()


def test_duplicated_steps_are_found_from_the_footers_as_validate_finds_them_from_the_rows(run):
    from aah_viz.runlog.damage import damage_warnings, repeated_step_ranges

    assert repeated_step_ranges(np.array([[0, 4], [5, 9], [3, 6], [20, 30], [25, 26]])) == [(3, 6), (25, 26)]
    seg = run_paths.list_segments(run / "heads")[1]  # steps 5-9
    (run / "heads" / "part-99999999999999999999-000000.parquet").write_bytes(seg.read_bytes())
    assert "heads: 5 steps recorded more than once (5-9): duplicated rows that the charts count twice; aah-viz " \
        "validate names the files" in damage_warnings(load_run(run))  # fmt: skip
    heads = load_run(run).table("heads")
    twice = sorted(heads[heads.duplicated(["step", "layer", "head"])]["step"].unique())
    assert twice == [5, 6, 7, 8, 9]  # the rows agree
    assert any(p.startswith("heads: 80 rows share a (step, layer, head) key") for p in validate_run(run))
