"""Paper tables from real run directories: every number checked against the Parquet files,
read here with pandas independently of the exporter."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import waiting
from sklearn.metrics import adjusted_rand_score

from aah_viz.cli import main
from aah_viz.export import (
    MixedConfigError,
    build_table,
    build_tables,
    collect_runs,
    comparison_table,
    difference_curve_table,
    difference_curves_table,
    factorial_table,
    render,
)
from aah_viz.export.formats import latex_document, to_latex
from aah_viz.runlog import RunWriter
from aah_viz.samples import make_synthetic_run

WINDOWS = (8, 16, 32, 64)
STEPS = 60
# final validation loss of each regime (plus 0.01 * seed): known effects for the statistics
FINAL = {"full_attention": 2.50, "full_adaptive": 2.45, "shallow_freeze": 2.40, "deep_practical_reuse": 2.47}
SEEDS = {
    "full_attention": (0, 1, 2),
    "full_adaptive": (0, 1, 2),
    "shallow_freeze": (0, 1, 2),
    "deep_practical_reuse": (0,),
}


def _final_eval(run_dir: Path, regime: str, seed: int) -> None:
    """A closing evaluation: val_loss at the last step and a stand-alone inference record."""
    value = FINAL[regime] + 0.01 * seed
    w = RunWriter.resume(run_dir)
    w.append("scalars", {"step": [STEPS], "layer": [None], "name": ["val_loss"], "value": [value]})
    w.event(
        STEPS,
        "inference",
        checkpoint_step=STEPS,
        n_batches=4,
        val_loss=value + 0.02,
        val_ppl=math.exp(value + 0.02),
        acr=0.5 + 0.01 * seed,
        tokens_per_s=1000.0 + seed,
        elapsed_s=2.5,
        window_frac={"8": 0.25, "16": 0.25, "32": 0.25, "64": 0.25},
    )
    w.close("finished")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for regime, seeds in SEEDS.items():
        for seed in seeds:
            run_dir = root / f"{regime}-s{seed}"
            make_synthetic_run(
                run_dir,
                n_layer=2,
                n_head=6,
                steps=STEPS,
                windows=WINDOWS,
                seq_len=64,
                regime=regime,
                seed=seed,
                warmup=10,
                flush_every=30,
            )
            _final_eval(run_dir, regime, seed)
    return root


@pytest.fixture(scope="module")
def runs(runs_root):
    return collect_runs([runs_root])


@pytest.fixture(scope="module")
def by_regime(runs):
    return build_table("training", runs, by="regime")


# ------------------------------------------------------------------ independent readers


def _scalars(run_dir: Path) -> pd.DataFrame:
    df = pd.read_parquet(run_dir / "scalars")
    return df[df["layer"].isna()].sort_values("step", kind="stable")


def _last(df: pd.DataFrame, name: str) -> float:
    part = df[df["name"] == name].dropna(subset=["value"])
    return float(part["value"].iloc[-1])


def _expected_training(run_dir: Path) -> dict:
    sc = _scalars(run_dir)
    branch = pd.read_parquet(run_dir / "branch")
    last = branch[branch["step"] == branch["step"].max()]
    n_layers = last["layer"].nunique()
    exp = {
        "val_loss": _last(sc, "val_loss"),
        "acr": _last(sc, "acr"),
        "acr_causal": _last(sc, "acr_causal"),
        "tokens_per_s": float(np.median(sc.loc[sc["name"] == "tokens_per_s", "value"])),
        "peak_mem_mb": float(sc.loc[sc["name"] == "peak_mem_mb", "value"].max()),
    }
    last_val_step = sc.loc[sc["name"] == "val_loss", "step"].max()
    ppl = sc[(sc["name"] == "val_ppl") & (sc["step"] == last_val_step)]
    exp["val_ppl"] = float(ppl["value"].iloc[-1]) if len(ppl) else math.exp(exp["val_loss"])
    for w in WINDOWS:
        exp[f"window_frac_{w}"] = float(last.loc[last["window"] == w, "fraction"].sum()) / n_layers
    return exp


# ------------------------------------------------------------------ training


def test_training_per_run_matches_parquet(runs_root, runs):
    table = build_table("training", runs)
    assert len(table.df) == len(runs)
    assert "FLOPs ratio" in table.caption and "analytic estimate" in table.caption
    for _, row in table.df.iterrows():
        exp = _expected_training(runs_root / row["run"])
        for col, value in exp.items():
            if col.startswith("window_frac_") and row["regime"] == "full_attention":
                assert math.isnan(row[col])  # the baseline has no window buckets
                continue
            assert row[col] == pytest.approx(value, rel=1e-12, abs=1e-12), (row["run"], col)
    # paper order: baseline first, then grouping off, full adaptive, shallow freeze, deep reuse
    assert list(dict.fromkeys(table.df["regime"])) == [
        "full_attention",
        "full_adaptive",
        "shallow_freeze",
        "deep_practical_reuse",
    ]


def test_training_by_regime_mean_std_n_and_interval(runs_root, runs, by_regime):
    table = by_regime
    by = table.df.set_index("regime")
    for regime, seeds in SEEDS.items():
        vals = [_expected_training(runs_root / f"{regime}-s{s}")["val_loss"] for s in seeds]
        assert by.loc[regime, "n"] == len(seeds)
        assert by.loc[regime, "val_loss"] == pytest.approx(np.mean(vals), rel=1e-12)
        unc = table.uncertainty.set_index(table.df["regime"])
        lo = table.ci_low.set_index(table.df["regime"])
        hi = table.ci_high.set_index(table.df["regime"])
        if len(seeds) > 1:
            assert unc.loc[regime, "val_loss"] == pytest.approx(np.std(vals, ddof=1), rel=1e-9)
            assert lo.loc[regime, "val_loss"] <= np.mean(vals) <= hi.loc[regime, "val_loss"]
        else:
            assert math.isnan(unc.loc[regime, "val_loss"]) and math.isnan(lo.loc[regime, "val_loss"])
    # deterministic: the same call gives the same intervals
    again = build_table("training", runs, by="regime")
    pd.testing.assert_frame_equal(again.ci_low, table.ci_low)
    md = render(table, "md")
    # a single seed: a dagger on its n, one note (the n column holds numbers only, one format a column)
    head = next(l for l in md.splitlines() if l.startswith("| "))
    at = [c.strip() for c in head.strip("|").split("|")].index("n")
    ns = [
        [c.strip() for c in l.strip("|").split("|")][at]
        for l in md.splitlines()[md.splitlines().index(head) + 2 :]
        if l.startswith("| ")
    ]
    want = {r: ("1†" if n < 2 else str(n)) for r, n in zip(table.df["regime"], table.df["n"])}
    assert ns == [want[r] for r in table.df["regime"]] and "1†" in ns
    assert "- † one seed: no spread, never tested for significance." in md.splitlines()
    assert "n = 1, no variance estimate" not in md
    # best (lowest) validation loss is bold, on the shallow-freeze row
    line = next(l for l in md.splitlines() if l.startswith("| shallow_freeze"))
    assert "**2.4" in line
    assert "±" in line


def test_rows_by_regime_never_average_other_settings_or_training_lengths(tmp_path, capsys):
    """Seeds of one setup are averaged; a run of the regime with another setting, and runs trained for
    another length, are rows of their own, named by what differs (as Compare's setups), on the CLI too."""
    kw = dict(n_layer=1, n_head=4, windows=WINDOWS, seq_len=64, warmup=2)
    dirs = {
        "short": [make_synthetic_run(tmp_path / f"short{s}", steps=12, seed=s, **kw) for s in (0, 1)],
        "long": [make_synthetic_run(tmp_path / f"long{s}", steps=24, seed=s, **kw) for s in (0, 1)],
        "sinks": [make_synthetic_run(tmp_path / "sinks", steps=12, seed=2, **kw)],
    }
    manifest = dirs["sinks"][0] / "manifest.json"
    written = json.loads(manifest.read_text())
    written["config"]["sink_tokens"] = 4  # another setting of the same regime
    manifest.write_text(json.dumps(written))
    every = [d for group in dirs.values() for d in group]
    table = build_table("training", collect_runs(every), by="regime")
    rows = table.df.set_index("regime")
    assert len(rows) == 3 and all(r.startswith("full_adaptive") for r in rows.index), list(rows.index)
    said = {"short": ("12 steps", "sink"), "long": ("24 steps", "sink"), "sinks": ("sink_tokens=4", "24 steps")}
    for group, members in dirs.items():
        (name,) = [r for r in rows.index if said[group][0] in r and said[group][1] not in r]
        mean = np.mean([_expected_training(d)["val_loss"] for d in members])
        assert rows.loc[name, "n"] == len(members)
        assert rows.loc[name, "val_loss"] == pytest.approx(mean, rel=1e-12)
    assert sum("sink_tokens" in r for r in rows.index) == 1  # the setting that tells runs apart, on its row only
    # the regime_summary figure: a mean per setup, never across them
    from aah_viz.figures import FIGURE_KINDS

    fig = FIGURE_KINDS["regime_summary"](collect_runs(every), metrics="final_loss")
    means = dict(zip(fig.data[0].x, fig.data[0].y))
    assert len(means) == 3 and set(means) == set(rows.index)
    for group, members in dirs.items():
        (name,) = [r for r in means if said[group][0] in r and said[group][1] not in r]
        assert means[name] == pytest.approx(np.mean([_last(_scalars(d), "loss") for d in members]), rel=1e-9)
    # the CLI: the same rows per setup, each with its own n
    out = tmp_path / "out"
    assert main(["export", *map(str, every), "--table", "training", "--by", "regime", "--format", "md",
                 "--out", str(out)]) == 0  # fmt: skip
    md = (out / "training.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| full_adaptive")]
    assert len(lines) == 3, md
    cells = sorted(line.split("|")[2].strip() for line in lines)  # n; a single run's says it has no spread
    assert cells == ["1†", "2", "2"] and "† one seed: no spread" in md


