"""``aah-viz compact``: the same rows in a few files, and a reader that never sees both sets or neither."""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from aah_viz.cli import main
from aah_viz.errors import RunLockedError, RunLogError
from aah_viz.runlog import RunWriter, generations, load_run, paths, validate_run
from aah_viz.runlog.compact import compact_run
from aah_viz.samples import make_synthetic_run

TABLES = ["branch", "events", "heads", "scalars", "tree", "cluster_validity"]  # every table a synthetic run has


def all_rows(run_dir) -> dict[str, pd.DataFrame]:
    run = load_run(run_dir)
    out = {name: run.table(name) for name in TABLES}
    assert run.warnings == []
    return out


def assert_same(a: dict, b: dict) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)


@pytest.fixture
def small_run(tmp_path):
    return make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=12, flush_every=1)


def test_compaction_keeps_every_row_in_order_in_few_files(small_run):
    before = all_rows(small_run)
    pandas_before = pd.read_parquet(small_run / "heads")
    assert len(paths.list_segments(small_run / "heads")) == 12
    report = compact_run(small_run)
    assert report["heads"] == {"before": 12, "after": 1, "rows": 12 * 8, "left": []}
    for name in TABLES:
        assert len(paths.list_segments(small_run / name)) == 1
    assert_same(before, all_rows(small_run))
    pd.testing.assert_frame_equal(pd.read_parquet(small_run / "heads"), pandas_before)  # plain pandas too
    assert validate_run(small_run) == []
    assert load_run(small_run).manifest["compactions"][-1]["tables"]["heads"]["before"] == 12
    assert compact_run(small_run) == {}  # nothing left to do


class Crash(BaseException):
    """Stands for the process dying at this point (no handler catches BaseException subclasses here)."""


def mutation_points(monkeypatch, on_call):
    """Call ``on_call(n, op, args)`` before every rename and delete the compaction makes."""
    real_replace, real_unlink = os.replace, os.unlink
    count = [0]

    def replace(src, dst, *a, **k):
        count[0] += 1
        on_call(count[0], "replace", (src, dst))
        return real_replace(src, dst, *a, **k)

    def unlink(path, *a, **k):
        count[0] += 1
        on_call(count[0], "unlink", (path,))
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    return count


def test_a_reader_sees_the_old_set_or_the_new_one_at_every_point(small_run, monkeypatch):
    """Read the run before every rename and delete of a compaction; also combine a listing taken at
    one point with the generation record read at any later point (a slow reader)."""
    before = all_rows(small_run)
    old = {t: {p.name for p in paths.list_segments(small_run / t)} for t in TABLES}
    states = []

    def check(n, op, args):
        assert_same(before, all_rows(small_run))
        states.append({t: (set(_names(small_run / t)), generations.read_record(small_run / t)[0]) for t in TABLES})

    count = mutation_points(monkeypatch, check)
    compact_run(small_run)
    monkeypatch.undo()
    check(count[0] + 1, "end", ())
    # every table's record, rename and deletions, then the manifest and the run's summary.json, were visited
    assert count[0] == sum(len(old[t]) + 2 for t in TABLES) + 2
    new = {t: {p.name for p in paths.list_segments(small_run / t)} for t in TABLES}
    for t in TABLES:
        for i, state in enumerate(states):
            listed = state[t][0]
            for later in states[i:]:
                record = later[t][1]
                seen = {n for n in listed if n.endswith(".parquet")} - generations.hidden_names(listed, record)
                assert seen in (old[t], new[t]), (t, i)


def _names(directory):
    return [e.name for e in os.scandir(directory)]


def crash_at(tmp_path, monkeypatch, which) -> None:
    """Compaction killed before its k-th file operation, for each k ``which(n)`` picks of the n it makes:
    a reader sees every row right after the crash, and compacting again finishes the job."""
    pristine = make_synthetic_run(tmp_path / "pristine", n_layer=2, n_head=4, steps=6, flush_every=1)
    base = shutil.copytree(pristine, tmp_path / "base")
    before = all_rows(base)
    total = mutation_points(monkeypatch, lambda n, op, args: None)
    compact_run(base)
    monkeypatch.undo()
    n_points = total[0]
    assert n_points > 20
    for k in which(n_points):
        run = shutil.copytree(pristine, tmp_path / f"crash{k}")  # the same run, uncompacted

        def crash(n, op, args, k=k):
            if n == k:
                raise Crash(f"killed before {op} #{n}")

        mutation_points(monkeypatch, crash)
        with pytest.raises(Crash):
            compact_run(run)
        monkeypatch.undo()
        assert_same(before, all_rows(run))  # what a reader sees right after the crash
        problems = validate_run(run)
        assert all("segment swap" in p for p in problems), (k, problems)  # only the unfinished swap, if any
        compact_run(run)  # finishes the job
        assert_same(before, all_rows(run))
        assert validate_run(run) == []
        for name in TABLES:
            assert len(paths.list_segments(run / name)) == 1
            pd.testing.assert_frame_equal(pd.read_parquet(run / name), before[name], check_dtype=False)


def test_a_crash_at_the_first_last_and_every_seventh_point_loses_nothing(tmp_path, monkeypatch):
    crash_at(tmp_path, monkeypatch, lambda n: sorted({1, n, *range(4, n, 7)}))


@pytest.mark.slow
def test_a_crash_at_any_point_loses_nothing_and_compacting_again_finishes(tmp_path, monkeypatch):
    crash_at(tmp_path, monkeypatch, lambda n: range(1, n + 1))


