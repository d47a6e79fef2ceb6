"""``summary.json``: the run writer's per-run summary equals what the tables say, and a reader trusts it only
while it names exactly the run's segments (older, damaged, resumed and live runs included)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import queries
from aah_viz.analysis.windows import run_bucket_fractions
from aah_viz.figures.data import branch_data, hierarchy_data
from aah_viz.runlog import RunWriter, load_run, run_summary, validate_run
from aah_viz.runlog.damage import damage_warnings
from aah_viz.samples import make_synthetic_run

NAMES = ("loss", "val_loss", "acr", "acr_causal")


def independent(run_dir: Path) -> dict:
    """The summary from the Parquet files themselves: every segment's steps read (not its footer), the last
    value of each scalar from all its rows (model-wide rows where there are any)."""
    tables = {}
    values = []
    gradient = []  # [name, size, controller gradient norms logged, of them not zero], every layer, nulls not logged
    for table in ("heads", "scalars", "branch"):
        rows = []
        for seg in sorted((run_dir / table).glob("*.parquet")):
            try:
                data = pq.read_table(seg)
            except Exception:  # noqa: BLE001 - an unreadable segment holds no rows for a reader
                rows.append([seg.name, seg.stat().st_size, None, None])
                gradient += [[seg.name, seg.stat().st_size, 0, 0]] if table == "scalars" else []
                continue
            if table == "scalars":
                norms = [
                    r["value"]
                    for r in data.to_pylist()
                    if r["name"] == "controller_grad_norm" and r["value"] is not None and not math.isnan(r["value"])
                ]
                gradient.append([seg.name, seg.stat().st_size, len(norms), sum(v != 0 for v in norms)])
            steps = data.column("step")
            lo, hi = (pc.min(steps).as_py(), pc.max(steps).as_py()) if len(steps) else (None, None)
            rows.append([seg.name, seg.stat().st_size, lo, hi])
            if table == "scalars":
                values.append(data.select(["step", "layer", "name", "value"]).to_pandas())
        tables[table] = rows
    tables["cluster_validity"] = [
        validity_counts(seg) for seg in sorted((run_dir / "cluster_validity").glob("*.parquet"))
    ]
    tables["controller_grad"] = gradient
    final = {n: None for n in NAMES}
    if values:
        frame = pd.concat(values)
        last, window = int(frame["step"].max()), 1000
        while any(v is None for v in final.values()):  # the run's tail, widened tenfold until every name is found
            tail = frame[frame["step"] >= last - window]
            for name in [n for n, v in final.items() if v is None]:
                rows = tail[(tail["name"] == name) & tail["value"].notna()]
                wide = rows[rows["layer"].isna()]  # model-wide rows, where the window holds any
                rows = wide if len(wide) else rows
                if len(rows):
                    v = float(rows[rows["step"] == rows["step"].max()]["value"].mean())
                    final[name] = v if math.isfinite(v) else None
            if last - window <= 0:
                break
            window *= 10
    steps = {table: step_rows(run_dir, table) for table in ("tree", "updates", "cluster_validity", "margins")}
    steps = {table: rows for table, rows in steps.items() if len(rows) >= run_summary.STEP_INDEX_FROM}
    return {"version": 1, "tables": tables, "final": final, "extent": extent(run_dir), "steps": steps}  # buckets: below


def step_rows(run_dir: Path, table: str) -> list:
    """[name, size, smallest step, largest step] of each segment, its steps read (None, None: no rows, unreadable)."""
    rows = []
    for seg in sorted((run_dir / table).glob("*.parquet")):
        try:
            steps = pq.read_table(seg, columns=["step"]).column("step").to_pylist()
        except Exception:  # noqa: BLE001
            steps = []
        rows.append([seg.name, seg.stat().st_size, min(steps, default=None), max(steps, default=None)])
    return rows


def extent(run_dir: Path) -> dict:
    """Largest layer and head in the rows of the first and last heads segments (what the shape check reads)."""
    found = {}
    segments = sorted((run_dir / "heads").glob("*.parquet"))
    for seg in {segments[0], segments[-1]} if segments else ():
        try:
            data = pq.read_table(seg, columns=["layer", "head"])
        except Exception:  # noqa: BLE001 - unreadable: the check skips it
            continue
        for column in ("layer", "head"):
            if len(data):
                found[column] = max(found.get(column, -1), pc.max(data.column(column)).as_py())
    return found


def validity_counts(seg: Path) -> list:
    """[name, size, partitions, forced splits, assessed (verdict not undefined, a missing one included), real]."""
    try:
        data = pq.read_table(seg).to_pylist()
    except Exception:  # noqa: BLE001
        return [seg.name, seg.stat().st_size, 0, 0, 0, 0]
    forced = sum(r.get("origin") == cv.FORCED for r in data)
    assessed = [r for r in data if r.get("verdict") != cv.UNDEFINED]
    real = sum(r.get("verdict") == cv.REAL for r in assessed)
    return [seg.name, seg.stat().st_size, len(data), forced, len(assessed), real]


def assert_summary_matches(run_dir: Path, stored_expected: bool) -> dict:
    run = load_run(run_dir)
    data, stored = run_summary.summary(run)
    assert stored is stored_expected
    want = independent(run_dir)
    assert data["tables"] == want["tables"]
    assert data["extent"] == want["extent"]
    assert data["steps"] == want["steps"]
    for name in NAMES:
        assert data["final"][name] == pytest.approx(want["final"][name], rel=1e-12, nan_ok=False) or (
            data["final"][name] is None and want["final"][name] is None
        )
    # the page's row and warnings from the summary equal those read from the tables
    fresh = load_run(run_dir)
    assert queries.run_overview(run, data["final"], run_summary.last_scalar_step(data)) == queries.run_overview(fresh)
    assert damage_warnings(run, run_summary.heads_bounds(data)) == damage_warnings(fresh)
    kept = run_summary.buckets(data)
    assert (kept is None) == ("branch" not in run.tables() or not fresh.segments("branch"))
    if kept is not None:  # as the Compare page computed them from the branch table
        want = run_bucket_fractions(branch_data(fresh)["per_layer"])
        assert kept == {int(w): float(v) for w, v in want.items()}
    shares = run_summary.validity_shares(data, run.tables())
    assert shares is not None or "tree" in run.tables()
    if shares is not None:
        assert pd.Series(shares).equals(pd.Series(cv.run_shares(queries.cluster_validity(fresh))))
        assert cv.doubt_from_shares(shares) == cv.groups_in_doubt(queries.cluster_validity(fresh))
    # the page header's controller state: the counts kept against the gradient norms read as the header read them
    norms = queries.scalar_frame(fresh, ["controller_grad_norm"])["value"].dropna()
    assert run_summary.controller_gradient(data) == (len(norms), int((norms != 0).sum()))
    return data


@pytest.fixture(autouse=True)
def index_every_table(monkeypatch):
    """The generated runs here are short: index every table of theirs (one test below keeps the rule)."""
    monkeypatch.setattr(run_summary, "STEP_INDEX_FROM", 1)


CASES = [
    dict(regime="full_adaptive", seed=0, steps=60, flush_every=10),
    dict(regime="full_attention", seed=3, steps=45, flush_every=7),
    dict(regime="fixed_window", seed=5, steps=33, flush_every=33, max_depth=1),
    dict(regime="grouping_off", seed=9, steps=50, flush_every=4, eval_interval=7),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['regime']}-{c['seed']}" for c in CASES])
def test_the_writers_summary_equals_the_tables(tmp_path, case):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, **case)
    data = assert_summary_matches(run_dir, stored_expected=True)
    assert json.loads((run_dir / "summary.json").read_text()) == data
    if case["regime"] != "full_attention":  # routed: level-0 partitions were assessed
        assert run_summary.validity_shares(data)["partitions"] > 0
    if case["regime"] == "full_adaptive":  # a controller that learns: gradient norms logged, not all zero
        assert run_summary.controller_gradient(data)[1] > 0
    assert validate_run(run_dir) == []


def test_a_live_run_has_a_current_summary_after_every_flush(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "live", n_layer=2, n_head=4, steps=30, flush_every=10, status="running")
    assert load_run(run_dir).status == "running"
    assert_summary_matches(run_dir, stored_expected=True)
    writer = RunWriter.resume(run_dir)
    writer.append("scalars", {"step": [30], "name": ["loss"], "value": [1.25]})
    writer.flush()
    data = assert_summary_matches(run_dir, stored_expected=True)
    assert data["final"]["loss"] == 1.25 and run_summary.last_scalar_step(data) == 30
    writer.close("finished")
    assert_summary_matches(run_dir, stored_expected=True)


def test_a_damaged_run_is_summarised_from_its_tables(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=40, flush_every=10)
    heads = sorted((run_dir / "heads").glob("*.parquet"))
    heads[1].unlink()  # a lost segment: steps 10-19 missing
    scalars = sorted((run_dir / "scalars").glob("*.parquet"))
    scalars[-1].write_bytes(scalars[-1].read_bytes()[:100])  # a truncated last segment
    validity = sorted((run_dir / "cluster_validity").glob("*.parquet"))
    validity[0].write_bytes(b"garbage")
    data = assert_summary_matches(run_dir, stored_expected=False)
    assert run_summary.heads_bounds(data) == [(0, 9), (20, 29), (30, 39)]
    assert data["tables"]["cluster_validity"][0][2:] == [0, 0, 0, 0] and run_summary.validity_shares(data)["partitions"]
    assert any("missing (10-19)" in w for w in damage_warnings(load_run(run_dir), run_summary.heads_bounds(data)))


def test_an_older_run_without_a_summary_and_a_copied_one(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=30, flush_every=10)
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)  # names and sizes are kept: the copy's summary stays current
    assert_summary_matches(copy, stored_expected=True)
    (run_dir / "summary.json").unlink()
    assert run_summary.read(run_dir) is None
    assert_summary_matches(run_dir, stored_expected=False)


def test_a_summary_that_disagrees_with_the_tables_is_damage(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=30, flush_every=10)
    data = json.loads((run_dir / "summary.json").read_text())
    data["final"]["loss"] = 123.0
    (run_dir / "summary.json").write_text(json.dumps(data))
    problems = validate_run(run_dir)
    assert len(problems) == 1 and "summary.json disagrees with the tables (final)" in problems[0]
    for bad in ("[1, 2]", '{"version": 1}', "not json", json.dumps({**data, "version": 2})):
        (run_dir / "summary.json").write_text(bad)
        assert run_summary.read(run_dir) is None
        assert_summary_matches(run_dir, stored_expected=False)


def test_a_hard_linked_summary_is_not_trusted(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=20, flush_every=10)
    os.link(run_dir / "summary.json", tmp_path / "other-name")
    assert run_summary.read(run_dir) is None
    assert np.isfinite(run_summary.summary(load_run(run_dir))[0]["final"]["loss"])


def test_compaction_keeps_the_summary_current(tmp_path):
    from aah_viz.runlog.compact import compact_run

    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=40, flush_every=10)
    before = assert_summary_matches(run_dir, stored_expected=True)
    assert compact_run(run_dir)["heads"]["after"] == 1
    after = assert_summary_matches(run_dir, stored_expected=True)
    assert after["final"] == before["final"] and after["buckets"] == before["buckets"]
    assert run_summary.heads_bounds(after) == [(0, 39)]


def test_scalars_last_logged_long_before_the_end_are_found_as_the_tables_say(tmp_path):
    """The summary reads only the segments of the tail windows; values logged far back (val loss long before the
    last step) and a layer's value where the window holds no model-wide one must come out as last_values."""
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=30, flush_every=10, status="running")
    writer = RunWriter.resume(run_dir)
    for start in range(1000, 30001, 1000):
        writer.append("scalars", {"step": [start, start + 1], "name": ["loss", "loss"], "value": [start / 1e4, 0.5]})
        writer.flush()
    writer.append("scalars", {"step": [29990], "layer": [1], "name": ["acr"], "value": [0.75]})
    writer.close("finished")
    data = assert_summary_matches(run_dir, stored_expected=True)
    assert data["final"]["loss"] == 0.5 and data["final"]["acr"] == 0.75
    assert data["final"]["val_loss"] == queries.last_values(load_run(run_dir), ["val_loss"])["val_loss"] is not None


