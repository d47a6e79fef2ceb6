"""Importing the reference's published numbers: run directories marked imported, and exports that
reproduce the published cells exactly."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from aah_viz import bundled
from aah_viz.cli import main
from aah_viz.errors import AAHVizError, InputFormatError
from aah_viz.export import build_table, collect_runs, render
from aah_viz.importers.reference import import_reference
from aah_viz.runlog import load_run, validate_run
from aah_viz.samples import make_synthetic_run

SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper"
HEATMAP_HEADER = (
    "regime,layer_id,head_id,selected_window_idx,selected_window_size,pre_clamp_window_idx,"
    "final_window_idx,final_window_size,ACR"
)

# The paper's published numbers as the package ships them (the first test checks them against ../shared).
PAPER = bundled.reference_paper_dir()
TABLES = [
    "aah_v3_4096_table1_training.csv",
    "aah_v3_4096_table2_inference.csv",
    "prism_window_bucket_fractions.csv",
    "prism_available_resolution_vector_proxy.csv",
]
PUBLISHED = {name: (PAPER / name).read_text(encoding="utf-8") for name in TABLES}


def _heatmap(regime: str) -> str:
    """A 2-layer x 4-head heatmap in the reference's Qwen3-4B format."""
    windows = (512, 1024, 2048, 4096)
    rows = [HEATMAP_HEADER]
    picks = {0: [0, 0, 2, 3], 1: [1, 1, 1, 0]}
    acr = {0: 0.8828125, 1: 0.6875}
    for layer, idx in picks.items():
        for head, i in enumerate(idx):
            raw = min(3, i + (head == 3))
            rows.append(f"{regime},{layer},{head},{i},{windows[i]},{raw},{i},{windows[i]},{acr[layer]!r}")
    return "\n".join(rows) + "\n"


@pytest.fixture()
def src(tmp_path) -> Path:
    folder = tmp_path / "paper"
    folder.mkdir()
    for name, text in PUBLISHED.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "qwen3_4b_full_adaptive_full_adaptive_heatmap.csv").write_text(
        _heatmap("full_adaptive"), encoding="utf-8"
    )
    (folder / "notes.csv").write_text("something,else\n1,2\n", encoding="utf-8")  # not a known format: ignored
    return folder


@pytest.fixture()
def imported(src, tmp_path) -> list[Path]:
    return import_reference(src, tmp_path / "runs")


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_packaged_copies_are_the_published_files_byte_for_byte():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present on this machine")
    published = sorted(p.name for p in SHARED.glob("*.csv"))
    assert sorted(p.name for p in PAPER.glob("*.csv")) == published
    for name in published:
        assert (PAPER / name).read_bytes() == (SHARED / name).read_bytes(), name


def test_runs_are_marked_imported_and_valid(imported):
    names = [p.name for p in imported]
    assert names == [
        "paper-4096-full-attention-seed0",
        "paper-4096-grouping-off-seed0",
        "paper-4096-full-adaptive-seed0",
        "paper-4096-shallow-freeze-seed0",
        "paper-4096-deep-practical-reuse-seed0",
        "qwen3-4b-full-adaptive",
    ]
    for path in imported:
        run = load_run(path)
        assert run.status == "imported" and run.manifest["imported"] is True
        assert validate_run(path) == [], path
    fa = load_run(imported[2]).manifest
    assert fa["regime"] == "full_adaptive" and fa["seed"] == 0 and fa["seq_len"] == 4096
    assert fa["windows"] == [512, 1024, 2048, 4096]
    assert set(fa["sources"]) == set(PUBLISHED)
    assert load_run(imported[-1]).manifest["sources"] == ["qwen3_4b_full_adaptive_full_adaptive_heatmap.csv"]


def test_export_reproduces_table1_exactly(imported, tmp_path):
    out = tmp_path / "tables"
    paper = [str(p) for p in imported if p.name.startswith("paper-")]
    assert (
        main(["export", *paper, "--table", "training", "--layout", "paper", "--format", "csv", "--out", str(out)]) == 0
    )
    got = _cells((out / "training.csv").read_text(encoding="utf-8"))
    want = _cells(PUBLISHED["aah_v3_4096_table1_training.csv"])
    assert got[0] == want[0]
    assert len(got) == len(want)
    for g_row, w_row in zip(got[1:], want[1:]):
        for col, g, w in zip(want[0], g_row, w_row):
            assert g == w, (w_row[0], col)