def test_csv_round_trips_full_precision(by_regime):
    table = by_regime
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert len(rows) == len(table.df)
    for row, (_, ref) in zip(rows, table.df.iterrows()):
        assert float(row["val_loss"]) == ref["val_loss"]  # repr round trip: bit-exact
        if int(row["n"]) > 1:
            assert float(row["val_loss_std"]) == table.uncertainty.loc[_, "val_loss"]
            assert row["n_note"] == ""
        else:
            assert row["val_loss_std"] == "" and row["n_note"] == "n = 1, no variance estimate"


def test_rounding_follows_uncertainty_and_is_one_format_a_column(by_regime):
    """Two significant digits of the column's smallest spread (at most its own decimals), every row alike."""
    table = by_regime
    md = render(table, "md")
    spreads = table.uncertainty["val_loss"].dropna()
    d = min(4, max(1 - int(math.floor(math.log10(u))) for u in spreads if u > 0))
    i = int(np.flatnonzero(table.df["regime"] == "full_adaptive")[0])
    u = table.uncertainty.loc[i, "val_loss"]  # 0.01 (seeds 0, 1, 2 add 0.01 each)
    assert f"{table.df.loc[i, 'val_loss']:.{d}f} ± {u:.{d}f}" in md
    header = next(line for line in md.splitlines() if line.startswith("| regime"))
    # the LaTeX table's headers in plain words, never a raw column name; each short one spelled out in a note
    assert "_" not in header and "val. loss: final validation loss (nats)" in md, header
    col = [c.strip() for c in header.split("|")].index("val. loss")
    cells = [line.split("|")[col].strip() for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    numbers = [c.split(" ± ")[0].strip("*") for c in cells[1:]]
    assert {len(n.split(".")[1]) for n in numbers} == {d}, numbers  # the one-seed row too


# ------------------------------------------------------------------ inference, windows, stability


def test_inference_table_reads_the_inference_record(runs_root, runs):
    table = build_table("inference", runs)
    for _, row in table.df.iterrows():
        ev = pd.read_parquet(runs_root / row["run"] / "events")
        detail = json.loads(ev[ev["kind"] == "inference"]["detail"].iloc[-1])
        assert row["val_loss"] == detail["val_loss"]
        assert row["acr"] == detail["acr"]
        assert row["tokens_per_s"] == detail["tokens_per_s"]
        assert row["window_frac_16"] == detail["window_frac"]["16"]


def test_windows_table_per_layer(runs_root, runs):
    table = build_table("windows", runs)
    for (run_id, layer), part in table.df.groupby(["run", "layer"]):
        branch = pd.read_parquet(runs_root / run_id / "branch")
        last = branch[branch["step"] == branch["step"].max()]
        if layer == "all":
            want = {w: last.loc[last["window"] == w, "fraction"].sum() / last["layer"].nunique() for w in WINDOWS}
        else:
            rows = last[last["layer"] == int(layer)]
            want = {w: rows.loc[rows["window"] == w, "fraction"].sum() for w in WINDOWS}
        for w in WINDOWS:
            assert part[f"window_frac_{w}"].iloc[0] == pytest.approx(float(want[w]), abs=1e-7)


def _partition_changes(a: np.ndarray, b: np.ndarray) -> float:
    same_a = a[:, None] == a[None, :]
    same_b = b[:, None] == b[None, :]
    return float(np.mean(np.any(same_a != same_b, axis=1)))


def test_stability_table_against_sklearn(runs_root, runs):
    table = build_table("stability", runs)
    for _, row in table.df.iterrows():
        run_dir = runs_root / row["run"]
        ev = pd.read_parquet(run_dir / "events")
        ups = ev[ev["kind"] == "routing_update"][["layer", "step"]].drop_duplicates()
        assert row["routing_updates"] == len(ups)
        heads = pd.read_parquet(run_dir / "heads", columns=["step", "layer", "head", "window_idx", "group_l0"])
        aris, wsw, gsw = [], [], []
        for layer, lu in ups.groupby("layer"):
            steps = sorted(lu["step"])
            h = heads[heads["layer"] == layer]
            mats = [h[h["step"] == s].sort_values("head") for s in steps]
            for prev, cur in zip(mats, mats[1:]):
                aris.append(adjusted_rand_score(prev["group_l0"], cur["group_l0"]))
                wsw.append(np.mean(prev["window_idx"].to_numpy() != cur["window_idx"].to_numpy()))
                gsw.append(_partition_changes(prev["group_l0"].to_numpy(), cur["group_l0"].to_numpy()))
        if not aris:  # a run without routing updates has no agreement to report
            assert math.isnan(row["partition_agreement_ari"]) and math.isnan(row["window_switch_rate"])
            continue
        assert row["partition_agreement_ari"] == pytest.approx(np.mean(aris), abs=1e-12)
        assert row["window_switch_rate"] == pytest.approx(np.mean(wsw), abs=1e-12)
        assert row["group_switch_rate"] == pytest.approx(np.mean(gsw), abs=1e-12)
        sc = _scalars(run_dir)
        grad = sc.loc[sc["name"] == "controller_grad_norm", "value"]
        assert row["controller_grad_norm_mean"] == pytest.approx(grad.mean(), rel=1e-12)


# ------------------------------------------------------------------ probes


def _probed_run(path: Path, **run) -> tuple[Path, RunWriter]:
    """A small finished synthetic run, resumed for probe rows to be added."""
    run_dir = make_synthetic_run(path, n_layer=2, n_head=6, steps=20, windows=WINDOWS, seq_len=64, warmup=5, **run)
    return run_dir, RunWriter.resume(run_dir)


def test_probes_empty_with_message(runs):
    table = build_table("probes", runs)
    assert table.is_empty
    assert "no run here has a comparisons table" in render(table, "md")
    assert "no run here has a comparisons table" in render(table, "csv")
    assert "\\emph{no run here" in render(table, "latex")


def test_probe_comparisons_with_chance_levels(tmp_path):
    run_dir, w = _probed_run(tmp_path / "probed")
    w.append(
        "comparisons",
        {
            "step": [19, 19],
            "level": [0, 0],
            "layer": [0, None],
            "target": ["kmeans:profile", "kmeans:profile"],
            "ari": [0.31, 0.25],
            "null_mean": [0.002, -0.01],
            "null_p95": [0.2, 0.15],
            "p_value": [0.004, 0.01],
            "nmi": [0.4, 0.35],
            "v_measure": [0.4, 0.35],
            "n_groups": [2, 2],
            "n_probe_clusters": [2, 2],
            "degenerate": [False, False],
            "reason": ["", ""],
            "partition_verdict": ["real", "undefined"],
        },
    )
    w.append(
        "window_association",
        {"step": [19], "layer": [None], "target": ["spearman:syntax"], "rho": [-0.12], "p_value": [0.41]},
    )
    w.close("finished")
    runs = collect_runs([run_dir])
    table = build_table("probes", runs)
    ref = pd.read_parquet(run_dir / "comparisons")
    assert list(table.df["target"]) == list(ref["target"])
    assert list(table.df["ari"]) == list(ref["ari"])
    assert list(table.df["null_mean"]) == list(ref["null_mean"])
    assert list(table.df["partition_verdict"]) == ["real", "undefined"]
    assert list(table.df["layer"]) == ["0", ""]  # the pooled row has no layer
    assert "null\\_\\\\mean" in render(table, "latex")  # a long header breaks after its underscore
    assoc = build_table("probes", runs, part="association")
    assert list(assoc.df["rho"]) == [-0.12] and list(assoc.df["p_value"]) == [0.41]


def _coref_rows(correct: int) -> dict:
    """probe_coref rows at step 19: a head right on ``correct`` of 50 antecedents, the nearest mention on 21."""
    return {
        "step": [19, 19],
        "layer": [1, None],
        "head": [2, None],
        "method": ["head", "nearest"],
        "bucket": ["all", "all"],
        "bucket_lo": [1, 1],
        "bucket_hi": [64, 64],
        "correct": [correct, 21],
        "count": [50, 50],
        "accuracy": [correct / 50, 0.42],
        "window": [32, None],
    }


def test_probe_relations_and_coref_parts(tmp_path):
    run_dir, w = _probed_run(tmp_path / "probed")
    w.append(
        "probe_relations",
        {
            "step": [10, 19, 19],
            "relation": ["nsubj", "nsubj", "amod"],
            "count": [40, 50, 30],
            "best_layer": [0, 1, 0],
            "best_head": [2, 3, 5],
            "direction": ["dep->head"] * 3,
            "best_acc": [0.5, 0.62, 0.71],
            "baseline_offset": [-1, -1, 1],
            "baseline_acc": [0.3, 0.31, 0.44],
        },
    )
    w.append("probe_coref", _coref_rows(correct=30))
    w.close("finished")
    runs = collect_runs([run_dir])
    rel = build_table("probes", runs, part="relations").df
    ref = pd.read_parquet(run_dir / "probe_relations")
    ref = ref[ref["step"] == ref["step"].max()]
    assert list(rel["relation"]) == list(ref["relation"]) and list(rel["best_acc"]) == list(ref["best_acc"])
    assert list(rel["baseline_acc"]) == list(ref["baseline_acc"])
    coref = build_table("probes", runs, part="coref")
    assert list(coref.df["accuracy"]) == [0.6, 0.42] and list(coref.df["method"]) == ["head", "nearest"]
    assert list(coref.df["layer"]) == ["1", ""]  # baselines have no layer
    # one run: nothing to test a difference with, so nothing is bold
    assert coref.best["accuracy"].tolist() == [False, False]


def _probed_seed(path: Path, seed: int) -> Path:
    """A finished full_adaptive run with one step of every probe table (coref rows have their own ``method``)."""
    run_dir, w = _probed_run(path, regime="full_adaptive", seed=seed)
    w.append("probe_coref", _coref_rows(correct=30 + seed))
    w.append(
        "probe_relations",
        {
            "step": [19],
            "relation": ["nsubj"],
            "count": [50],
            "best_layer": [1],
            "best_head": [3],
            "direction": ["dep->head"],
            "best_acc": [0.6 + 0.1 * seed],
            "baseline_offset": [-1],
            "baseline_acc": [0.3],
        },
    )
    w.close("finished")
    return run_dir


def test_probe_tables_by_regime_over_two_seeds(tmp_path, capsys):
    runs = [_probed_seed(tmp_path / f"fa{seed}", seed) for seed in (0, 1)]
    coref = build_table("probes", collect_runs(runs), part="coref", by="regime").df
    by_method = coref.set_index("method")
    assert by_method.loc["head", "accuracy"] == pytest.approx((30 / 50 + 31 / 50) / 2)
    assert by_method.loc["nearest", "accuracy"] == pytest.approx(0.42)
    assert list(coref["n"]) == [2, 2]
    for table in ("probes", "all"):
        out = tmp_path / f"out-{table}"
        args = ["export", *map(str, runs), "--table", table, "--by", "regime", "--format", "md", "--out", str(out)]
        assert main(args) == 0, capsys.readouterr().err
        assert "| full_adaptive | head | 1 | 2 | all | 2 |" in (out / "probes_coref.md").read_text()
        assert (out / "probes_relations.md").is_file()


def test_a_refused_export_writes_nothing(tmp_path, capsys):
    a = make_synthetic_run(tmp_path / "a", n_layer=1, n_head=4, steps=12, windows=(8, 16, 32, 64), seq_len=64, warmup=2)
    b = make_synthetic_run(tmp_path / "b", n_layer=1, n_head=4, steps=12, windows=(4, 8, 16, 32), seq_len=64, warmup=2)
    out = tmp_path / "never"
    assert main(["export", str(a), str(b), "--table", "all", "--by", "regime", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-mixed" in err[0]
    assert not out.exists()


# ------------------------------------------------------------------ mixed configurations


def test_mixed_windows_and_seq_len_are_refused(tmp_path):
    a = make_synthetic_run(tmp_path / "a", n_layer=1, n_head=4, steps=12, windows=(8, 16, 32, 64), seq_len=64, warmup=2)
    b = make_synthetic_run(tmp_path / "b", n_layer=1, n_head=4, steps=12, windows=(4, 8, 16, 32), seq_len=64, warmup=2)
    c = make_synthetic_run(
        tmp_path / "c", n_layer=1, n_head=4, steps=12, windows=(8, 16, 32, 64), seq_len=128, warmup=2
    )
    runs = collect_runs([a, b, c])
    with pytest.raises(MixedConfigError) as err:
        build_table("training", runs)
    text = str(err.value)
    assert "windows 8/16/32/64: a" in text and "windows 4/8/16/32: b" in text and "seq_len 128" in text
    assert "--allow-mixed" in text
    split = build_tables("training", runs, allow_mixed=True)
    assert sorted(len(t.df) for t in split) == [1, 1, 1]
    assert len({t.label for t in split}) == 3
    # the CLI says the same on one line and exits 2
    out = tmp_path / "out"
    assert main(["export", str(a), str(b), "--table", "training", "--out", str(out)]) == 2
    assert main(["export", str(a), str(b), "--table", "training", "--out", str(out), "--allow-mixed"]) == 0
    assert len(list(out.glob("training_T64_*.csv"))) == 2


# ------------------------------------------------------------------ comparisons, factorial, CLI


def test_comparison_and_factorial_tables(runs_root, runs):
    from scipy import stats as sps

    cmp = comparison_table(runs, "full_attention").df.set_index("regime")
    base = [FINAL["full_attention"] + 0.01 * s for s in SEEDS["full_attention"]]
    new = [FINAL["shallow_freeze"] + 0.01 * s for s in SEEDS["shallow_freeze"]]
    assert cmp.loc["shallow_freeze", "diff"] == pytest.approx(np.mean(new) - np.mean(base))
    assert cmp.loc["shallow_freeze", "welch_p"] == pytest.approx(
        sps.ttest_ind(new, base, equal_var=False).pvalue, rel=1e-9
    )
    assert cmp.loc["deep_practical_reuse", "note"] == "n = 1, no variance estimate"
    fac = factorial_table(runs).df.set_index("factor")
    assert fac.loc["freeze", "effect"] == pytest.approx(
        FINAL["deep_practical_reuse"] - np.mean([FINAL["full_adaptive"] + 0.01 * s for s in (0, 1, 2)])
    )
    assert fac.loc["hierarchy_refresh", "covered"] and not fac.loc["joint_scoring", "covered"]


def test_cli_export_writes_every_table(runs_root, tmp_path, capsys):
    out = tmp_path / "tables"
    rc = main(
        [
            "export",
            str(runs_root),
            "--table",
            "all",
            "--format",
            "md",
            "--out",
            str(out),
            "--by",
            "regime",
            "--baseline",
            "full_attention",
            "--factorial",
        ]
    )
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    for name in (
        "training.md",
        "inference.md",
        "windows.md",
        "stability.md",
        "probes_comparisons.md",
        "comparison.md",
        "factorial.md",
        "differences.md",
    ):
        assert name in names
    assert not any(n.startswith("difference_") for n in names)  # one file for every regime's curve
    diff = (out / "differences.md").read_text()
    for regime in ("shallow_freeze", "full_adaptive", "deep_practical_reuse"):
        assert f"| {regime} | {STEPS} |" in diff  # the paired step of the final evaluation
    assert "Welch t" in (out / "training.md").read_text()
    assert main(["export", str(runs_root), "--table", "training", "--out", str(out), "--baseline", "nope"]) == 2
    assert "--baseline 'nope' matches no run" in capsys.readouterr().err


# ------------------------------------------------------------------ LaTeX


def test_latex_structure(by_regime):
    tex = to_latex(by_regime)  # the long form (--form long); the summary form is tested below
    parts = tex.count("\\toprule")
    assert parts == tex.count("\\midrule") == tex.count("\\bottomrule") >= 1
    assert tex.count("\\caption{") == 1 and "\\caption{Training:" in tex and "\\label{tab:aah-training}" in tex
    assert "\\textbf{" in tex and "$\\pm$" in tex
    headers = [chunk.splitlines()[0] for chunk in tex.split("\\toprule\n")[1:]]
    # every part names its rows by regime; together the parts hold every other column once
    assert all(h.startswith("regime & ") for h in headers)
    assert sum(h.count("&") for h in headers) == len(by_regime.df.columns) - 1
    header = " ".join(headers)
    assert "val. loss" in header and "val\\_loss" not in header  # short headers ...
    assert "val. loss: final validation loss (nats)" in tex  # ... with a legend
    # the one-seed regime: a dagger instead of a long text cell, and a note
    row = next(line for line in tex.splitlines() if line.startswith("deep\\_practical\\_reuse"))
    assert "1$^\\dagger$" in row and "\\textbf" not in row
    assert "one seed: no spread, never tested for significance" in tex


def test_bold_only_where_the_difference_is_significant(runs):
    from aah_viz.stats.significance import welch_t_test

    table = build_table("training", runs, by="regime")
    finals = {}
    for r in runs:
        finals.setdefault(r.regime, []).append(FINAL[r.regime] + 0.01 * r.seed)
    bold = table.best.set_index(table.df["regime"])["val_loss"]
    # shallow_freeze (2.40-2.42) vs the next best full_adaptive (2.45-2.47), three seeds each: significant
    assert welch_t_test(finals["shallow_freeze"], finals["full_adaptive"]).p_value < 0.05
    assert bold.to_dict() == {r: r == "shallow_freeze" for r in bold.index}
    # without shallow_freeze the best is full_adaptive, its runner-up deep_practical_reuse has one seed: no bold
    rest = [r for r in runs if r.regime != "shallow_freeze"]
    again = build_table("training", rest, by="regime")
    assert not again.best["val_loss"].any()
    # one row per run: no test, no bold
    assert not build_table("training", runs, by="run").best.to_numpy().any()


def test_every_table_has_its_own_label(runs):
    regimes = sorted({r.regime for r in runs} - {"full_attention"})
    tables = [comparison_table(runs, "full_attention"), factorial_table(runs)]
    tables += [difference_curve_table(runs, r, "full_attention") for r in regimes]
    tables += [build_table(n, runs, by="regime") for n in ("training", "inference", "windows", "stability")]
    labels = [t.label for t in tables]
    assert len(labels) == len(set(labels)), labels


def _tex_engine() -> str:
    engine = shutil.which("pdflatex")
    if engine is None:
        pytest.skip("no TeX engine found (apt-get install texlive-latex-base texlive-latex-recommended)")
    return engine


def _compile(engine: str, tex: Path, what: str) -> str:
    """``tex`` compiled in its folder (it must compile); the log."""
    proc = waiting.run(
        [engine, "-interaction=nonstopmode", "-halt-on-error", tex.name],
        what,
        cwd=tex.parent,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    return tex.with_suffix(".log").read_text(errors="replace")


def test_latex_compiles_and_fits_a_one_column_article(runs, by_regime, tmp_path):
    engine = _tex_engine()
    tables = [by_regime, build_table("training", runs, by="run")]
    tables += [build_table(n, runs, by="regime") for n in ("inference", "windows", "stability", "probes")]
    tables.append(factorial_table(runs))
    tables.append(comparison_table(runs, "full_attention"))
    tables += [difference_curve_table(runs, r, "full_attention") for r in ("full_adaptive", "shallow_freeze")]
    tables.append(difference_curves_table(runs, "full_attention"))  # the file the CLI writes: every regime
    (tmp_path / "doc.tex").write_text(latex_document(tables), encoding="utf-8")
    assert "landscape" not in (tmp_path / "doc.tex").read_text()  # the default one-column article
    log = _compile(engine, tmp_path / "doc.tex", "pdflatex to compile the tables")
    assert (tmp_path / "doc.pdf").read_bytes()[:4] == b"%PDF"
    assert "Overfull \\hbox" not in log, [line for line in log.splitlines() if "Overfull" in line][:5]
    assert "multiply defined" not in log


SAMPLE_LOGS = Path(__file__).resolve().parents[1] / "sample_logs"
READABLE_PT = 8.5  # \\small is 9 pt: a table may be scaled by at most a few percent


def test_latex_tables_keep_their_text_size_at_the_column_width(tmp_path):
    """The widest tables of the bundled runs (probe comparisons with a hundred rows, relations with long
    run names) compile at the article's column width with their text at \\small, not scaled to 3 pt."""
    engine = _tex_engine()
    names = ("fixed_random_grouping_seed0", "full_adaptive_seed0", "full_adaptive_seed1", "deep_practical_reuse_seed0")
    runs = collect_runs([SAMPLE_LOGS / n for n in names])
    tables = [build_table(n, runs) for n in ("training", "inference", "stability")]
    tables += [build_table("probes", runs, part=p) for p in ("comparisons", "association", "relations")]
    tables.append(build_table("probes", runs, part="relations", by="regime", n_boot=200))
    for i, table in enumerate(tables):
        table.label = f"{table.label}-{i}"
    tex = latex_document(tables)
    assert tex.count("\\toprule") > len(tables)  # some were split into parts
    # each part's box width against \\linewidth, as the document sees them
    probe = "\\typeout{AAHBOX \\the\\wd\\aahtablebox\\space\\the\\linewidth}\\ifdim\\wd\\aahtablebox>\\linewidth"
    (tmp_path / "doc.tex").write_text(tex.replace("\\ifdim\\wd\\aahtablebox>\\linewidth", probe), encoding="utf-8")
    log = _compile(engine, tmp_path / "doc.tex", "pdflatex to compile the split tables")
    boxes = [(float(w), float(lw)) for w, lw in re.findall(r"AAHBOX ([\d.]+)pt ([\d.]+)pt", log)]
    assert len(boxes) == tex.count("\\toprule")
    sizes = [9.0 * min(1.0, lw / w) for w, lw in boxes]
    assert min(sizes) >= READABLE_PT, sorted(sizes)[:5]
    assert "Float too large" not in log and "Overfull \\hbox" not in log


def test_windows_from_inference_records(runs_root, runs):
    table = build_table("windows", runs, source="inference")
    assert set(table.df["layer"]) == {"all"} and len(table.df) == len(runs)
    for _, row in table.df.iterrows():
        ev = pd.read_parquet(runs_root / row["run"] / "events")
        fr = json.loads(ev.loc[ev["kind"] == "inference", "detail"].iloc[-1])["window_frac"]
        assert [row[f"window_frac_{w}"] for w in WINDOWS] == [fr[str(w)] for w in WINDOWS]


def test_flops_ratio_estimate_from_the_model_shape(tmp_path):
    """Without a logged flops_ratio_est the table applies method 11.1 to the final ACR and says so."""
    from aah_viz.runlog import make_manifest

    cfg = {"n_embd": 96, "n_ff": 384, "n_layer": 1, "n_head": 4}
    m = make_manifest(
        run_id="shape",
        regime="full_adaptive",
        seed=0,
        config=cfg,
        windows=[8, 16, 32, 64],
        seq_len=64,
        n_layer=1,
        n_head=4,
        max_depth=0,
    )
    w = RunWriter.create(tmp_path / "shape", m)
    w.append(
        "heads",
        {
            "step": [0] * 4,
            "layer": [0] * 4,
            "head": [0, 1, 2, 3],
            "window_idx": [0, 1, 2, 3],
            "window": [8, 16, 32, 64],
        },
    )
    w.append("scalars", {"step": [0, 0], "layer": [None, None], "name": ["acr", "val_loss"], "value": [0.46875, 3.0]})
    w.close("finished")
    table = build_table("training", collect_runs([tmp_path / "shape"]))
    r = 64 / (2 * 96 + 384)  # attention share of the analytic budget per unit ACR
    assert table.df["flops_ratio_est"].iloc[0] == pytest.approx((0.46875 * r + 1) / (r + 1), rel=1e-12)
    assert any("analytic estimate" in n for n in table.notes)


def test_inference_falls_back_to_the_last_eval(tmp_path):
    run_dir = make_synthetic_run(
        tmp_path / "plain", n_layer=2, n_head=6, steps=30, windows=WINDOWS, seq_len=64, warmup=5, eval_interval=10
    )
    table = build_table("inference", collect_runs([run_dir]))
    row = table.df.iloc[0]
    ev = pd.read_parquet(run_dir / "events")
    last_eval = int(ev.loc[ev["kind"] == "eval", "step"].max())
    sc = pd.read_parquet(run_dir / "scalars")
    model = sc[sc["layer"].isna()]
    assert row["val_loss"] == float(
        model.loc[(model["name"] == "val_loss") & (model["step"] == last_eval), "value"].iloc[0]
    )
    acr = model[(model["name"] == "acr") & (model["step"] <= last_eval)].sort_values("step")
    assert row["acr"] == float(acr["value"].iloc[-1])
    branch = pd.read_parquet(run_dir / "branch")
    at = branch[branch["step"] == branch.loc[branch["step"] <= last_eval, "step"].max()]
    assert row["window_frac_8"] == pytest.approx(at.loc[at["window"] == 8, "fraction"].sum() / 2, abs=1e-7)
    assert any("last training-time evaluation" in n for n in table.notes)


def test_number_formatting_rules():
    from aah_viz.export.formats import format_number

    assert format_number(6.55734, 4, 0.01234) == "6.557 ± 0.012"
    assert format_number(31490.2, 1, 3461.0) == "31500 ± 3500"
    assert format_number(3.55e20, 2, 4.3e19) == "3.55e+20 ± 0.43e+20"  # untrained perplexities stay readable
    assert format_number(0.5, 4, 0.0) == "0.5000"  # no spread: the column's decimals
    # equal values averaged in floating point leave a spread of 1e-18: no spread, not 19 decimals
    assert format_number(0.0017728531855955589, 4, 2.0e-18) == "0.0018"
    assert format_number(float("nan"), 4) == "–"
    assert format_number(12, 0) == "12"


def test_a_table_with_unfinished_runs_says_so_under_it(tmp_path):
    from aah_viz.runlog import RunWriter, read_manifest

    kw = dict(n_layer=2, n_head=4, steps=20, windows=(8, 16, 32, 64), seq_len=64)
    make_synthetic_run(tmp_path / "done", seed=0, **kw)
    make_synthetic_run(tmp_path / "killed", seed=1, status="running", **kw)  # no writer holds it
    live = make_synthetic_run(tmp_path / "live", seed=2, status="running", **kw)
    writer = RunWriter.resume(live)  # a live writer holds this one
    try:
        out = tmp_path / "out"
        assert main(["export", str(tmp_path / "done"), str(tmp_path / "killed"), str(live), "--table", "training",
                     "--format", "md", "--out", str(out)]) == 0  # fmt: skip
        text = (out / "training.md").read_text()
        last = read_manifest(tmp_path / "killed")["last_step"]
        assert f"killed (interrupted at step {last} of 20)" in text
        assert "live (still training" in text and "done (" not in text
        assert main(["export", str(tmp_path / "done"), "--table", "training", "--format", "md", "--out",
                     str(tmp_path / "out2")]) == 0  # fmt: skip
        assert "Not finished" not in (tmp_path / "out2" / "training.md").read_text()
    finally:
        writer.close("finished")


# ------------------------------------------------------------------ the registry of table kinds


def test_a_new_table_kind_is_one_entry_of_the_registry(runs_root, runs, monkeypatch):
    from aah_viz.export import kinds

    def final_steps(runs, windows, **_):
        recs = [{**kinds.records.identity(r), "last_step": float(r.manifest["last_step"])} for r in runs]
        return kinds.Rows(recs, ["last_step"], "The last recorded step of each run.")

    monkeypatch.setitem(kinds.TABLE_KINDS, "last_steps", kinds.TableKind(final_steps))
    per_run = build_table("last_steps", runs)
    expected = {p.name: json.loads((p / "manifest.json").read_text())["last_step"] for p in runs_root.iterdir()}
    assert dict(zip(per_run.df["run"], per_run.df["last_step"])) == expected
    per_regime = build_table("last_steps", runs, by="regime")
    assert list(per_regime.df["regime"]) == list(SEEDS)  # the paper's order
    assert list(per_regime.df["n"]) == [len(s) for s in SEEDS.values()]
    assert per_regime.label == "tab:aah-last_steps" and "| last step |" in render(per_regime, "md")


def test_the_cli_offers_every_table_kind():
    from aah_viz.cli.export import TABLE_CHOICES
    from aah_viz.export.kinds import TABLE_NAMES

    assert TABLE_CHOICES == (*TABLE_NAMES, "all")


def test_latex_notes_read_as_written_in_a_plain_article_and_sit_flush_left(by_regime, tmp_path):
    """Compiled in LaTeX's default font encoding (a user's own article, no T1), the text pdflatex puts in
    the PDF says "p < 0.05", not "p ¡ 0.05"; the notes start at the text's left edge, not centred."""
    engine = _tex_engine()
    pypdf = pytest.importorskip("pypdf")
    assert any("p < 0.05" in n for n in by_regime.notes)
    doc = "\\documentclass{article}\n\\usepackage{booktabs,graphicx,array}\n\\begin{document}\n"
    doc += to_latex(by_regime) + "\\end{document}\n"
    (tmp_path / "plain.tex").write_text(doc, encoding="utf-8")
    _compile(engine, tmp_path / "plain.tex", "pdflatex to compile a table in a plain article")
    page = pypdf.PdfReader(tmp_path / "plain.pdf").pages[0]
    starts: dict[str, float] = {}

    def seen(text, cm, tm, font, size):
        x = tm[4] * cm[0] + cm[4]
        if text.strip():
            starts.setdefault(text.strip(), x)

    text = page.extract_text(visitor_text=seen)
    flat = " ".join(text.split())
    assert "¡" not in flat and "¿" not in flat
    assert "(p < 0.05)" in flat, flat[-600:]
    # a note's short last line starts at the left edge, where the caption does (centred, it would not)
    edge = next(x for t, x in starts.items() if t.startswith("Table 1:"))
    last = next(x for t, x in starts.items() if t.startswith("budget), not a measured FLOP count"))
    assert last == pytest.approx(edge, abs=0.5), (last, edge)


def test_comparison_headers_are_words_in_the_text_pdflatex_extracts(runs, tmp_path):
    """comparison.tex: each statistic's header is a short symbol or word with its meaning in the notes,
    not a column name broken at its underscores ("welch" / "p")."""
    engine = _tex_engine()
    pypdf = pytest.importorskip("pypdf")
    table = comparison_table(runs, "full_attention")
    (tmp_path / "cmp.tex").write_text(latex_document([table]), encoding="utf-8")
    _compile(engine, tmp_path / "cmp.tex", "pdflatex to compile a comparison table")
    text = " ".join(" ".join(page.extract_text() for page in pypdf.PdfReader(tmp_path / "cmp.pdf").pages).split())
    for raw in ("welch", "perm_", "paired_", "mean_", "n_baseline"):
        assert raw not in text, (raw, text[:800])
    for meaning in ("Welch's t-test p-value", "permutation test p-value", "seed-matched pairs"):
        assert meaning in text.replace("’", "'"), (meaning, text[-1200:])
    assert "Final validation loss (nats) of each regime against full_attention" in text, text[:400]  # not val_loss


def test_difference_and_stability_headers_are_words_in_the_text_pdflatex_extracts(runs, tmp_path):
    """The per-step difference and stability tables: no header is a column name broken at its
    underscores ("ci" over "low", "forced" over "share"); each short header is in the notes' legend."""
    engine = _tex_engine()
    pypdf = pytest.importorskip("pypdf")
    tables = [
        difference_curve_table(runs, "full_adaptive", "full_attention"),
        build_table("stability", runs, by="regime"),
    ]
    raw = [c for t in tables for c in t.df.columns if "_" in c]
    assert {"mean_diff", "ci_low", "forced_share", "group_switch_rate"} <= set(raw)  # what the headers could be
    (tmp_path / "t.tex").write_text(latex_document(tables), encoding="utf-8")
    _compile(engine, tmp_path / "t.tex", "pdflatex to compile the difference and stability tables")
    text = " ".join(" ".join(page.extract_text() for page in pypdf.PdfReader(tmp_path / "t.pdf").pages).split())
    for name in raw:
        assert name not in text, (name, text[:900])
    # a header broken after its underscore reads "ci_ low", "forced_ share" in the extracted text
    assert "_ " not in text, text[text.find("_ ") - 100 :][:300]
    for entry in ("CI low: lower end of the interval", ".: mean over seed pairs", "forced: share of level-0",
                  "group sw.: share of heads changing group", "ARI: mean adjusted Rand index"):  # fmt: skip
        assert entry in text, (entry, text[-1500:])


def _pdf_pages(engine: str, tex: Path, what: str) -> list[str]:
    """``tex`` (one table) compiled in a plain article; the text pdflatex put on each page."""
    pypdf = pytest.importorskip("pypdf")
    doc = tex.with_name(tex.stem + "-doc.tex")
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs,graphicx,array}\n\\begin{document}\n"
        + tex.read_text(encoding="utf-8")
        + "\\end{document}\n",
        encoding="utf-8",
    )
    _compile(engine, doc, what)
    return [" ".join(p.extract_text().split()) for p in pypdf.PdfReader(doc.with_suffix(".pdf")).pages]


def test_training_table_by_regime_fits_one_page_in_its_summary_form(tmp_path, capsys):
    """The README's command on the bundled runs (nine regimes, a baseline): the training table's LaTeX is
    one page, its numbers those of the Parquet files, one number of decimals a column; --form long
    keeps every column with its spread (the form that ran over two pages in four parts)."""
    engine = _tex_engine()
    dirs = sorted(SAMPLE_LOGS.glob("*_seed?"))
    args = ["export", *map(str, dirs), "--table", "training", "--by", "regime", "--format", "latex", "--n-boot", "200"]
    assert main([*args, "--baseline", "full_attention", "--out", str(tmp_path / "summary")]) == 0
    assert main([*args, "--out", str(tmp_path / "long"), "--form", "long"]) == 0
    capsys.readouterr()
    pages = _pdf_pages(engine, tmp_path / "summary" / "training.tex", "pdflatex to compile the summary form")
    assert len(pages) == 1, [p[:200] for p in pages]
    text = pages[0].replace("ﬁ", "fi").replace("ﬀ", "ff").replace("ﬄ", "ffl")
    assert len(_pdf_pages(engine, tmp_path / "long" / "training.tex", "pdflatex to compile the long form")) > 1

    by_regime: dict[str, list[Path]] = {}
    for d in dirs:
        by_regime.setdefault(json.loads((d / "manifest.json").read_text())["regime"], []).append(d)
    assert len(by_regime) == 9
    loss_places = set()
    for regime, members in by_regime.items():
        name = re.escape(regime.replace("_", " "))  # OT1 prints an underscore as a rule, read as a space
        match = re.search(name + r" (\d) ?†? ([\d.]+)(?: ± ([\d.]+))? ([\d.]+) ([\d.]+)", text)
        assert match, (regime, text[:1500])
        loss, ppl = float(match.group(2)), float(match.group(4))
        finals = [_last(_scalars(d), "val_loss") for d in members]
        assert int(match.group(1)) == len(finals)
        places = len(match.group(2).split(".")[1])
        loss_places.add(places)
        assert loss == pytest.approx(np.mean(finals), abs=0.51 * 10**-places)
        if len(finals) > 1:
            assert float(match.group(3)) == pytest.approx(np.std(finals, ddof=1), abs=0.51 * 10**-places)
        assert ppl > 1
        # the window shares of the final branch step, in percent, in the second part's row
        shares = re.search(name + r" [\d.]+ [\d.]+ [\d.]+ ([\d/]+|–)", text.split("w 16/32/64/128")[1])
        assert shares, (regime, text)
        if regime != "full_attention":
            expected = []
            for w in (16, 32, 64, 128):
                per_run = []
                for d in members:
                    branch = pd.read_parquet(d / "branch")
                    last = branch[branch["step"] == branch["step"].max()]
                    per_run.append(last.loc[last["window"] == w, "fraction"].sum() / last["layer"].nunique())
                expected.append(100 * np.mean(per_run))
            printed = [int(x) for x in shares.group(1).split("/")]
            assert printed == pytest.approx(expected, abs=0.51), (regime, printed, expected)
    assert len(loss_places) == 1  # one number of decimals in the column
    assert "Welch’s t-test p" in text.replace("'", "’") and "One seed, not tested against full attention" in text


def test_a_baseline_with_no_other_regime_beside_it_is_one_line(tmp_path, capsys):
    runs = [str(SAMPLE_LOGS / f"full_adaptive_seed{s}") for s in (0, 1)]
    args = ["export", *runs, "--table", "training", "--by", "regime", "--baseline", "full_adaptive"]
    assert main([*args, "--format", "latex", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["aah-viz: error: --baseline full_adaptive: no other regime among these runs to compare with it; "
                   "add runs of another regime, or leave out --baseline"]  # fmt: skip
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_the_frontier_table_in_latex_names_every_row_in_every_part_and_fits_two_pages(tmp_path, capsys):
    """The SmolLM2 sample's two frontier runs (29 configurations): the long form ran over 8 pages in 8 parts
    that repeated run, family and adapt_steps (which name no row), split its adapt_steps header at the
    underscore and ran two caption sentences together. Its LaTeX form: each part repeats the configuration,
    every perplexity of the CSV is printed, the caption's sentences end, on at most 2 pages."""
    engine = _tex_engine()
    frontiers = SAMPLE_LOGS / "smollm2_wikitext"
    if not (frontiers / "frontier" / "manifest.json").exists():
        pytest.skip("no SmolLM2 frontier in sample_logs/")
    for fmt in ("latex", "csv"):
        args = ["export", str(frontiers), "--table", "frontier", "--format", fmt, "--out", str(tmp_path)]
        assert main(args) == 0
    capsys.readouterr()
    tex = (tmp_path / "frontier.tex").read_text(encoding="utf-8")
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert re.search(r"[.?!] Configuration: ", caption), caption
    assert "adapt\\_\\\\" not in tex  # no header broken at an underscore
    rows = pd.read_csv(tmp_path / "frontier.csv")
    runs = list(dict.fromkeys(rows["run"]))
    assert len(runs) > 1
    names = [f"({chr(ord('a') + runs.index(r))}) {c}" for r, c in zip(rows["run"], rows["configuration"])]
    parts = re.findall(r"\\midrule\n(.*?)\\bottomrule", tex, flags=re.S)
    assert len(parts) >= 1
    for part in parts:  # every part names all its rows, the configuration first
        firsts = [line.split(" & ")[0] for line in part.strip().splitlines()]
        assert firsts == [n.replace("_", "\\_") for n in names], firsts[:3]
    for p, lo, hi in zip(rows["ppl"], rows["ppl_lo"], rows["ppl_hi"]):
        assert f"{p:.2f} [{lo:.1f}, {hi:.1f}]" in tex
    marked = [f"{v:.2f}*" for v, lo, hi in zip(rows["speed_vs_unpatched"], rows["speed_lo"], rows["speed_hi"])
              if hi - lo > 0.1]  # fmt: skip
    assert marked  # the sample's 2-pair medians include wide ones (its full-attention patch among them)
    for cell in marked:  # a speed whose interval is wide never stands bare
        assert cell in tex
    pages = _pdf_pages(engine, tmp_path / "frontier.tex", "pdflatex to compile the frontier table")
    assert len(pages) <= 2, [p[:200] for p in pages]


def test_head_similarity_latex_is_its_summary_on_one_page_and_every_layer_on_request(tmp_path, capsys):
    """The per-layer table of one run ran to 6 parts over 2 pages; LaTeX prints the counts over the layers
    (computed here from the CSV's per-layer rows), one page in one part, headers in words; --form long keeps
    every layer."""
    engine = _tex_engine()
    run = SAMPLE_LOGS / "full_adaptive_seed0"
    if not (run / "head_similarity").exists():
        pytest.skip("the bundled sample logs are not in this checkout")
    args = ["export", str(run), "--table", "head_similarity"]
    for fmt, out, extra in (("latex", "summary", []), ("csv", "csv", []), ("latex", "long", ["--form", "long"])):
        assert main([*args, "--format", fmt, "--out", str(tmp_path / out), *extra]) == 0
    capsys.readouterr()
    tex = (tmp_path / "summary" / "head_similarity.tex").read_text(encoding="utf-8")
    assert "\\_" not in tex.split("\\midrule")[0].split("\\toprule")[-1]  # headers: words, no underscores
    pages = _pdf_pages(engine, tmp_path / "summary" / "head_similarity.tex", "pdflatex to compile the summary")
    assert len(pages) == 1 and "in 2 parts" not in pages[0], pages
    rows = pd.read_csv(tmp_path / "csv" / "head_similarity.csv")
    for similarity, part in rows.groupby("similarity"):
        layers, real = part["layer"].nunique(), int((part["verdict"] == "real").sum())
        stable = int((part["stability"] == "stable").sum())
        assert f"{similarity} {layers} {real} {stable} " in pages[0], (similarity, pages[0][:600])
    long_tex = (tmp_path / "long" / "head_similarity.tex").read_text(encoding="utf-8")
    assert "silhouette" in long_tex and "mantel" in long_tex.lower()
