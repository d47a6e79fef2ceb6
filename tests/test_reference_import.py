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

from aah_viz.cli import main
from aah_viz.errors import AAHVizError, InputFormatError
from aah_viz.export import build_table, collect_runs, import_reference, render
from aah_viz.runlog import load_run, validate_run
from aah_viz.runlog.synthetic import make_synthetic_run

SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper"
HEATMAP_HEADER = "regime,layer_id,head_id,selected_window_idx,selected_window_size,pre_clamp_window_idx,final_window_idx,final_window_size,ACR"

# The reference's files, verbatim (the first test checks them against ../shared when it exists).
PUBLISHED = {
    "aah_v3_4096_table1_training.csv": """method,grouping,hierarchy,joint_scorer,context,seed,val_loss,val_ppl,ACR_train_proxy,flops_ratio,tokens_per_second_train,peak_gpu_alloc_GiB,peak_gpu_reserved_GiB,window_frac_512,window_frac_1024,window_frac_2048,window_frac_4096
Pure baseline,off,none,off,4096,0,6.567178797721863,711.3601187587386,1.0,1.0,4418.455778273884,35.17796564102173,36.638671875,,,,
grouping_off,off,none,off,4096,0,6.565546917915344,710.2002112180259,0.5813802083333334,0.8711939102564102,3633.780956088892,35.99608135223389,38.1796875,0.3281249999999999,0.0885416666666666,0.1302083333333333,0.4531249999999999
Full adaptive,adaptive learned,"[2,2,2,2] adaptive",wide joint,4096,0,6.558972287178039,705.5462229711408,0.306640625,0.7866586538461539,3399.092863449288,36.78188514709473,39.01953125,0.6302083333333333,0.1197916666666666,0.1041666666666666,0.1458333333333333
Shallow freeze,learned frozen,[2],wide joint,4096,0,6.53667140007019,689.9860638511692,0.3723958333333333,0.8068910256410257,3534.4543816493483,36.76906442642212,38.236328125,0.5,0.1875,0.0989583333333333,0.2135416666666666
Deep practical reuse,cached level-0,"[2,2,2,2] reuse",wide joint,4096,0,6.554859161376953,702.6501825697131,0.2890625,0.78125,3394.992850936404,36.615747928619385,38.236328125,0.5625,0.25,0.0625,0.125
""",
    "aah_v3_4096_table2_inference.csv": """method,grouping,hierarchy,joint_scorer,context,checkpoint_step,seed,val_loss,val_ppl,ACR,flops_ratio,flops_reduction_percent,tokens_per_second_infer,elapsed_s,window_frac_512,window_frac_1024,window_frac_2048,window_frac_4096,resolution_per_head_mean_raw
Pure baseline,off,none,off,4096,10000,0,6.587840525830378,726.2109416290015,1.0,1.0,0.0,14419.846700057942,17.327229976654053,,,,,
grouping_off,off,none,off,4096,10000,0,6.589296309674372,727.2689176905376,0.5793843920765027,0.8705798129466162,12.942018705338375,8193.361138006936,30.494933128356937,0.3273565573770491,0.0884562841530054,0.1356728142076503,0.4485143442622942,"[2519.08203125,2228.458984375,2298.754150390625,2226.360595703125,2552.131103515625,2234.754150390625,2303.475341796875,2521.704833984375,2332.8525390625,2334.950927734375,2405.245849609375,2520.131103515625]"
Full adaptive,adaptive learned,"[2,2,2,2] adaptive",wide joint,4096,10000,0,6.582384383092161,722.2594209068576,0.2575243340163934,0.771545948928121,22.8454051071879,4454.830608594653,56.08653211593628,0.6324282786885249,0.1773394808743171,0.1121926229508197,0.0780396174863388,"[956.8524780273438,992.5245971679688,1056.5245361328125,1140.458984375,961.0491943359376,1078.557373046875,948.9835815429688,1032.3934326171875,1076.458984375,1057.57373046875,1304.65576171875,1051.80322265625]"
Shallow freeze,learned frozen,[2],wide joint,4096,10000,0,6.5583310439938405,705.0939412912935,0.3392994364754098,0.7967075189155107,20.32924810844893,7053.018879174308,35.425397872924805,0.5140881147540992,0.1694842896174864,0.1675204918032786,0.1489071038251365,"[1333.5081787109375,1351.868896484375,1357.11474609375,1291.016357421875,1392.2623291015625,1230.6884765625,1585.8360595703125,1513.9671630859375,1138.88525390625,1765.245849609375,1332.983642578125,1383.868896484375]"
Deep practical reuse,cached level-0,"[2,2,2,2] reuse",wide joint,4096,10000,0,6.583314684570813,722.9316525546632,0.3624807889344262,0.8038402427490542,19.615975725094582,4844.560619830374,51.57454299926758,0.5024760928961745,0.1995389344262294,0.0963968579234973,0.2015881147540983,"[1424.2623291015625,1265.3115234375,1751.0819091796875,1262.6884765625,1566.42626953125,1670.8197021484375,1483.016357421875,1456.786865234375,1454.1639404296875,1669.7705078125,1640.9180908203125,1171.4097900390625]"
""",
    "prism_window_bucket_fractions.csv": """method,variant,context,seed,checkpoint_step,window_size,fraction
grouping_off,main_4096_grouping_off,4096,0,10000,512,0.3273565573770491
grouping_off,main_4096_grouping_off,4096,0,10000,1024,0.0884562841530054
grouping_off,main_4096_grouping_off,4096,0,10000,2048,0.1356728142076503
grouping_off,main_4096_grouping_off,4096,0,10000,4096,0.4485143442622942
Full adaptive,main_4096_full_adaptive,4096,0,10000,512,0.6324282786885249
Full adaptive,main_4096_full_adaptive,4096,0,10000,1024,0.1773394808743171
Full adaptive,main_4096_full_adaptive,4096,0,10000,2048,0.1121926229508197
Full adaptive,main_4096_full_adaptive,4096,0,10000,4096,0.0780396174863388
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,512,0.5140881147540992
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,1024,0.1694842896174864
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,2048,0.1675204918032786
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,4096,0.1489071038251365
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,512,0.5024760928961745
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,1024,0.1995389344262294
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,2048,0.0963968579234973
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,4096,0.2015881147540983
""",
    "prism_available_resolution_vector_proxy.csv": """method,variant,context,seed,checkpoint_step,layer_or_head_index_from_wandb_vector,mean_window_size_proxy
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,0,1333.5081787109375
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,1,1351.868896484375
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,2,1357.11474609375
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,3,1291.016357421875
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,4,1392.2623291015625
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,5,1230.6884765625
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,6,1585.8360595703125
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,7,1513.9671630859375
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,8,1138.88525390625
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,9,1765.245849609375
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,10,1332.983642578125
Shallow freeze,main_4096_shallow_freeze,4096,0,10000,11,1383.868896484375
grouping_off,main_4096_grouping_off,4096,0,10000,0,2519.08203125
grouping_off,main_4096_grouping_off,4096,0,10000,1,2228.458984375
grouping_off,main_4096_grouping_off,4096,0,10000,2,2298.754150390625
grouping_off,main_4096_grouping_off,4096,0,10000,3,2226.360595703125
grouping_off,main_4096_grouping_off,4096,0,10000,4,2552.131103515625
grouping_off,main_4096_grouping_off,4096,0,10000,5,2234.754150390625
grouping_off,main_4096_grouping_off,4096,0,10000,6,2303.475341796875
grouping_off,main_4096_grouping_off,4096,0,10000,7,2521.704833984375
grouping_off,main_4096_grouping_off,4096,0,10000,8,2332.8525390625
grouping_off,main_4096_grouping_off,4096,0,10000,9,2334.950927734375
grouping_off,main_4096_grouping_off,4096,0,10000,10,2405.245849609375
grouping_off,main_4096_grouping_off,4096,0,10000,11,2520.131103515625
Full adaptive,main_4096_full_adaptive,4096,0,10000,0,956.8524780273438
Full adaptive,main_4096_full_adaptive,4096,0,10000,1,992.5245971679688
Full adaptive,main_4096_full_adaptive,4096,0,10000,2,1056.5245361328125
Full adaptive,main_4096_full_adaptive,4096,0,10000,3,1140.458984375
Full adaptive,main_4096_full_adaptive,4096,0,10000,4,961.0491943359376
Full adaptive,main_4096_full_adaptive,4096,0,10000,5,1078.557373046875
Full adaptive,main_4096_full_adaptive,4096,0,10000,6,948.9835815429688
Full adaptive,main_4096_full_adaptive,4096,0,10000,7,1032.3934326171875
Full adaptive,main_4096_full_adaptive,4096,0,10000,8,1076.458984375
Full adaptive,main_4096_full_adaptive,4096,0,10000,9,1057.57373046875
Full adaptive,main_4096_full_adaptive,4096,0,10000,10,1304.65576171875
Full adaptive,main_4096_full_adaptive,4096,0,10000,11,1051.80322265625
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,0,1424.2623291015625
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,1,1265.3115234375
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,2,1751.0819091796875
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,3,1262.6884765625
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,4,1566.42626953125
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,5,1670.8197021484375
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,6,1483.016357421875
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,7,1456.786865234375
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,8,1454.1639404296875
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,9,1669.7705078125
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,10,1640.9180908203125
Deep practical reuse,main_4096_deep_practical_reuse,4096,0,10000,11,1171.4097900390625
""",
}


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


def test_embedded_copies_are_the_published_files():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present on this machine")
    for name, text in PUBLISHED.items():
        assert (SHARED / name).read_text(encoding="utf-8") == text, name


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


def test_real_reference_folder(tmp_path):
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present on this machine")
    written = import_reference(SHARED, tmp_path / "runs")
    assert len(written) == 9
    qwen = [p for p in written if p.name.startswith("qwen3-4b-")]
    for path in qwen:
        heads = pd.read_parquet(path / "heads", columns=["layer"])
        assert len(heads) == 36 * 32
    got = _cells(render(build_table("training", collect_runs(written[:5]), layout="paper"), "csv"))
    assert got == _cells((SHARED / "aah_v3_4096_table1_training.csv").read_text())


def test_names_from_files_never_leave_the_output_folder(tmp_path):
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "heat.csv").write_text(_heatmap("../../escape"), encoding="utf-8")
    out = tmp_path / "deep" / "runs"
    written = import_reference(folder, out)
    assert [p.parent for p in written] == [out]
    assert written[0].name == "qwen3-4b-escape"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "paper"]