def test_imported_data_hold_the_published_values_bit_for_bit(imported):
    """Not only the strings: the numbers stored in the run are the published ones (no rounding)."""
    want = {r["method"]: r for r in csv.DictReader(io.StringIO(PUBLISHED["aah_v3_4096_table1_training.csv"]))}
    names = {
        "val_loss": "val_loss",
        "val_ppl": "val_ppl",
        "acr": "ACR_train_proxy",
        "flops_ratio_est": "flops_ratio",
        "tokens_per_s": "tokens_per_second_train",
        "window_frac_512": "window_frac_512",
    }
    for path in imported[:5]:
        method = load_run(path).manifest["reference"]["method"]
        sc = pd.read_parquet(path / "scalars")
        for ours, theirs in names.items():
            vals = sc.loc[sc["name"] == ours, "value"]
            if want[method][theirs] == "":
                assert vals.empty
            else:
                assert float(vals.iloc[0]) == float(want[method][theirs])
        mem = float(sc.loc[sc["name"] == "peak_mem_mb", "value"].iloc[0])
        assert mem / 1024 == float(want[method]["peak_gpu_alloc_GiB"])
    table = build_table("training", collect_runs(imported[:5]))
    ref = [float(r["val_loss"]) for r in want.values()]
    assert list(table.df["val_loss"]) == ref


def test_export_reproduces_table2_and_merges_long_forms(imported):
    runs = collect_runs(imported[:5])
    got = _cells(render(build_table("inference", runs, layout="paper"), "csv"))
    want = _cells(PUBLISHED["aah_v3_4096_table2_inference.csv"])
    assert got == want
    buckets = list(csv.DictReader(io.StringIO(PUBLISHED["prism_window_bucket_fractions.csv"])))
    res = list(csv.DictReader(io.StringIO(PUBLISHED["prism_available_resolution_vector_proxy.csv"])))
    ev = pd.read_parquet(imported[2] / "events")
    detail = json.loads(ev.loc[ev["kind"] == "inference", "detail"].iloc[0])
    for row in (r for r in buckets if r["method"] == "Full adaptive"):
        assert detail["window_frac"][row["window_size"]] == float(row["fraction"])
    fa = [float(r["mean_window_size_proxy"]) for r in res if r["method"] == "Full adaptive"]
    assert detail["resolution_per_head_mean"] == fa


def test_heatmap_becomes_head_rows(imported):
    run_dir = imported[-1]
    rows = list(csv.DictReader(io.StringIO(_heatmap("full_adaptive"))))
    heads = pd.read_parquet(run_dir / "heads").sort_values(["layer", "head"])
    assert len(heads) == len(rows) == 8
    for (_, h), r in zip(heads.iterrows(), rows):
        assert (h["layer"], h["head"]) == (int(r["layer_id"]), int(r["head_id"]))
        assert h["window"] == int(r["final_window_size"]) and h["window_idx"] == int(r["final_window_idx"])
        assert h["raw_idx"] == int(r["pre_clamp_window_idx"])
    sc = pd.read_parquet(run_dir / "scalars")
    reported = sc[sc["layer"].notna() & (sc["name"] == "acr_reported")].sort_values("layer")
    assert list(reported["value"]) == [0.8828125, 0.6875]  # the published per-layer ACR, exact
    model = sc[sc["layer"].isna()].set_index("name")["value"]
    assert model["acr_reported"] == pytest.approx(np.mean([0.8828125, 0.6875]))
    # recomputed from the executed windows at T = 1024: layer 0 min(w, T)/T = .5,.5,1,1; layer 1 = 1,1,1,.5
    executed = sc[sc["layer"].notna() & (sc["name"] == "acr")].sort_values("layer")
    assert list(executed["value"]) == [0.75, 0.875]
    windows = build_table("windows", collect_runs([run_dir])).df.set_index("layer")
    assert windows.loc["0", "window_frac_512"] == 0.5 and windows.loc["1", "window_frac_1024"] == 0.75