def test_the_shape_check_reads_the_summarys_extent_and_an_older_summary_without_one(tmp_path):
    """The dashboard opens a run without reading its heads footers when the summary kept their extent: a
    manifest that contradicts the heads table is still refused, a summary from before the extent still trusted."""
    from aah_viz.runlog.manifest import read_manifest, write_manifest
    from aah_viz.runlog.reader import check_shape

    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=20, flush_every=10)
    data = json.loads((run_dir / "summary.json").read_text())
    assert data["extent"] == {"layer": 1, "head": 3}
    manifest = read_manifest(run_dir)
    write_manifest(run_dir, {**manifest, "n_head": 5, "config": {**manifest["config"], "n_head": 5}})
    stored = run_summary.read(run_dir)
    with pytest.raises(Exception, match="'n_head' is 5 but the heads table has heads 0..3"):
        check_shape(load_run(run_dir, check=False), run_summary.extent(stored))
    write_manifest(run_dir, manifest)
    del data["extent"]  # a summary written before it kept the extent
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert run_summary.read(run_dir) == data and run_summary.extent(data) is None
    assert validate_run(run_dir) == []
    del data["tables"]["controller_grad"]  # nor the controller gradient's counts: trusted, the header reads the scalars
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert run_summary.read(run_dir) == data and run_summary.controller_gradient(data) is None
    assert validate_run(run_dir) == []
    data["extent"] = {"layer": 1, "head": 9}  # one that disagrees with the footers is damage
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert "disagrees with the tables (extent)" in " ".join(validate_run(run_dir))


