"""The run directory: writer, reader and validator on real Parquet files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aah_viz.errors import RunLogError, SchemaVersionError, UnsafePathError
from aah_viz.runlog import RunWriter, discover_runs, load_run, make_manifest, resolve_under, run_dirs, validate_run
from aah_viz.samples import make_synthetic_run
from aah_viz.schema import ALL_TABLES, TABLES

REPO = Path(__file__).resolve().parents[1]
WINDOWS = [4, 8, 16]
T, L, H, D = 16, 2, 4, 2


def manifest(run_id="r1", **extra):
    return make_manifest(
        run_id=run_id,
        regime="full_adaptive",
        seed=3,
        config={"w_min": 0, "n_layer": L},
        windows=WINDOWS,
        seq_len=T,
        n_layer=L,
        n_head=H,
        max_depth=D,
        **extra,
    )


def heads_rows(step, window_idx=None):
    window_idx = np.asarray(window_idx if window_idx is not None else [0, 1, 2, 1] * L)
    return {
        "step": np.full(L * H, step),
        "layer": np.repeat(np.arange(L), H),
        "head": np.tile(np.arange(H), L),
        "window_idx": window_idx,
        "window": np.asarray(WINDOWS)[window_idx],
        "raw_idx": window_idx,
        "group_l0": np.tile([0, 0, 1, 1], L),
        "group_l1": np.zeros(L * H, dtype=int),
    }


def acr_rows(step, window_idx=None):
    rows = heads_rows(step, window_idx)
    per_layer = [np.minimum(T, rows["window"][rows["layer"] == l]).sum() / (H * T) for l in range(L)]
    return {
        "step": np.full(L + 1, step),
        "layer": [None] + list(range(L)),
        "name": ["acr"] * (L + 1),
        "value": [float(np.mean(per_layer))] + per_layer,
    }


def example_rows(step):
    """One batch of rows for every contract table (probe tables included)."""
    rows = {"heads": heads_rows(step), "scalars": acr_rows(step)}
    rows["tree"] = {
        "step": [step, step],
        "layer": [0, 0],
        "level": [0, 1],
        "node": [0, 0],
        "parent": [0, None],
        "members": [[0, 1], [0, 1, 2, 3]],
        "children": [[0, 1], [0, 1]],
        "logits": [[0.5, 0.1, -1.0], [1.0, 0.0, 0.0]],
        "base_logits": [[0.4, 0.1, -1.0], [1.0, 0.0, 0.0]],
        "margin": [0.4, 1.0],
        "raw_idx": [0, 0],
        "final_idx": [0, 0],
        "joint_paired": [True, False],
        "joint_delta": [0.1, 0.0],
        "shadow": [False, False],
        "origin": ["natural", "natural"],
        "forced_split": [False, False],
        "merged": [0, 0],
        "sim_mean": [0.5, 0.4],
        "sim_std": [0.1, 0.1],
        "sim_min": [0.3, 0.2],
        "sim_max": [0.7, 0.6],
        "features": [list(np.arange(9.0)), []],
    }
    rows["branch"] = {"step": step, "layer": [0, 0, 0], "window": WINDOWS, "fraction": [0.25, 0.5, 0.25]}
    rows["events"] = {"step": [step], "layer": [None], "kind": ["eval"], "detail": [json.dumps({"val_loss": 1.5})]}
    rows["updates"] = {
        "step": [step],
        "layer": [0],
        "prev_step": [None],
        "ari": [0.5],
        "group_switch_share": [0.25],
        "window_switch_share": [0.5],
        "topology_changed": [True],
        "n_groups": [2],
        "n_levels": [1],
        "window_idx": [[0, 1, 2, 1]],
        "window_switched": [[1]],
        "group_switched": [[0, 3]],
        "flipped": [[]],
    }
    for name, columns in ALL_TABLES.items():
        if name in rows:
            continue
        row = {}
        for col, typ in columns.items():
            if pa.types.is_string(typ):
                row[col] = ["x"]
            elif pa.types.is_list(typ):
                row[col] = [[1, 0]]
            elif pa.types.is_floating(typ):
                row[col] = [0.5]
            elif pa.types.is_boolean(typ):
                row[col] = [True]
            else:
                row[col] = [step if col == "step" else 1]
        rows[name] = row
    return rows


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "runs" / "r1"
    # every table written by hand here, the per-update summaries too (the writer's own are tested elsewhere)
    with RunWriter.create(path, {**manifest(), "update_summaries": False}) as w:
        for step in range(3):
            for table, rows in example_rows(step).items():
                w.append(table, rows)
            w.flush()
    return path


# ---------------------------------------------------------------------- round trip
def test_round_trip_every_table_keeps_values_and_types(run_dir):
    run = load_run(run_dir)
    assert run.status == "finished" and run.regime == "full_adaptive" and run.seed == 3
    assert run.manifest["last_step"] == 2 and run.manifest["finished_at"]
    assert set(run.tables()) == set(ALL_TABLES)
    for name, columns in ALL_TABLES.items():
        data = run.arrow_table(name)
        for col, typ in columns.items():
            assert data.schema.field(col).type == typ, (name, col)
        expected = pd.concat([pd.DataFrame(example_rows(s)[name]) for s in range(3)], ignore_index=True)
        got = run.table(name)
        assert len(got) == len(expected), name
        for col in expected.columns:
            exp_values = expected[col].tolist()
            got_values = [list(v) if isinstance(v, np.ndarray) else v for v in got[col].tolist()]
            for e, g in zip(exp_values, got_values):
                if e is None or (isinstance(e, float) and np.isnan(e)):
                    assert g is None or (isinstance(g, float) and np.isnan(g)), (name, col)
                elif isinstance(e, list):
                    assert np.allclose(np.asarray(e, dtype=float), np.asarray(g, dtype=float)), (name, col)
                else:
                    assert e == pytest.approx(g), (name, col, e, g)
    assert list(run.steps()) == [0, 1, 2]
    assert run.table("heads")["group_l1"].tolist() == [0] * (3 * L * H)


def test_columns_and_filters_project_and_select(run_dir):
    run = load_run(run_dir)
    df = run.table("heads", columns=["step", "head"], filters=[("layer", "==", 1), ("step", ">=", 1)])
    assert list(df.columns) == ["step", "head"]
    assert len(df) == 2 * H and set(df["step"]) == {1, 2}
    acr = run.scalar("acr")
    assert list(acr["step"]) == [0, 1, 2] and acr["layer"].isna().all()
    with pytest.raises(RunLogError, match="no column 'nope'"):
        run.table("heads", columns=["nope"])


def test_missing_table_is_empty_with_schema_columns(tmp_path):
    path = tmp_path / "empty"
    RunWriter.create(path, manifest()).close()
    df = load_run(path).table("tree")
    assert len(df) == 0 and list(df.columns) == list(TABLES["tree"])
    assert str(df["layer"].dtype) == "int16" and str(df["step"].dtype) == "int64"
    assert list(load_run(path).table("heads").columns)[-2:] == ["group_l0", "group_l1"]


def test_pandas_and_duckdb_read_table_folders_directly(run_dir):
    duckdb = pytest.importorskip("duckdb")
    heads = pd.read_parquet(run_dir / "heads")
    assert len(heads) == 3 * L * H
    n, mean_window = duckdb.sql(
        f"select count(*), avg(\"window\") from read_parquet('{run_dir}/heads/*.parquet')"
    ).fetchall()[0]
    assert n == 3 * L * H and mean_window == pytest.approx(heads["window"].mean())
    names = duckdb.sql(f"select distinct name from read_parquet('{run_dir}/scalars/*.parquet')").fetchall()
    assert names == [("acr",)]


def test_create_refuses_existing_run_unless_overwrite(run_dir):
    with pytest.raises(RunLogError, match="already holds a run"):
        RunWriter.create(run_dir, manifest())
    assert len(load_run(run_dir).table("heads")) == 3 * L * H  # untouched
    RunWriter.create(run_dir, manifest(), overwrite=True).close()
    assert len(load_run(run_dir).table("heads")) == 0


def test_manifest_records_software_without_importing_torch(tmp_path):
    code = (
        "import sys; from aah_viz.runlog import make_manifest; "
        "m = make_manifest(run_id='x', regime='r', seed=0, config={}, windows=[1, 2], seq_len=2, n_layer=1, "
        "n_head=1, max_depth=1, backend='dense'); "
        "print('torch' in sys.modules, 'torch' in m['software'], m['status'], m['backend']['resolved'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False", "running", "dense"]
    with pytest.raises(RunLogError, match="ascending"):
        make_manifest(
            run_id="x", regime="r", seed=0, config={}, windows=[8, 4], seq_len=2, n_layer=1, n_head=1, max_depth=1
        )


def test_exception_in_context_marks_run_failed(tmp_path):
    path = tmp_path / "boom"
    with pytest.raises(ZeroDivisionError):
        with RunWriter.create(path, manifest()) as w:
            w.append("heads", heads_rows(0))
            1 / 0  # noqa: B018
    run = load_run(path)
    assert run.status == "failed"
    assert len(run.table("heads")) == L * H
    assert run.events("error")["detail"].map(json.loads).iloc[0]["error"] == "ZeroDivisionError"


def test_auto_flush_and_bad_rows(tmp_path):
    w = RunWriter.create(tmp_path / "a", manifest())
    w.flush_rows = 2 * L * H
    w.append("heads", heads_rows(0))
    assert not list((tmp_path / "a").glob("heads/*.parquet"))
    w.append("heads", heads_rows(1))
    assert len(list((tmp_path / "a").glob("heads/*.parquet"))) == 1 and w.buffered_rows() == 0
    with pytest.raises(RunLogError, match="different lengths"):
        w.append("heads", {"step": [0, 1], "layer": [0]})
    with pytest.raises(RunLogError, match="'layer' cannot be stored as int16"):
        w.append("heads", {"step": [0], "layer": [70000]})
    with pytest.raises(RunLogError, match="invalid table name"):
        w.append("../evil", {"step": [0]})
    w.close()
    with pytest.raises(RunLogError, match="closed"):
        w.append("heads", heads_rows(2))


# ---------------------------------------------------------------------- live and damaged runs
def test_reader_reads_while_writer_appends(tmp_path):
    path = tmp_path / "live"
    w = RunWriter.create(path, manifest())
    w.manifest_interval_s = 0  # record progress at every flush
    run = load_run(path)
    assert run.status == "running" and len(run.table("heads")) == 0
    for step in range(4):
        w.append("heads", heads_rows(step))
        assert len(run.refresh().table("heads")) == step * L * H  # buffered rows are not visible yet
        w.flush()
        assert len(run.table("heads")) == step * L * H  # a loaded run is a snapshot ...
        assert len(run.refresh().table("heads")) == (step + 1) * L * H  # ... until refreshed
        # a writer caught between temp file and rename leaves a hidden temp file: ignored
        (path / "heads" / f".part-x-{step:06d}.parquet.tmp").write_bytes(b"PAR1 partial")
        assert list(run.steps()) == list(range(step + 1))
    assert run.refresh().manifest["last_step"] == 3
    assert run.warnings == []
    assert validate_run(path) == []
    w.close()


def test_truncated_and_garbage_segments_are_named_and_skipped(run_dir):
    segs = sorted((run_dir / "heads").glob("*.parquet"))
    data = segs[1].read_bytes()
    segs[1].write_bytes(data[: len(data) // 2])  # truncated, as by a full disk
    (run_dir / "heads" / "part-9-000099.parquet").write_bytes(os.urandom(300))
    run = load_run(run_dir)
    df = run.table("heads")
    assert sorted(set(df["step"])) == [0, 2]
    text = " ".join(run.warnings)
    assert segs[1].name in text and "part-9-000099.parquet" in text
    problems = validate_run(run_dir)
    assert any(segs[1].name in p for p in problems) and any("part-9-000099.parquet" in p for p in problems)
    assert list(run.steps()) == [0, 2]


def test_corrupt_data_page_with_valid_footer_is_skipped(run_dir):
    seg = sorted((run_dir / "heads").glob("*.parquet"))[0]
    data = bytearray(seg.read_bytes())
    for i in range(4, min(len(data) - 200, 400)):
        data[i] = 0xFF  # destroy the column chunks, keep the footer
    seg.write_bytes(bytes(data))
    run = load_run(run_dir)
    df = run.table("heads")
    assert set(df["step"]) <= {1, 2} and len(df) >= 2 * L * H
    assert any(seg.name in w for w in run.warnings)
    assert any(seg.name in p for p in validate_run(run_dir))


def test_newer_major_schema_is_refused_with_clear_message(run_dir):
    meta = json.loads((run_dir / "manifest.json").read_text())
    meta["schema_version"] = "2.0"
    (run_dir / "manifest.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaVersionError, match=r"written with schema 2\.0; this aah-viz reads 1\.x; upgrade aah-viz"):
        load_run(run_dir)
    assert any("upgrade aah-viz" in p for p in validate_run(run_dir))
    meta["schema_version"] = "1.7"
    (run_dir / "manifest.json").write_text(json.dumps(meta))
    assert any("newer than" in w for w in load_run(run_dir).warnings)


def test_missing_or_broken_manifest(tmp_path):
    with pytest.raises(RunLogError, match="manifest.json is missing"):
        load_run(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RunLogError, match="not valid JSON"):
        load_run(tmp_path)


# ---------------------------------------------------------------------- resume
def test_resume_drops_later_rows_and_keeps_earlier_ones_exactly(tmp_path):
    path = tmp_path / "res"
    w = RunWriter.create(path, manifest())
    for step in range(6):
        for table, rows in example_rows(step).items():
            w.append(table, rows)
        if step % 2 == 1:
            w.flush()  # segments hold steps 0-1, 2-3, 4-5
    del w  # killed: never closed
    before = {t: load_run(path).table(t) for t in ALL_TABLES}
    w = RunWriter.resume(path, keep_through_step=2)
    run = load_run(path)
    assert run.status == "running" and run.manifest["last_step"] == 2
    for table in ALL_TABLES:
        kept = run.table(table)
        if table == "events":
            kept = kept[kept["kind"] != "resume"].reset_index(drop=True)
        expected = before[table][before[table]["step"] <= 2].reset_index(drop=True)
        pd.testing.assert_frame_equal(kept, expected, check_dtype=True)
    resume = run.events("resume")
    assert len(resume) == 1 and json.loads(resume["detail"].iloc[0])["keep_through_step"] == 2
    for step in range(3, 6):
        w.append("heads", heads_rows(step))
        w.append("scalars", acr_rows(step))
    w.close()
    heads = load_run(path).table("heads")
    assert sorted(heads["step"].unique()) == list(range(6))
    assert not heads.duplicated(["step", "layer", "head"]).any()
    assert validate_run(path) == []


def test_resume_sets_aside_unreadable_segment_without_deleting_it(run_dir):
    seg = sorted((run_dir / "heads").glob("*.parquet"))[0]
    seg.write_bytes(b"garbage")
    RunWriter.resume(run_dir, keep_through_step=10).close()
    assert not seg.exists() and (run_dir / "heads" / f"_{seg.name}.corrupt").read_bytes() == b"garbage"
    # the set-aside rows (step 0) are lost: validate says so, twice over (the file and the gap)
    assert validate_run(run_dir) == [
        f"heads/{seg.name}: segment set aside as unreadable (kept as _{seg.name}.corrupt); its rows are lost",
        "heads: 1 step missing: 0",
    ]
    assert len(pd.read_parquet(run_dir / "heads")) == 2 * L * H


# ---------------------------------------------------------------------- validate
def test_validate_finds_duplicates_bad_types_and_acr_mismatch(tmp_path):
    path = tmp_path / "bad"
    with RunWriter.create(path, manifest()) as w:
        w.append("heads", heads_rows(0))
        w.append("heads", heads_rows(0))  # duplicated step
        w.append("scalars", {"step": [1], "layer": [None], "name": ["acr"], "value": [0.99]})
        w.append("heads", heads_rows(1))
    pq.write_table(pa.table({"step": pa.array([5], pa.int32())}), path / "branch" / "part-1-000000.parquet") if (
        path / "branch"
    ).mkdir() is None else None
    problems = validate_run(path)
    text = "\n".join(problems)
    assert "heads: " in text and "share a (step, layer, head) key" in text
    assert "model-wide acr disagrees" in text and "step 1" in text
    assert "branch/part-1-000000.parquet: column 'step' has type int32, expected int64" in text
    assert "branch/part-1-000000.parquet: missing required column 'fraction'" in text


def test_validate_acr_uses_w_min(tmp_path):
    path = tmp_path / "wmin"
    m = manifest()
    m["config"]["w_min"] = 8
    with RunWriter.create(path, m) as w:
        w.append("heads", heads_rows(0))
        w.append("scalars", acr_rows(0))  # computed without the W_min clamp: wrong for this run
    assert any("acr disagrees" in p for p in validate_run(path))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "aah_viz", "validate", *map(str, args)], capture_output=True, text=True, cwd=REPO
    )


def test_validate_cli_exit_codes(run_dir, tmp_path):
    ok = cli("--json", run_dir)
    assert ok.returncode == 0 and json.loads(ok.stdout)["valid"] is True
    (run_dir / "heads" / "part-9-000099.parquet").write_bytes(b"not parquet at all")
    report = json.loads(cli("--json", run_dir).stdout)
    assert report["valid"] is False and any("part-9-000099" in p for p in report["runs"][0]["problems"])
    both = cli(run_dir.parent, tmp_path / "nowhere")  # a folder of runs and a missing run
    assert both.returncode == 2 and f"{run_dir}: heads/part-9-000099.parquet" in both.stdout
    assert "no such folder" in both.stdout


def test_synthetic_run_validates_and_is_consistent(tmp_path):
    path = make_synthetic_run(tmp_path / "syn", n_layer=3, n_head=8, steps=60, warmup=10, flush_every=25)
    assert validate_run(path) == []
    run = load_run(path)
    assert run.status == "finished" and list(run.steps()) == list(range(60))
    heads = run.table("heads")
    assert len(heads) == 60 * 3 * 8
    tree = run.table("tree")
    real = tree[~tree["shadow"]]
    assert set(real["step"]) == set(range(10, 60, 5))
    # parent constraint: a child's final index never exceeds its parent's
    keyed = tree.set_index(["step", "layer", "level", "node"])["final_idx"]
    child = tree[tree["parent"].notna()]
    parents = keyed.loc[list(zip(child["step"], child["layer"], child["level"] + 1, child["parent"].astype(int)))]
    assert (child["final_idx"].to_numpy() <= parents.to_numpy()).all()
    # executed heads follow their level-0 node's final index at updates
    upd = heads[heads["step"] == 10].merge(
        tree[(tree["step"] == 10) & (tree["level"] == 0)],
        left_on=["step", "layer", "group_l0"],
        right_on=["step", "layer", "node"],
    )
    assert (upd["window_idx"] == upd["final_idx"]).all() and len(upd) == 3 * 8
    # members of every node are exactly the heads carrying that group id at that level
    at = heads[heads["step"] == 30]
    for row in tree[tree["step"] == 30].itertuples():
        col = at[(at["layer"] == row.layer) & (at[f"group_l{row.level}"] == row.node)]
        assert list(row.members) == sorted(col["head"].tolist())
        if row.level > 0:
            below = tree[
                (tree["step"] == 30)
                & (tree["layer"] == row.layer)
                & (tree["level"] == row.level - 1)
                & (tree["parent"] == row.node)
            ]
            assert list(row.children) == sorted(below["node"].tolist())
    names = set(run.table("scalars")["name"])
    assert {
        "acr",
        "acr_causal",
        "loss",
        "val_loss",
        "val_ppl",
        "lr",
        "tokens_per_s",
        "peak_mem_mb",
        "controller_grad_norm",
        "controller_weight_drift",
    } <= names
    assert {"routing_update", "warmup_end", "eval"} <= set(run.table("events")["kind"])
    again = make_synthetic_run(tmp_path / "syn2", n_layer=3, n_head=8, steps=60, warmup=10, flush_every=25)
    pd.testing.assert_frame_equal(load_run(again).table("heads"), heads)  # seeded: reproducible


# ---------------------------------------------------------------------- paths
def test_resolve_under_rejects_escapes(tmp_path):
    root = tmp_path / "logs"
    (root / "a" / "b").mkdir(parents=True)
    assert resolve_under(root, "a/b") == (root / "a" / "b").resolve()
    assert resolve_under(root, "a/../a") == (root / "a").resolve()
    for bad in ("..", "../logs2", "a/../../x", str(tmp_path), "/etc/passwd"):
        with pytest.raises(UnsafePathError):
            resolve_under(root, bad)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        resolve_under(root, "link")
    (root / "inner").symlink_to(root / "a")
    assert resolve_under(root, "inner/b") == (root / "a" / "b").resolve()


def test_discover_runs_follows_no_symlink_out(tmp_path):
    root = tmp_path / "logs"
    for name in ("x/r1", "r0", "x/y/r2"):
        RunWriter.create(root / name, manifest(run_id=name)).close()
    outside = tmp_path / "elsewhere"
    RunWriter.create(outside / "secret", manifest(run_id="secret")).close()
    (root / "link").symlink_to(outside)
    (root / "loop").symlink_to(root)
    assert discover_runs(root) == [root / "r0", root / "x" / "r1", root / "x" / "y" / "r2"]
    assert discover_runs(root / "r0") == [root / "r0"]


def test_discovery_resolves_only_links_and_finds_what_resolving_every_folder_finds(tmp_path):
    """Folders reached by no link are taken as resolved; links inside the root are followed once, a manifest
    that is a link out of the root makes no run: the same runs as resolving every folder and manifest."""
    root = tmp_path / "logs"
    for name in ("a/r1", "b/r2", "c"):
        RunWriter.create(root / name, manifest(run_id=name)).close()
    (root / "via").symlink_to(root / "a")  # the same run again through a link inside: found once
    outside = tmp_path / "elsewhere"
    RunWriter.create(outside / "secret", manifest(run_id="secret")).close()
    (root / "fake").mkdir()
    (root / "fake" / "manifest.json").symlink_to(outside / "secret" / "manifest.json")  # a manifest leading out
    (root / "b" / "inner").symlink_to(root / "c")  # a run reached first through a link

    def by_resolving_every_path() -> list:
        base = root.resolve()
        found, seen = [], set()
        for dirpath, dirnames, _ in os.walk(root, followlinks=True):
            here = Path(dirpath)
            real = here.resolve()
            if real in seen or not (real == base or base in real.parents):
                dirnames[:] = []
                continue
            seen.add(real)
            m = here / "manifest.json"
            if m.is_file() and (m.resolve() == base or base in m.resolve().parents):
                found.append(real)
                dirnames[:] = []
        return sorted(found)

    got = discover_runs(root)
    assert sorted(p.resolve() for p in got) == by_resolving_every_path()
    assert len(got) == 3 and root / "fake" not in got


def test_run_dirs_takes_runs_and_folders_of_runs_each_run_once_and_names_what_is_neither(tmp_path):
    root = tmp_path / "logs"
    for name in ("a", "b/c"):
        RunWriter.create(root / name, manifest(run_id=name)).close()
    (tmp_path / "a-again").symlink_to(root / "a")
    # a run, then the folder holding it, then the same run through a link: the run comes once, where first named
    assert run_dirs([root / "b" / "c", root, tmp_path / "a-again"]) == [root / "b" / "c", root / "a"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunLogError, match="empty holds no run directories"):
        run_dirs([root / "a", tmp_path / "empty"])
    with pytest.raises(RunLogError, match="missing does not exist"):
        run_dirs([tmp_path / "missing"])


def test_validate_checks_causal_coverage_and_per_step_seq_len(tmp_path):
    from aah_viz import coverage

    path = tmp_path / "causal"
    rows = heads_rows(0)
    windows = rows["window"]
    per_layer = [coverage.causal_coverage(windows[rows["layer"] == l], T) for l in range(L)]
    with RunWriter.create(path, manifest()) as w:
        w.append("heads", rows)
        w.append(
            "scalars",
            {"step": 0, "layer": [None, 0, 1], "name": "acr_causal", "value": [float(np.mean(per_layer))] + per_layer},
        )
    assert validate_run(path) == []
    # the same windows at a shorter step length: the logged values no longer match ...
    with RunWriter.resume(path) as w:
        w.append("scalars", {"step": [0], "layer": [None], "name": ["seq_len"], "value": [8.0]})
    assert any("acr_causal disagrees" in p for p in validate_run(path))


def test_append_accepts_dataframes_numpy_matrices_and_keeps_nan_in_floats(tmp_path):
    path = tmp_path / "df"
    frame = pd.DataFrame(
        {
            "step": [0, 0, 1],
            "layer": [np.nan, 1.0, np.nan],
            "name": ["loss", "acr_x", "loss"],
            "value": [1.5, np.nan, 1.25],
        }
    )
    with RunWriter.create(path, manifest()) as w:
        w.append("scalars", frame)
        w.append("scalars", {"step": 2, "layer": [None, None], "name": ["a", "b"], "value": [float("nan"), 2.0]})
        w.append(
            "tree",
            {
                "step": [0, 0],
                "layer": 0,
                "level": 0,
                "node": [0, 1],
                "members": [[0, 1], [2, 3]],
                "logits": np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]], dtype=np.float32),
            },
        )
    run = load_run(path)
    got = run.table("scalars")
    assert got["layer"].isna().tolist() == [True, False, True, True, True]
    values = got["value"].tolist()
    assert np.isnan(values[1]) and np.isnan(values[3]) and values[0] == 1.5 and values[4] == 2.0
    assert run.arrow_table("scalars").column("value").null_count == 0  # NaN stays NaN in float columns
    tree = run.table("tree")
    assert [list(v) for v in tree["members"]] == [[0, 1], [2, 3]]
    assert np.allclose(tree["logits"].iloc[1], [0.3, 0.2, 0.1]) and tree["parent"].isna().all()
    assert len(run.table("scalars", filters=[[("name", "==", "a")], [("name", "==", "b")]])) == 2


def test_segment_with_conflicting_types_is_skipped_by_name(run_dir):
    pq.write_table(
        pa.table({"step": pa.array(["seven"]), "layer": pa.array([0], pa.int16())}),
        run_dir / "heads" / "part-9-000001.parquet",
    )
    run = load_run(run_dir)
    assert len(run.table("heads")) == 3 * L * H
    assert any("part-9-000001.parquet" in w and "conflict" in w for w in run.warnings)
    assert any("part-9-000001.parquet: column 'step' has type string" in p for p in validate_run(run_dir))


def test_failed_flush_keeps_rows_buffered(tmp_path):
    path = tmp_path / "full"
    w = RunWriter.create(path, manifest())
    w.append("heads", heads_rows(0))
    (path / "heads").write_text("a file where the table folder should be")
    with pytest.raises(RunLogError, match="rows stay buffered"):
        w.flush()
    assert w.buffered_rows("heads") == L * H
    (path / "heads").unlink()
    w.close()
    assert len(load_run(path).table("heads")) == L * H
