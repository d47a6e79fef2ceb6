"""Comparing runs on the dashboard (issue 28) and pages that show only what they can (issue 29 item 9),
through ``streamlit.testing.v1.AppTest`` on real run directories: the bundled sample logs and
synthetic runs written here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.runlog.paths import is_run

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
SAMPLE_LOGS = REPO / "sample_logs"
PROBE_ONLY = "minilm_pud_gap"  # MiniLM probed at T = 510 beside the trained runs at T = 128

pytestmark = pytest.mark.timeout(TEST_S)


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(PAGE_FILES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def captions(at: AppTest) -> list[str]:
    return [c.value.replace("\\", "") for c in at.caption]


def left_out(at: AppTest) -> list[str]:
    """Each line saying which selected runs a page leaves out, with the names it holds: a caption naming a
    few, or a closed expander whose label says how many (the names inside it)."""
    lines = [c for c in captions(at) if c.startswith("Left out") or "Left out: " in c]
    for e in at.expander:
        if "Left out: " in e.label:
            lines.append(e.label.replace("\\", "") + " :: " + ", ".join(c.value.replace("\\", "") for c in e.caption))
    return lines


@pytest.fixture
def samples(monkeypatch, tmp_path):
    if not is_run(SAMPLE_LOGS / PROBE_ONLY):
        pytest.skip("the bundled sample logs are not in this checkout")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(SAMPLE_LOGS))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception
    return at


def _final_val_loss(run: str) -> float:
    import pandas as pd

    sc = pd.read_parquet(SAMPLE_LOGS / run / "scalars")
    sc = sc[sc["layer"].isna() & (sc["name"] == "val_loss")].dropna(subset=["value"]).sort_values("step")
    return float(sc["value"].iloc[-1])


def _export_rows(at: AppTest):
    """The training table by setup as the page's CSV text prints it."""
    import io

    import pandas as pd

    at.selectbox(key="exp_table").set_value("training")
    at.radio(key="exp_by").set_value("regime")
    at.radio(key="exp_table_fmt").set_value("csv").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    return pd.read_csv(io.StringIO(at.code[0].value)).set_index("regime")