def page_reads(run, steps) -> dict:
    """What the pages read of one step or a few (the queries that tell the reader which steps they want)."""
    out = {"tree_steps": queries.tree_steps(run, 0)}
    for table in ("heads", "scalars", "branch", "tree", "updates", "cluster_validity", "margins"):
        out[f"bounds {table}"] = queries.segment_step_bounds(run, table).tolist()
    for s in steps:
        out[f"heads at {s}"] = queries.heads_at_step(run, s)
        out[f"layer at {s}"] = queries.heads_of_layer(run, 1, steps=[s, s + 3])
        out[f"branch at {s}"] = queries.branch_at(run, s)
        out[f"nearest {s}"] = (queries.nearest_step(run, "heads", s), queries.nearest_step(run, "branch", s))
        out[f"validity {s}"] = queries.cluster_validity(run, step=s, layer=1)
        out[f"tree {s}"] = queries.tree_at(run, 1, s)
        out[f"scalars since {s}"] = queries.scalar_frame(run, ["loss", "acr"], since=s)
        h = hierarchy_data(run, 1, s)
        out[f"hierarchy {s}"] = (h["step"], h.get("previous"), h["tree"], h["head_windows"], h["moved"])
    return out


def assert_same_reads(run_dir: Path, seed: int) -> None:
    """Reads through the summary's step index equal reads that open every segment, at random steps."""
    last = int(load_run(run_dir).manifest.get("last_step") or 60)
    steps = sorted(int(s) for s in np.random.default_rng(seed).integers(0, last + 8, size=3))
    fast = page_reads(run_summary.indexed(load_run(run_dir)), steps)
    slow = page_reads(load_run(run_dir), steps)
    assert fast.keys() == slow.keys()
    for name in fast:
        a, b = (fast[name], slow[name]) if isinstance(fast[name], tuple) else ((fast[name],), (slow[name],))
        for x, y in zip(a, b):
            if isinstance(x, pd.DataFrame):
                pd.testing.assert_frame_equal(x, y, obj=name)
            else:
                assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, name