def test_a_loaded_run_survives_a_compaction_between_its_listing_and_its_read(small_run):
    run = load_run(small_run)
    heads = run.table("heads")  # lists the folder: a snapshot of the 12 segments
    compact_run(small_run)  # deletes all 12
    pd.testing.assert_frame_equal(run.table("heads"), heads)  # the vanished segments make it list again
    assert run.warnings == []


def test_compaction_is_refused_while_a_writer_holds_the_run(small_run):
    with RunWriter.resume(small_run):
        with pytest.raises(RunLockedError):
            compact_run(small_run)
    assert compact_run(small_run)["heads"]["after"] == 1


def test_unreadable_segments_are_left_as_they_are_when_forced(small_run):
    bad = paths.list_segments(small_run / "heads")[4]
    bad.write_bytes(b"not parquet")
    with pytest.raises(RunLogError, match=f"is damaged, so it is not compacted .*{bad.name}: unreadable segment"):
        compact_run(small_run)
    report = compact_run(small_run, force=True)
    assert report["heads"]["left"] == [bad.name] and report["heads"]["after"] == 2
    run = load_run(small_run)
    assert sorted(run.table("heads")["step"].unique()) == [s for s in range(12) if s != 4]
    assert any(bad.name in w for w in run.warnings)


def test_finished_runs_can_be_compacted_on_close(tmp_path):
    run = make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=8, flush_every=1)
    before = all_rows(run)
    counts = {t: len(paths.list_segments(run / t)) for t in TABLES}
    writer = RunWriter.resume(run)
    writer.compact_on_close = 4  # tables of more than 4 segments
    writer.close()
    counts["events"] += 1  # the resume event
    assert {t: len(paths.list_segments(run / t)) for t in TABLES} == {t: 1 if n > 4 else n for t, n in counts.items()}
    after = all_rows(run)
    resume_events = after["events"]["kind"] == "resume"
    assert resume_events.sum() == 1
    pd.testing.assert_frame_equal(after["events"][~resume_events].reset_index(drop=True), before["events"])
    for name in ("heads", "tree", "branch", "scalars"):
        pd.testing.assert_frame_equal(after[name], before[name])
    assert validate_run(run) == []


def test_reprobing_a_step_after_compaction_replaces_its_rows(small_run):
    from aah_viz.probes.store import write_probe_tables

    def probe(step, value):
        return pd.DataFrame(
            {"step": [step] * 2, "layer": [0, 1], "head": [0, 0], "probe": "syntax", "metric": "uas", "value": value}
        )

    write_probe_tables(small_run, {"probe_heads": probe(5, 0.1)}, 5)
    write_probe_tables(small_run, {"probe_heads": probe(11, 0.2)}, 11)
    compact_run(small_run)
    write_probe_tables(small_run, {"probe_heads": probe(5, 0.9)}, 5)
    rows = load_run(small_run).table("probe_heads").sort_values(["step", "layer"])
    assert rows["step"].tolist() == [5, 5, 11, 11] and rows["value"].tolist() == [0.9, 0.9, 0.2, 0.2]
    assert validate_run(small_run) == []


def test_compact_cli(small_run, tmp_path, capsys):
    assert main(["compact", str(small_run), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report[str(small_run)]["heads"]["after"] == 1
    assert main(["compact", str(small_run), "--no-progress"]) == 0
    assert "nothing to compact" in capsys.readouterr().out
    assert main(["compact", str(tmp_path / "missing")]) == 2
    assert main(["compact", str(small_run), "--min-segments", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("aah-viz: error:") for line in err)


def test_a_damaged_run_is_not_compacted_without_force(small_run, capsys):
    """Duplicated rows stay visible as two segments until the user decides; merged they would be for good."""
    seg = paths.list_segments(small_run / "heads")[3]
    copy = small_run / "heads" / "part-99999999999999999999-000000.parquet"
    copy.write_bytes(seg.read_bytes())
    listed = {t: sorted(p.name for p in paths.list_segments(small_run / t)) for t in TABLES}
    assert main(["compact", str(small_run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "is damaged, so it is not compacted" in err and "heads: 16 rows share a (step, layer, head) key" in err
    assert "--force" in err
    assert {t: sorted(p.name for p in paths.list_segments(small_run / t)) for t in TABLES} == listed
    assert main(["compact", str(small_run), "--no-progress", "--force"]) == 0
    assert len(paths.list_segments(small_run / "heads")) == 1
    assert any("16 rows share a (step, layer, head) key" in p for p in validate_run(small_run))


def test_a_record_that_hides_segments_is_damage_and_nothing_deletes_them(small_run, capsys):
    """A generation record naming one existing segment as the new set and eleven others as replaced hides
    rows no swap of this run made: validate reports it as damage and never advises compact; compact
    refuses, and compact --force keeps every hidden segment on disk."""
    heads = small_run / "heads"
    names = [p.name for p in paths.list_segments(heads)]
    (heads / generations.RECORD).write_text(json.dumps({"generations": [{"added": names[:1], "replaces": names[1:]}]}))
    problems = validate_run(small_run)
    said = [p for p in problems if "heads" in p]
    assert said and not any("compact" in p for p in problems), problems
    assert any("hides 11 segments" in p for p in said) and validate_run(small_run) == problems
    assert main(["compact", str(small_run)]) == 2
    assert sorted(p.name for p in paths.list_segments(heads)) == sorted(names)
    assert main(["compact", str(small_run), "--force"]) == 0
    capsys.readouterr()
    left = {p.name for p in paths.list_segments(heads)}
    assert set(names[1:]) <= left  # what the record hides is kept
    (heads / generations.RECORD).unlink()
    assert len(pd.read_parquet(heads)) >= 12 * 8  # every step's rows are there to be read again