def test_export_keeps_compares_configurations_and_averages_only_seeds_of_one_setup(samples):
    samples.query_params["run"] = "full_adaptive_seed0"
    at = goto(samples, "compare")
    compared = at.selectbox(key="cmp_config")
    compared_options, compared_value = set(compared.options), compared.value
    at = goto(at, "export")
    config = at.selectbox(key="exp_config")
    # Compare's configurations (model, T, windows, training steps), the open run's by default
    # (Export has the probes and evaluations Compare leaves out, in configurations of their own)
    assert compared_options < set(config.options) and config.value == compared_value and "280 steps" in config.value
    (left,) = [line for line in left_out(at) if "another configuration" in line]
    # many runs left out: their count in a closed expander's label, their names (the probe-only run's too) inside
    assert re.search(r"Left out: \d+ runs \(another configuration: pick it above\) :: ", left) and PROBE_ONLY in left
    preview = at.dataframe[0].value
    assert len(preview) and not preview.astype(str).apply(lambda c: c.str.contains(PROBE_ONLY)).any().any()
    rows = _export_rows(at)
    # the two 280-step seeds, and no run of the 2,000-step sweep: their own mean
    assert rows.loc["full_adaptive", "n"] == 2
    seeds = [_final_val_loss(f"full_adaptive_seed{s}") for s in (0, 1)]
    assert rows.loc["full_adaptive", "val_loss"] == pytest.approx(np.mean(seeds), rel=1e-9)
    assert rows.loc["grouping_off", "n"] == 2  # the retired keys one seed records make no setup
    # the 2,000-step configuration: one row per cell of the sweep (its folder names), each of its seeds
    sweep = [p.parent.name for p in (SAMPLE_LOGS / "sweep_ablation_small").glob("*/manifest.json")]
    cells = {name.rsplit("__seed-", 1)[0] for name in sweep}
    long = next(o for o in config.options if "2,000 steps" in o).rsplit(" (", 1)[0]
    at.selectbox(key="exp_config").set_value(long).run()
    rows = _export_rows(at)
    assert len(rows) == len(cells) > 1 and rows["n"].sum() == len(sweep)
    assert set(rows["n"]) == {len(sweep) // len(cells)}


def test_compare_and_windows_leave_the_probe_only_run_out_and_say_so(samples):
    at = goto(samples, "compare")
    setups = at.dataframe[0].value["setup"].tolist()
    assert not any(s.startswith("external") for s in setups) and any(s.startswith("full_adaptive") for s in setups)
    assert any(PROBE_ONLY in line and "not trained here" in line for line in left_out(at))
    # the runs of other configurations: one closed expander with their count, the names inside (issue 42)
    (line,) = [line for line in left_out(at) if "configurations among the selected runs" in line]
    count = int(line.split("Left out: ")[1].split(" runs")[0])
    assert count > 3 and f"Left out: {count} runs (another configuration: pick it above) :: " in line
    assert len(line.split(" :: ")[1].split(", ")) == count
    at = goto(at, "windows")
    picker = at.multiselect(key="win_compare_pick")
    assert picker.options and not any(PROBE_ONLY in o for o in picker.options)
    assert any(PROBE_ONLY in line and "not trained here" in line for line in left_out(at))


def test_retired_config_keys_do_not_split_the_sample_seeds_into_two_setups(samples):
    """grouping_off_seed0's manifest records the retired, no-op keys (resolution_collapse_*, ...) and
    seed1's does not: still one setup of two seeds."""
    seeds = [json.loads((SAMPLE_LOGS / f"grouping_off_seed{s}" / "manifest.json").read_text()) for s in (0, 1)]
    recorded = [set(m["config"]) for m in seeds]
    assert "resolution_collapse_min_frac" in recorded[0] - recorded[1]  # the sample still differs so
    samples.query_params["run"] = "grouping_off_seed0"  # its configuration (280 steps) opens
    at = goto(samples, "compare")
    summary = at.dataframe[0].value
    assert dict(zip(summary["setup"], summary["n"]))["grouping_off"] == 2
    assert not any("resolution_collapse" in s or "mask_cache" in s for s in summary["setup"]), summary["setup"]


def test_the_probe_only_run_has_no_empty_training_or_controller_charts_on_stability(samples):
    samples.query_params["run"] = PROBE_ONLY
    at = goto(samples, "stability")
    assert at.selectbox(key="run_picker").value == PROBE_ONLY
    keys = [c.proto.id or "" for c in at.get("plotly_chart")]
    assert not any(k in key for key in keys for k in ("stab_fig", "stab_ctrl", "valid_fig")), keys
    assert not any("Controller health" in h.value for h in at.subheader)
    assert any("A probed model, not trained here" in i.value for i in at.info)


def test_the_probe_only_run_shows_no_nan_in_its_header(samples):
    samples.query_params["run"] = PROBE_ONLY
    at = goto(samples, "windows")
    assert at.selectbox(key="run_picker").value == PROBE_ONLY
    shown = next(c.value for c in at.caption if "causal-pair coverage" in c.value)  # the header's line
    assert "nan" not in shown.lower(), shown
    assert not at.error, [e.value for e in at.error]


# ---- the Training page: grouped runs, one x range, views in the address ---------------------------


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    from aah_viz.samples import make_synthetic_run

    root = tmp_path_factory.mktemp("logs")
    kw = dict(n_layer=2, n_head=4, steps=120)
    make_synthetic_run(root / "a-s0", regime="full_adaptive", seed=0, **kw)
    make_synthetic_run(root / "a-s1", regime="full_adaptive", seed=1, **kw)
    make_synthetic_run(root / "f-s0", regime="shallow_freeze", seed=0, **kw)
    return root


def open_training(root: Path, monkeypatch, tmp_path, **params) -> AppTest:
    return goto(open_runs(root, monkeypatch, tmp_path, **params), "training")


def figures(at: AppTest) -> dict[str, dict]:
    from aah_viz.figures.payload import figure_data

    out = {}
    for el in at.get("plotly_chart"):
        fig = figure_data(el.proto.spec)
        out[fig["layout"]["title"]["text"]] = fig
    return out


def test_runs_grouped_by_regime_are_a_mean_with_a_min_max_band_and_a_count(three_runs, monkeypatch, tmp_path):
    import shutil

    from aah_viz.runlog import load_run
    from aah_viz.samples import make_synthetic_run

    logs = tmp_path / "logs"  # the three runs and one more of a-s0's regime and seed, with 4 sink tokens
    shutil.copytree(three_runs, logs)
    make_synthetic_run(logs / "a-sinks", regime="full_adaptive", seed=0, n_layer=2, n_head=4, steps=120)
    manifest = json.loads((logs / "a-sinks" / "manifest.json").read_text())
    manifest["config"]["sink_tokens"] = 4
    (logs / "a-sinks" / "manifest.json").write_text(json.dumps(manifest))
    at = open_training(logs, monkeypatch, tmp_path)
    at.multiselect(key="tr_runs").set_value(["a-s0", "a-s1", "f-s0", "a-sinks"]).run()
    at.slider(key="tr_smoothing").set_value(0.0).run()
    at.selectbox(key="tr_group").set_value("regime").run()
    fig = figures(at)["training loss against step"]
    means = {t["name"]: t for t in fig["data"] if t.get("showlegend") is not False}
    # the run with sinks is another setup of the regime: a line of its own, a key in the legend, what differs
    # in the hover and in the table of groups; no two groups alike in colour and dash
    assert set(means) == {
        "regime=full_adaptive · S1 (n=2)",
        "regime=full_adaptive · S2 (n=1)",
        "regime=shallow_freeze (n=1)",
    }
    assert "full_adaptive, sink_tokens=4" in means["regime=full_adaptive · S2 (n=1)"]["hovertemplate"]
    assert len({(t["line"]["color"], t["line"].get("dash")) for t in means.values()}) == 3
    (table,) = [d.value for d in at.dataframe if "setup" in d.value.columns]
    assert list(table["group"]) == ["full_adaptive · S1", "full_adaptive · S2", "shallow_freeze"]
    assert list(table["setup"]) == ["full_adaptive", "full_adaptive, sink_tokens=4", "shallow_freeze"]
    assert list(table["runs"]) == [2, 1, 1] and table["run names"].iloc[0] == "a-s0, a-s1"
    band = next(t for t in fig["data"] if t.get("fill") == "toself")
    assert "full_adaptive" in band["name"]
    # the mean and the band, computed here from the two runs' rows on the figure's own x values
    mean = means["regime=full_adaptive · S1 (n=2)"]
    x = np.asarray(mean["x"], float)
    ys = []
    for key in ("a-s0", "a-s1"):
        loss = load_run(logs / key).scalar("loss").sort_values("step")
        ys.append(np.interp(x, loss["step"].to_numpy(float), loss["value"].to_numpy()))
    np.testing.assert_allclose(np.asarray(mean["y"], float), np.mean(ys, axis=0), rtol=1e-9)
    # both runs behind every point: the name's "(n=2)" says it once, the hover adds nothing; its header
    # (the x value) prints whole steps, not "21.96692k"
    assert set(mean["customdata"]) == {""}
    assert fig["layout"]["xaxis"]["hoverformat"] == ",.0f"
    edge = np.asarray(band["y"], float)
    np.testing.assert_allclose(edge[: len(x)], np.max(ys, axis=0), rtol=1e-9)
    np.testing.assert_allclose(edge[len(x) :][::-1], np.min(ys, axis=0), rtol=1e-9)
    assert any("3 groups by regime (each one's runs and settings: the table below)" in c for c in captions(at))
    assert any("fewer than 3 runs in full_adaptive · S1: their band is those runs" in c for c in captions(at))
    # group by seed instead: seed 0 holds runs of two regimes and two setups, never averaged together
    at.selectbox(key="tr_group").set_value("seed").run()
    names = {t["name"] for t in figures(at)["training loss against step"]["data"] if t.get("showlegend") is not False}
    assert names == {"seed=0 · S1 (n=1)", "seed=0 · S2 (n=1)", "seed=0 · S3 (n=1)", "seed=1 (n=1)"}
    (table,) = [d.value for d in at.dataframe if "setup" in d.value.columns]
    assert list(table["setup"]) == [
        "0",  # what most seed-0 runs are (full_adaptive, no sinks) goes unsaid
        "0, regime=shallow_freeze",
        "0, sink_tokens=4",
        "1",
    ]


def test_many_groups_of_two_are_counted_in_a_line_never_a_paragraph_of_names(three_runs, monkeypatch, tmp_path):
    """Five setups of two seeds each (a sweep's cells, issue 42): the caption and the notice count the groups
    of fewer than 3 runs and leave their names to the table of groups."""
    import shutil

    logs = tmp_path / "logs"
    shutil.copytree(three_runs, logs)
    for cell in range(4):  # four more cells of full_adaptive, each with seeds 0 and 1
        for seed in (0, 1):
            run = logs / f"cell{cell}-s{seed}"
            shutil.copytree(three_runs / f"a-s{seed}", run)
            manifest = json.loads((run / "manifest.json").read_text())
            manifest["config"]["ema_alpha"] = cell / 10
            (run / "manifest.json").write_text(json.dumps(manifest))
    at = open_training(logs, monkeypatch, tmp_path, group="regime", band="ci95")
    at.multiselect(key="tr_runs").set_value(sorted(p.name for p in logs.iterdir() if is_run(p))).run()
    (table,) = [d.value for d in at.dataframe if "setup" in d.value.columns]
    assert sorted(table["runs"]) == [1, 2, 2, 2, 2, 2]
    said = [c for c in captions(at) if "groups by regime" in c]
    assert said and "fewer than 3 runs" not in said[0]  # ci95: the notice says it, not the caption
    (notice,) = [i.value for i in at.info if "fewer than 3 runs" in i.value]
    assert notice.startswith("5 group(s) hold fewer than 3 runs (the table below names them)")
    assert "·" not in notice  # no group's name in it
    at.selectbox(key="tr_band").set_value("minmax").run()
    assert any("fewer than 3 runs in 5 groups (their runs: the table below)" in c for c in captions(at))


def _command_block_builds_the_charts_shown(at: AppTest) -> None:
    """The Training page's "from the command line" block: its aah-viz figure command (runs, kind curves,
    the x axis, grouping, band, smoothing, robust and log y) builds the chart on screen, trace for trace."""
    import shlex

    from aah_viz.figures import build_figure
    from aah_viz.figures.payload import figure_data
    from aah_viz.runlog import load_run

    (block,) = [c.value for c in at.code if "aah-viz figure" in c.value]
    shown = figures(at)
    commands = block.splitlines()
    assert len(commands) == len(shown)
    for command in commands:
        words = shlex.split(command)
        runs = [load_run(w) for w in words[2 : words.index("--kind")]]
        assert sorted(r.path.name for r in runs) == ["a-s0", "a-s1", "f-s0"]
        assert words[words.index("--kind") + 1] == "curves"
        opts = dict(part.split("=", 1) for part in words[words.index("--opt") + 1].split(","))
        built = figure_data(build_figure("curves", runs, **opts).to_json())
        tag = built["layout"]["yaxis"]["title"]["text"]  # the scalar's name (the page's title is in words)
        (screen,) = [f for f in shown.values() if f["layout"]["yaxis"]["title"]["text"] == tag]
        assert [t.get("name") for t in screen["data"]] == [t.get("name") for t in built["data"]]
        for a, b in zip(screen["data"], built["data"]):
            np.testing.assert_allclose(np.asarray(a["y"], float), np.asarray(b["y"], float), rtol=1e-9)
            np.testing.assert_allclose(np.asarray(a["x"], float), np.asarray(b["x"], float), rtol=1e-9)
        assert screen["layout"]["yaxis"].get("range") == built["layout"]["yaxis"].get("range")  # robust y alike
        assert screen["layout"]["yaxis"].get("type") == built["layout"]["yaxis"].get("type")  # log y alike


def test_the_first_losses_do_not_set_the_y_axis_and_one_x_range_holds_for_every_chart(samples):
    from aah_viz.runlog import load_run

    at = goto(samples, "training")
    run = at.selectbox(key="run_picker").value
    loss = load_run(SAMPLE_LOGS / run).scalar("loss").sort_values("step")["value"].to_numpy()
    at.slider(key="tr_smoothing").set_value(0.0).run()
    fig = figures(at)["training loss against step"]
    lo, hi = fig["layout"]["yaxis"]["range"]
    assert loss[0] > 100 and hi < loss[0] / 5  # the ~115-nat start is off the axis ...
    assert lo <= loss.min() and hi >= np.quantile(loss, 0.85)  # ... while the rest of training is on it
    at.toggle(key="tr_robust").set_value(False).run()
    assert "range" not in figures(at)["training loss against step"]["layout"]["yaxis"]
    # one x range, chosen once, on every chart and in the address
    at.multiselect(key="tr_scalars").set_value(["loss", "val_loss", "lr"]).run()
    at.slider(key="tr_range").set_value((50, 200)).run()
    shown = figures(at)
    assert len(shown) == 3
    assert all(f["layout"]["xaxis"]["range"] == [50, 200] for f in shown.values())
    assert at.query_params["range"] == "50,200"
    # against tokens the range is whole tokens, printed whole ("128 – 247104", never "128.00 – 247104.00")
    at.radio(key="tr_x").set_value("tokens").run()
    tokens = at.slider(key="tr_range")
    assert tokens.proto.format == "%d" and all(isinstance(v, int) for v in tokens.value), tokens.value
    every = [f["layout"]["xaxis"]["range"] for f in figures(at).values()]
    assert tokens.value == (int(every[0][0]), int(every[0][1]))  # the whole run's tokens, from the charts
    lo, hi = tokens.value
    at.slider(key="tr_range").set_value((lo + 1000, hi - 1000)).run()
    assert at.query_params["range"] == f"{lo + 1000},{hi - 1000}"


def test_a_copied_address_reproduces_the_training_view(three_runs, monkeypatch, tmp_path):
    at = open_training(three_runs, monkeypatch, tmp_path)
    at.multiselect(key="tr_runs").set_value(["a-s0", "a-s1", "f-s0"]).run()
    at.multiselect(key="tr_scalars").set_value(["loss", "acr"]).run()
    at.radio(key="tr_x").set_value("wall_s").run()
    at.selectbox(key="tr_group").set_value("regime").run()
    at.selectbox(key="tr_band").set_value("ci95").run()
    at.slider(key="tr_smoothing").set_value(0.3).run()
    at.toggle(key="tr_log_y").set_value(True).run()
    params = {k: at.query_params[k] for k in at.query_params}
    assert {"runs", "scalars", "x", "group", "band", "smooth", "logy"} <= set(params)
    _command_block_builds_the_charts_shown(at)  # and the command the page prints draws the same charts
    before = figures(at)
    # a fresh session (a new tab) opened on that address
    again = open_training(three_runs, monkeypatch, tmp_path, **params)
    assert again.multiselect(key="tr_runs").value == ["a-s0", "a-s1", "f-s0"]
    assert again.multiselect(key="tr_scalars").value == ["loss", "acr"]
    assert (again.radio(key="tr_x").value, again.selectbox(key="tr_group").value) == ("wall_s", "regime")
    assert again.selectbox(key="tr_band").value == "ci95" and again.slider(key="tr_smoothing").value == 0.3
    after = figures(again)
    assert set(after) == set(before) == {"training loss against wall time", "ACR against wall time"}
    for title in before:
        assert [t["name"] for t in after[title]["data"]] == [t["name"] for t in before[title]["data"]]
        assert after[title]["layout"]["yaxis"]["type"] == "log"
    # a page switch and back keeps the view (Streamlit forgets widgets off the page; the session does not)
    goto(at, "windows")
    goto(at, "training")
    assert at.selectbox(key="tr_group").value == "regime" and at.radio(key="tr_x").value == "wall_s"
    assert at.query_params["group"] == "regime"
    # a hostile or stale address falls back to the defaults, and says nothing as markup
    bad = open_training(three_runs, monkeypatch, tmp_path, runs="../../etc~nope", x="<b>x</b>", smooth="7")
    assert bad.multiselect(key="tr_runs").value and bad.radio(key="tr_x").value == "step"
    assert bad.slider(key="tr_smoothing").value == 0.6


# ---- the Runs page: the table is the selector ------------------------------------------------------


def open_runs(root: Path, monkeypatch, tmp_path, **params) -> AppTest:
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tick(at: AppTest, *keys: str) -> AppTest:
    """Tick the rows of these runs in the Runs table (what clicks on their boxes send)."""
    shown = at.session_state["runs_shown"]
    rows = [shown.index(k) for k in keys]
    at.session_state["runs_table"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def test_the_runs_table_filters_by_any_field_and_ticks_select_runs(three_runs, monkeypatch, tmp_path):
    at = open_runs(three_runs, monkeypatch, tmp_path)
    assert sorted(at.dataframe[0].value["run"]) == ["a-s0", "a-s1", "f-s0"]
    # a manifest field the standard columns lack, as a filter: seed 1 only
    at.selectbox(key="runs_filter_field").set_value("seed").run()
    at.text_input(key="runs_filter").set_value("=1").run()
    assert at.dataframe[0].value["run"].tolist() == ["a-s1"]
    at.text_input(key="runs_filter").set_value("freeze").run()
    assert at.dataframe[0].value["run"].tolist() == []  # seed holds no text "freeze"
    at.selectbox(key="runs_filter_field").set_value("regime").run()
    assert at.dataframe[0].value["run"].tolist() == ["f-s0"]
    # a final figure: numbers compare as numbers
    at.selectbox(key="runs_filter_field").set_value("last step").run()
    at.text_input(key="runs_filter").set_value(">=119").run()
    assert len(at.dataframe[0].value) == 3
    # ticking two rows selects those runs for every page
    at.text_input(key="runs_filter").set_value("").run()
    tick(at, "a-s0", "f-s0")
    assert at.session_state["selected_runs"] == ["a-s0", "f-s0"]
    goto(at, "compare")
    assert sorted(at.dataframe[0].value["setup"]) == ["full_adaptive", "shallow_freeze"]
    goto(at, "runs")
    assert at.session_state["runs_ticked"] == [0, 2]  # the table shows the selection it made
    # a filter that hides a selected run keeps it selected
    at.selectbox(key="runs_filter_field").set_value("regime").run()
    at.text_input(key="runs_filter").set_value("adaptive").run()
    tick(at, "a-s1")
    assert at.session_state["selected_runs"] == ["a-s1", "f-s0"]


def test_the_config_diff_shows_only_the_fields_that_differ(three_runs, monkeypatch, tmp_path):
    at = open_runs(three_runs, monkeypatch, tmp_path)
    tick(at, "a-s0", "a-s1")
    diff = at.dataframe[1].value.set_index("field")
    assert list(diff.columns) == ["a-s0", "a-s1"]
    assert "seed" in diff.index and "regime" not in diff.index and "n_layer" not in diff.index
    assert diff.loc["seed"].tolist() == ["0", "1"]
    tick(at, "a-s0", "f-s0")
    diff = at.dataframe[1].value.set_index("field")
    assert "regime" in diff.index and "seed" not in diff.index
    assert any("are the same in every selected run" in c for c in captions(at))
    # more columns from the manifest, and the whole view in the address
    at.multiselect(key="runs_columns").set_value(["config.n_embd"]).run()
    assert "config.n_embd" in at.dataframe[0].value.columns
    at.text_input(key="runs_filter").set_value("adaptive").run()
    params = {k: at.query_params[k] for k in at.query_params}
    again = open_runs(three_runs, monkeypatch, tmp_path, **params)
    assert again.dataframe[0].value["run"].tolist() == ["a-s0", "a-s1"]
    assert "config.n_embd" in again.dataframe[0].value.columns


def test_the_runs_compared_on_the_windows_page_travel_in_the_address(three_runs, monkeypatch, tmp_path):
    at = open_runs(three_runs, monkeypatch, tmp_path, run="a-s0")
    goto(at, "windows")
    at.multiselect(key="win_compare_pick").set_value(["a-s0", "f-s0"]).run()
    assert at.query_params["compare"] == "a-s0~f-s0"
    again = open_runs(three_runs, monkeypatch, tmp_path, **{k: at.query_params[k] for k in at.query_params})
    goto(again, "windows")
    assert again.multiselect(key="win_compare_pick").value == ["a-s0", "f-s0"]
    cost = again.dataframe[0].value
    assert len(cost) == 2


def test_the_page_header_reads_less_and_says_the_same(three_runs):
    """The header's stability and controller figures, read lightly, equal the Stability page's full reads."""
    import pandas as pd

    from aah_viz.dashboard import cache
    from aah_viz.figures import data
    from aah_viz.runlog import load_run

    for key in ("a-s0", "f-s0"):
        run = load_run(three_runs / key)
        full = data.stability_data(run)["layers"].reset_index(drop=True)
        light = cache.stability_layers(str(three_runs), key, 0).reset_index(drop=True)
        pd.testing.assert_frame_equal(light, full)
        grad = run.scalar("controller_grad_norm")["value"].abs()
        counts = (len(grad), int((grad != 0).sum()))  # logged, not zero: whether the controller learns
        assert cache.controller_grad(str(three_runs), key, 0) == counts
        assert cache.overview(str(three_runs), key, 0)["controller_grad"] == counts  # from the run's summary
    coverage, cost = data.coverage_and_cost([load_run(three_runs / "a-s0"), load_run(three_runs / "f-s0")])
    runs = [load_run(three_runs / "a-s0"), load_run(three_runs / "f-s0")]
    pd.testing.assert_frame_equal(coverage, data.coverage_data(runs))
    acr = runs[1].scalar("acr")
    acr = acr[acr["layer"].isna()].sort_values("step")
    assert cost.set_index("run").loc[data.run_label(runs[1]), "ACR"] == acr["value"].iloc[-1]


def test_export_figures_of_several_runs_use_the_chosen_configuration(samples):
    from aah_viz.figures.payload import figure_data

    samples.query_params["run"] = "full_adaptive_seed0"
    at = goto(samples, "export")
    at.selectbox(key="exp_fig_kind").set_value("bucket_heatmap").run()
    fig = figure_data(at.get("plotly_chart")[-1].proto.spec)
    names = json.dumps(fig["data"], default=str)
    assert "full_adaptive_seed0" in names and PROBE_ONLY not in names
    probed = next(o for o in at.selectbox(key="exp_config").options if "T = 510" in o).rsplit(" (", 1)[0]
    at.selectbox(key="exp_config").set_value(probed)
    at.run()
    assert not at.exception, [e.value for e in at.exception]


def test_the_data_behind_each_comparing_page_downloads_as_csv_and_parquet(three_runs, monkeypatch, tmp_path):
    at = open_runs(three_runs, monkeypatch, tmp_path)
    for page, key in (("runs", "runs_data"), ("training", "tr_data"), ("windows", "win_data"), ("compare", "cmp_data")):
        at = goto(at, page)
        buttons = {b.key for b in at.get("download_button")}
        assert {f"{key}_csv", f"{key}_parquet"} <= buttons, (page, buttons)
    at = goto(at, "stability")
    assert {"stab_data_csv", "stab_data_parquet"} <= {b.key for b in at.get("download_button")}


def test_a_per_layer_scalar_is_drawn_as_the_run_logged_it_for_that_layer(three_runs, monkeypatch, tmp_path):
    """Per-layer scalars are offered as NAME/layer_L after the model-wide ones; a chosen one is that
    layer's rows of the run's scalars table (read here with pandas), and it travels in the address."""
    import pandas as pd

    from aah_viz.runlog import load_run

    at = open_training(three_runs, monkeypatch, tmp_path)
    at.multiselect(key="tr_runs").set_value(["a-s0"]).run()
    at.slider(key="tr_smoothing").set_value(0.0).run()
    import re

    # the picker shows words with the logged name beside them: "ACR, layer 1 (acr/layer_1)"
    shown = at.multiselect(key="tr_scalars").options
    options = [m.group(1) if (m := re.search(r"\(([^()]*)\)$", o)) else o for o in shown]
    assert "ACR, layer 1 (acr/layer_1)" in shown
    scalars = load_run(three_runs / "a-s0").table("scalars")
    per_layer = scalars[scalars["layer"].notna()]
    want = sorted({f"{n}/layer_{int(layer)}" for n, layer in zip(per_layer["name"], per_layer["layer"])})
    assert [o for o in options if "/layer_" in o] == sorted(
        want, key=lambda o: (o.split("/")[0], int(o.rsplit("_", 1)[1]))
    )
    assert options.index(want[0]) > max(options.index(o) for o in options if "/layer_" not in o)
    at.multiselect(key="tr_scalars").set_value(["acr/layer_1"]).run()
    assert not at.exception and at.query_params["scalars"] == "acr/layer_1"
    fig = figures(at)["ACR, layer 1 against step"]
    drawn = next(t for t in fig["data"] if t.get("showlegend") is not False)
    rows = per_layer[(per_layer["name"] == "acr") & (per_layer["layer"] == 1)].sort_values("step")
    assert len(rows) <= 500  # unbinned here: every logged value is drawn
    got = pd.Series(np.asarray(drawn["y"], float), index=np.asarray(drawn["x"], float))
    np.testing.assert_allclose(got.to_numpy(), rows["value"].to_numpy(float), rtol=1e-12)
    np.testing.assert_allclose(got.index.to_numpy(), rows["step"].to_numpy(float))


def test_compare_bars_of_two_seeds_stay_in_each_figures_domain():
    """Two seeds far apart: mean ± sd (computed here) would draw ACR above 1 and a loss below 0."""
    import pandas as pd

    from aah_viz.figures.compare import regime_metric_figure

    acr, loss = [0.05, 0.95], [0.1, 3.0]
    per_run = pd.DataFrame({"regime": ["r", "r"], "seed": [0, 1], "final_acr": acr, "final_loss": loss})
    fig = regime_metric_figure(per_run, ["final_acr", "final_loss"])
    bars = {b.xaxis: b for b in fig.data if b.name == "our runs (mean ± sd)"}
    # means as points with their spread, never bars from 0 (values of 2.9-3.8 would all look alike)
    assert not [b for b in fig.data if b.type == "bar"]
    assert all(fig.layout[f"yaxis{i or ''}"].rangemode in (None, "normal") for i in (0, 2))
    for axis, values, lo, hi in (("x", acr, 0.0, 1.0), ("x2", loss, 0.0, np.inf)):
        mean, sd = float(np.mean(values)), float(np.std(values, ddof=1))
        assert mean - sd < lo or mean + sd > hi  # unclipped, the bar leaves the domain
        bar = bars[axis]
        top = bar.y[0] + bar.error_y.array[0]
        bottom = bar.y[0] - bar.error_y.arrayminus[0]
        assert bar.y[0] == pytest.approx(mean)
        assert bottom == pytest.approx(max(mean - sd, lo)) and top == pytest.approx(min(mean + sd, hi))
        assert bar.customdata[0][1] == pytest.approx(sd)  # the hover still says the sd itself


def test_compare_says_which_regimes_have_fewer_than_three_runs(three_runs, monkeypatch, tmp_path):
    at = goto(open_runs(three_runs, monkeypatch, tmp_path), "compare")
    few = [c for c in captions(at) if c.startswith("Fewer than 3 runs")]
    assert len(few) == 1, captions(at)
    assert "full_adaptive (n = 2)" in few[0] and "shallow_freeze (n = 1)" in few[0]


def test_compare_leaves_unfinished_runs_out_and_names_repeated_seeds(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.dashboard.app import PAGE_FILES
    from aah_viz.samples import make_synthetic_run

    logs = tmp_path / "logs"
    for name, seed, status in (
        ("a", 0, "finished"),
        ("b", 0, "finished"),
        ("c", 1, "finished"),
        ("live", 2, "running"),
        ("sinks", 0, "finished"),  # the same regime and seed as a and b, but 4 sink tokens: not a repeat
        ("longer", 0, "finished"),  # another length of training: another configuration
    ):
        steps = 80 if name == "longer" else 60
        make_synthetic_run(logs / name, n_layer=2, n_head=4, steps=steps, seed=seed, status=status)
    manifest = json.loads((logs / "sinks" / "manifest.json").read_text())
    manifest["config"]["sink_tokens"] = 4
    (logs / "sinks" / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=PATIENCE_S)
    at.query_params["run"] = "longer"  # the run open: Compare shows its configuration, not the largest
    at.run()
    at.switch_page(PAGE_FILES["compare"]).run()
    assert not at.exception, [e.value for e in at.exception]
    picker = at.selectbox(key="cmp_config")
    assert picker.value.endswith("80 steps") and at.dataframe[0].value["n"].tolist() == [1]
    picker.set_value(next(o.rsplit(" (", 1)[0] for o in picker.options if "60 steps (" in o)).run()
    summary = at.dataframe[0].value
    # a, b and c one setup; the run with sinks a row of its own, named by what differs; the live run left out
    assert dict(zip(summary["setup"], summary["n"])) == {"full_adaptive": 3, "full_adaptive, sink_tokens=4": 1}
    assert any("Left out of the means (unfinished" in c.value and "live (running)" in c.value for c in at.caption)
    repeats = [w.value.replace("\\", "") for w in at.warning if "repeats, not independent seeds" in w.value]
    assert len(repeats) == 1 and "full_adaptive: seed 0 x2" in repeats[0] and "x3" not in repeats[0]
    at.checkbox(key="cmp_unfinished").check().run()
    assert at.dataframe[0].value["n"].tolist() == [4, 1]


def test_the_runs_download_keeps_whole_numbers_whole_where_some_runs_lack_the_field():
    """seed 0 and config.n_embd 192 in the CSV, not 0.0 and 192.0, though a probe-only run has neither."""
    import io

    import pandas as pd

    from aah_viz.dashboard import cache
    from aah_viz.dashboard.views import runs as runs_view
    from aah_viz.runlog import discover_runs

    if not is_run(SAMPLE_LOGS / PROBE_ONLY):
        pytest.skip("the bundled sample logs are not in this checkout")
    root = str(SAMPLE_LOGS)
    keys = [Path(p).relative_to(SAMPLE_LOGS).as_posix() for p in discover_runs(SAMPLE_LOGS)]
    good = {k: o for k in keys if "error" not in (o := cache.overview(root, k, 0))}
    frame, _ = runs_view._table(root, good)
    csv = pd.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=str).set_index("run")
    manifests = {k: o["manifest"] for k, o in good.items()}
    for field, read in (
        ("seed", lambda m: m.get("seed")),
        ("config.n_embd", lambda m: m.get("config", {}).get("n_embd")),
    ):
        written = {k: read(m) for k, m in manifests.items()}
        assert None in written.values() and any(isinstance(v, int) for v in written.values()), field
        for key, value in written.items():
            cell = csv.loc[key, field]
            assert pd.isna(cell) if value is None else cell == str(value), (field, key, cell)
    # a column of fractions stays as it was; a flag stays a flag
    from aah_viz.analysis.manifest_fields import fields_frame

    small = fields_frame([{"a": 1, "b": 0.5, "c": True}, {"a": None, "b": 2, "c": False}, {"b": None}])
    assert small.to_csv(index=False).splitlines() == ["a,b,c", "1,0.5,True", ",2.0,False", ",,"]


def test_the_settings_diff_folds_only_a_field_repeating_one_of_its_own_name():
    """config.seed repeats seed and is named once; two different flags that agree run by run are both shown."""
    from aah_viz.analysis.manifest_fields import diff_summary

    rows = {
        "a": {"seed": 0, "config.seed": 0, "config.eval_mutates_routing": True, "config.controller_float32": True},
        "b": {"seed": 1, "config.seed": 1, "config.eval_mutates_routing": False, "config.controller_float32": False},
    }
    summary = diff_summary(rows)
    assert summary["values"] == ["seed", "config.controller_float32", "config.eval_mutates_routing"]
    assert summary["same_as"] == {"config.seed": "seed"}