@pytest.mark.slow
def test_reads_through_the_step_index_equal_reads_of_every_segment(tmp_path):
    """Property over generated runs: a current summary, a live run whose summary lags its newest segments, and a
    damaged run (a segment lost, one truncated to another size, the summary naming both): the index only ever
    spares opening segments, the rows are the same."""
    for seed, case in enumerate(CASES[:2]):
        run_dir = make_synthetic_run(tmp_path / f"run{seed}", n_layer=2, n_head=4, **case)
        assert run_summary.step_index(run_dir).get("tree", []) == step_rows(run_dir, "tree")
        assert_same_reads(run_dir, seed)
    live = make_synthetic_run(tmp_path / "live", n_layer=2, n_head=4, steps=40, flush_every=10, status="running")
    behind = (live / "summary.json").read_bytes()
    more = make_synthetic_run(tmp_path / "more", n_layer=2, n_head=4, steps=60, flush_every=10)
    for table in ("heads", "tree", "branch", "cluster_validity", "updates", "scalars"):  # the run's next segments
        for seg in sorted((more / table).glob("*.parquet"))[4:]:
            shutil.copy(seg, live / table / seg.name)
    (live / "summary.json").write_bytes(behind)  # the writer has not rewritten it yet
    assert run_summary.read(live) is None and len(run_summary.step_index(live)["tree"]) == 4
    assert_same_reads(live, 7)
    damaged = make_synthetic_run(tmp_path / "damaged", n_layer=2, n_head=4, steps=50, flush_every=10)
    sorted((damaged / "tree").glob("*.parquet"))[1].unlink()
    cut = sorted((damaged / "heads").glob("*.parquet"))[2]
    cut.write_bytes(cut.read_bytes()[:-200])  # truncated: another size than the summary's, so it is opened
    assert_same_reads(damaged, 8)
    run = run_summary.indexed(load_run(damaged))
    assert queries.heads_at_step(run, 25).empty  # its size is not the summary's: opened, found unreadable
    assert any(cut.name in w for w in run.warnings)