def test_imported_runs_sit_beside_our_runs(imported, tmp_path):
    ours = make_synthetic_run(
        tmp_path / "ours" / "mine",
        n_layer=1,
        n_head=4,
        steps=12,
        windows=(512, 1024, 2048, 4096),
        seq_len=4096,
        warmup=2,
    )
    table = build_table("training", collect_runs([*imported[:5], ours]))
    assert len(table.df) == 6
    assert "mine" in set(table.df["run"])
    with pytest.raises(AAHVizError, match="qwen3-4b-full-adaptive"):  # 1,024-token heatmap runs are another config
        build_table("training", collect_runs(imported))


def test_bad_input_is_refused_before_anything_is_written(src, tmp_path):
    bad = src / "aah_v3_4096_table2_inference.csv"
    lines = bad.read_text().splitlines()
    good = list(lines)
    lines[3] = lines[3].rsplit(",", 2)[0]  # cuts the quoted vector: the row no longer splits into 19 fields
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    with pytest.raises(
        InputFormatError, match=r"aah_v3_4096_table2_inference.csv, line 4: \d+ fields, the header has 19"
    ):
        import_reference(src, out)
    assert not out.exists() or not any(out.iterdir())
    assert main(["import-reference", str(src), "--out", str(out)]) == 2
    good[2] = good[2].replace("6.589296309674372", "six")
    bad.write_text("\n".join(good) + "\n")
    with pytest.raises(InputFormatError, match=r"line 3: column 'val_loss' is not a number: 'six'"):
        import_reference(src, out)
    assert not out.exists() or not any(out.iterdir())


def test_existing_runs_are_not_replaced_without_overwrite(src, tmp_path, capsys):
    out = tmp_path / "runs"
    first = import_reference(src, out)
    before = (first[0] / "manifest.json").read_text()
    with pytest.raises(AAHVizError, match="already exists"):
        import_reference(src, out)
    assert (first[0] / "manifest.json").read_text() == before
    assert main(["import-reference", str(src), "--out", str(out), "--overwrite"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(first)
    # a run of our own in the way is never replaced, even with --overwrite
    ours = out / "qwen3-4b-full-adaptive"
    import shutil

    shutil.rmtree(ours)
    make_synthetic_run(ours, n_layer=1, n_head=4, steps=4, warmup=1)
    with pytest.raises(AAHVizError, match="not an imported run"):
        import_reference(src, out, overwrite=True)
    assert load_run(ours).status == "finished"


def test_import_reference_without_a_folder_imports_the_packaged_numbers(tmp_path, capsys):
    assert main(["import-reference", "--out", str(tmp_path / "runs")]) == 0
    written = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert len(written) == 9
    qwen = [p for p in written if p.name.startswith("qwen3-4b-")]
    for path in qwen:
        heads = pd.read_parquet(path / "heads", columns=["layer"])
        assert len(heads) == 36 * 32
    got = _cells(render(build_table("training", collect_runs(written[:5]), layout="paper"), "csv"))
    assert got == _cells((PAPER / "aah_v3_4096_table1_training.csv").read_text())


def test_names_from_files_never_leave_the_output_folder(tmp_path):
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "heat.csv").write_text(_heatmap("../../escape"), encoding="utf-8")
    out = tmp_path / "deep" / "runs"
    written = import_reference(folder, out)
    assert [p.parent for p in written] == [out]
    assert written[0].name == "qwen3-4b-escape"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "paper"]


def test_no_doc_module_or_default_sends_users_outside_the_repository_for_the_paper_numbers():
    repo = Path(__file__).resolve().parents[1]
    files = [repo / "README.md", repo / "app.py", *(repo / "docs").rglob("*.md")]
    files += [*(repo / "aah_viz").rglob("*.py"), *(repo / "instrumentation").rglob("*.py")]
    assert [str(p.relative_to(repo)) for p in files if "shared/reference/paper" in p.read_text()] == []


def test_no_doc_or_module_points_at_the_developers_material_beside_the_checkout():
    """The method is docs/method.md and the conformance format is in docs/internals.md; the
    developers' folder beside a checkout (``../shared``) is for tests only."""
    repo = Path(__file__).resolve().parents[1]
    files = [repo / "README.md", repo / "app.py", *(repo / "docs").rglob("*.md")]
    files += [*(repo / "aah_viz").rglob("*.py"), *(repo / "instrumentation").rglob("*.py")]
    needles = ("../shared", "shared/reference", "shared/docs")
    assert [str(p.relative_to(repo)) for p in files if any(n in p.read_text() for n in needles)] == []