def test_a_summary_whose_step_index_disagrees_is_damage_and_an_older_one_has_none(tmp_path):
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=30, flush_every=10)
    data = json.loads((run_dir / "summary.json").read_text())
    data["steps"]["tree"][0][3] += 100  # a wrong largest step, same segment name and size
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert "disagrees with the tables (steps)" in " ".join(validate_run(run_dir))
    data["steps"]["tree"][0][2] = None  # malformed: one bound without the other
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert run_summary.read(run_dir) is None and run_summary.step_index(run_dir) == {}
    del data["steps"]  # written before the index: trusted, and reads open every segment
    (run_dir / "summary.json").write_text(json.dumps(data))
    assert run_summary.read(run_dir) == data and set(run_summary.step_index(run_dir)) == {"heads", "scalars", "branch"}
    assert validate_run(run_dir) == []


def test_a_short_runs_summary_leaves_its_tables_out_of_the_index(tmp_path, monkeypatch):
    monkeypatch.setattr(run_summary, "STEP_INDEX_FROM", 4)
    run_dir = make_synthetic_run(tmp_path / "run", n_layer=2, n_head=4, steps=30, flush_every=10)  # 3 segments
    data = assert_summary_matches(run_dir, stored_expected=True)
    assert data["steps"] == {} and validate_run(run_dir) == []
    assert set(run_summary.step_index(run_dir)) == {"heads", "scalars", "branch"}
