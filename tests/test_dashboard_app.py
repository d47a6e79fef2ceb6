"""Every dashboard page through ``streamlit.testing.v1.AppTest`` on real run directories.

Runs are written by ``make_synthetic_run`` in a temporary logs root, next to a corrupt run and one
with a newer schema; each page's elements, its figures' data (decoded from Plotly's base64 arrays)
and its interactions (pick a run, move the slider, change layer) are checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.dashboard.views import runs as runs_view
from aah_viz.figures.payload import figure_data
from aah_viz.runlog import RunWriter, load_run
from aah_viz.runlog.manifest import STATUSES
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
N_LAYER, N_HEAD, STEPS = 3, 6, 120

pytestmark = pytest.mark.timeout(TEST_S)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    make_synthetic_run(
        root / "adaptive-s0", n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS, regime="full_adaptive", seed=0
    )
    make_synthetic_run(
        root / "adaptive-s1", n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS, regime="full_adaptive", seed=1
    )
    make_synthetic_run(
        root / "nested" / "freeze-s0", n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS, regime="shallow_freeze", seed=0
    )
    bad = root / "broken"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    newer = root / "from-the-future"
    shutil.copytree(root / "adaptive-s0", newer)
    m = json.loads((newer / "manifest.json").read_text())
    m["schema_version"] = "99.0"
    (newer / "manifest.json").write_text(json.dumps(m))
    return root


@pytest.fixture
def app(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))  # absent: Compare shows ours only
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(PAGE_FILES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list[dict]:
    return [figure_data(el.proto.spec) for el in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    return [c["layout"].get("title", {}).get("text", "") for c in charts(at)]


def screen_text(at: AppTest) -> str:
    """What a reader sees in words: headings, captions, notes, pickers' options and the charts' titles and axes."""
    parts = [e.value for kind in ("title", "subheader", "caption", "markdown", "info", "warning") for e in at.get(kind)]
    parts += [str(o) for kind in ("selectbox", "multiselect") for w in at.get(kind) for o in w.options]
    for fig in charts(at):
        layout = fig["layout"]
        parts += [json.dumps(layout.get(k, {}).get("title", "")) for k in layout if k.startswith(("xaxis", "yaxis"))]
        parts.append(json.dumps(layout.get("title", "")))
    return "\n".join(parts)


def test_runs_page_lists_good_runs_and_boxes_the_bad_ones(app):
    table = app.dataframe[0].value
    assert sorted(table["run"]) == ["adaptive-s0", "adaptive-s1", "nested/freeze-s0"]
    row = table.set_index("run").loc["adaptive-s1"]
    run = load_run(Path(app.session_state["logs_root"]) / "adaptive-s1")
    assert row["regime"] == "full_adaptive" and row["seed"] == 1 and row["last step"] == STEPS - 1
    assert row["last-batch train loss"] == pytest.approx(run.scalar("loss")["value"].iloc[-1])
    assert row["status"] == "finished" and row["progress"] == pytest.approx(1.0)
    errors = [e.value for e in app.error]
    assert len(errors) == 2
    assert any("broken" in e and "not valid JSON" in e for e in errors)
    assert any("from-the-future" in e and "99.0" in e for e in errors)
    assert app.session_state["runs_ticked"] == [0, 1, 2]  # every run ticked when none was picked
    # short headers on screen (every standard column fits 1500 px), the full name in the tooltip
    shown = json.loads(app.dataframe[0].proto.columns)
    assert shown["causal-pair coverage"]["label"] == "coverage"
    assert shown["causal-pair coverage"]["help"].startswith("causal-pair coverage: ")
    assert shown["last-batch train loss"]["label"] == "train loss"
    # the model's shape on request (with it the table ran 180 px past a 1500 px window); windows as 16/32/64/128
    assert "layers" not in table.columns and "heads" not in table.columns
    assert {"layers", "heads"} <= set(app.multiselect(key="runs_columns").options)
    assert set(table["candidate windows (tokens)"]) == {"/".join(str(w) for w in load_run(run.path).windows)}
    assert shown["progress"]["width"] == "small"


def tick(at: AppTest, *rows: int) -> AppTest:
    """Tick these rows of the Runs table (what a click on their boxes sends), untick the others."""
    at.session_state["runs_table"] = {"selection": {"rows": list(rows), "columns": [], "cells": []}}
    return at.run()


def test_picking_runs_limits_the_other_pages(app):
    shown = app.session_state["runs_shown"]
    tick(app, shown.index("nested/freeze-s0"))
    assert app.session_state["selected_runs"] == ["nested/freeze-s0"]
    goto(app, "windows")
    assert app.selectbox(key="run_picker").options == ["shallow_freeze s0 · nested/freeze-s0"]
    cov = next(f for f in charts(app) if f["layout"]["title"]["text"].startswith("ACR, causal-pair coverage"))
    assert {tr["name"] for tr in cov["data"] if tr.get("name")} == {"shallow_freeze s0 (nested/freeze-s0)"}


def test_hierarchy_page_slider_and_layer_picker(app, logs):
    goto(app, "hierarchy")
    run = load_run(logs / "adaptive-s0")
    slider = app.select_slider(key="step_picker")
    tree_steps = sorted(run.table("tree", columns=["step"], filters=[("layer", "==", 0)])["step"].unique())
    assert list(map(int, slider.options)) == [int(s) for s in tree_steps]
    fig = charts(app)[0]
    assert fig["layout"]["title"]["text"].startswith(f"layer 0 at step {tree_steps[-1]}")
    head_trace_text = [t for tr in fig["data"][1:] for t in (tr.get("text") or []) if t.startswith("L0H")]
    assert sorted(head_trace_text) == sorted(f"L0H{h}" for h in range(N_HEAD))
    levels = next(m.value for m in app.metric if m.label == "levels")
    tree = run.table("tree", filters=[("layer", "==", 0), ("step", "==", int(tree_steps[-1]))])
    assert int(levels) == tree["level"].nunique()
    # the tree rows say the window each group chose in tokens, under words, not candidate indices
    rows = next(d.value for d in app.dataframe if "members" in d.value.columns)
    assert "final_idx" not in rows.columns
    by_node = tree.sort_values(["level", "node"])
    windows = [int(w) for w in run.windows]
    assert sorted(rows["window (after parent)"].dropna().astype(int)) == sorted(
        windows[int(i)] for i in by_node["final_idx"].dropna()
    )
    # move the slider to an earlier routing update
    target = int(tree_steps[len(tree_steps) // 2])
    slider.set_value(target).run()
    assert not app.exception
    assert charts(app)[0]["layout"]["title"]["text"].startswith(f"layer 0 at step {target}")
    # change layer
    app.selectbox(key="layer_picker").set_value(2).run()
    assert not app.exception
    assert charts(app)[0]["layout"]["title"]["text"].startswith("layer 2 at step")


def test_windows_page_heatmap_follows_the_step_slider(app, logs):
    goto(app, "windows")
    run = load_run(logs / "adaptive-s0")
    assert app.selectbox(key="run_picker").value == "adaptive-s0"
    update_steps = [int(s) for s in app.select_slider(key="step_picker").options]
    ups = run.table("events", filters=[("kind", "==", "routing_update")])
    assert update_steps == sorted(int(s) for s in ups["step"].unique())  # the slider snaps to routing updates
    app.select_slider(key="step_picker").set_value(50).run()
    assert not app.exception
    figs = charts(app)
    heat = next(f for f in figs if f["layout"]["title"]["text"] == "executed windows at step 50")
    heads = run.table("heads", filters=[("step", "==", 50)])
    want = np.zeros((N_LAYER, N_HEAD))
    want[heads["layer"], heads["head"]] = heads["window"]
    np.testing.assert_array_equal(heat["data"][0]["customdata"], want)
    bars = next(f for f in figs if f["layout"]["title"]["text"] == "branch frequencies at step 50")
    np.testing.assert_allclose(sum(np.asarray(t["y"], float) for t in bars["data"]), 1.0, atol=1e-6)
    # timeline of another layer
    app.selectbox(key="layer_picker").set_value(1).run()
    tl = next(f for f in charts(app) if f["layout"]["title"]["text"].startswith("layer 1: window per head"))
    assert tl["data"][0]["customdata"].shape[0] == N_HEAD
    titles = chart_titles(app)
    assert "ACR, causal-pair coverage and realised work" in titles
    # the heatmap of the runs that share this run's windows says how many; the side-by-side caption its own count
    # (by default the open run and its own seed, not the shallow_freeze run of another regime)
    assert app.multiselect(key="win_compare_pick").value == ["adaptive-s0", "adaptive-s1"]
    assert "final selected-window distribution of the 2 runs" in titles
    assert any(c.value.startswith("The final layer × head windows of each of the 2 chosen runs") for c in app.caption)
    app.multiselect(key="win_compare_pick").set_value(["adaptive-s0", "adaptive-s1", "nested/freeze-s0"]).run()
    # pick another run: the page follows it (and keeps the chosen step)
    app.selectbox(key="run_picker").set_value("adaptive-s1").run()
    assert not app.exception
    other = load_run(logs / "adaptive-s1")
    heat = next(f for f in charts(app) if f["layout"]["title"]["text"] == "executed windows at step 50")
    oh = other.table("heads", filters=[("step", "==", 50)])
    want = np.zeros((N_LAYER, N_HEAD))
    want[oh["layer"], oh["head"]] = oh["window"]
    np.testing.assert_array_equal(heat["data"][0]["customdata"], want)
    cov = next(f for f in charts(app) if f["layout"]["title"]["text"].startswith("ACR, causal-pair coverage"))
    lines = {tr["name"]: tr["line"] for tr in cov["data"] if tr.get("name")}
    assert set(lines) == {
        "full_adaptive s0 (adaptive-s0)",
        "full_adaptive s1 (adaptive-s1)",
        "shallow_freeze s0 (nested/freeze-s0)",  # the run's name under the logs root
    }
    assert len({line["color"] for line in lines.values()}) == 3  # each run its own colour
    assert cov["layout"]["yaxis"]["title"]["text"] == "ACR"  # the long definition is the panel title
    cost = next(df for df in app.dataframe if "ACR" in df.value.columns)  # one number format a column
    formats = {c: v.get("type_config", {}).get("format") for c, v in json.loads(cost.proto.columns).items()}
    assert (formats["ACR"], formats["coverage"], formats["tokens/s"]) == ("%.3f", "%.3f", "%.0f")
    assert cov["layout"]["xaxis3"]["title"]["text"] == "training step"  # the panels share the bottom step axis


def test_stability_page(app):
    goto(app, "stability")
    layers = app.dataframe[0].value
    assert layers["layer"].tolist() == list(range(N_LAYER))
    assert layers["mean ARI"].between(-1, 1).all()
    figs = charts(app)
    stab = figs[0]
    ari = np.asarray(stab["data"][0]["y"], dtype=float)
    assert ari.size and np.nanmax(ari) <= 1.0
    # the switch-rate title fits its half of the page (the definition is on the colour bar)
    assert "window switches per update, per head" in [f["layout"]["title"]["text"] for f in figs]
    health = next(f for f in figs if f["layout"]["title"]["text"].startswith("controller gradient norm"))
    assert [t["name"] for t in health["data"]][:2] == ["gradient norm", "weight drift"]  # words, not scalar names


def test_probes_page_explains_how_to_probe_when_nothing_was_probed(app, logs):
    goto(app, "probes")
    (said,) = [i.value for i in app.info if "aah-viz probe" in i.value]
    assert "bundled synthetic probe set" in said and "keeps no checkpoint" in said  # no files needed; one is
    # the commands name this run's own path, ready to paste (not a placeholder RUN)
    key = app.selectbox(key="run_picker").value
    assert app.code[0].value == f"aah-viz probe {logs / key}\naah-viz compare {logs / key}"
    assert not app.get("plotly_chart")


def test_probes_page_shows_probe_tables(tmp_path, monkeypatch):
    from test_figures_registry import add_probe_tables, probe_value  # tests/ is on sys.path under pytest

    from aah_viz.probes.distance import DISTANCE_EDGES

    root = tmp_path / "probed"
    run_dir = make_synthetic_run(root / "p", n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS)
    add_probe_tables(run_dir, N_LAYER, N_HEAD, STEPS - 1)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    goto(at, "probes")
    assert at.selectbox(key="probe_name").options == ["syntax", "coref", "distance", "sufficiency"]
    figs = {f["layout"]["title"]["text"]: f for f in charts(at)}
    # the headline: score minus baseline on a diverging scale centred at 0
    head = figs["syntax: best relation score minus its offset baseline"]["data"][0]
    want = np.array([[probe_value(layer, h) for h in range(N_HEAD)] for layer in range(N_LAYER)])
    np.testing.assert_allclose(head["z"], want, rtol=1e-6)
    assert head["zmin"] == pytest.approx(-head["zmax"]) and head["zmax"] == pytest.approx(np.abs(want).max())
    assert head["colorscale"][0][1] != head["colorscale"][-1][1]
    layout = figs["syntax: best relation score minus its offset baseline"]["layout"]
    assert layout["xaxis"]["range"] == [-0.5, N_HEAD - 0.5]  # the heads' cells, not -1..N_HEAD
    assert head["colorbar"]["title"]["text"].replace("<br>", " ") == "score minus offset baseline"  # words
    # any metric: small accuracies span their own range, not black on a fixed 0-1 scale
    at.selectbox(key="probe_name").set_value("syntax").run()
    at.selectbox(key="probe_metric_syntax").set_value("uas").run()
    # the metrics in words (the address and the CSV keep their names)
    assert at.selectbox(key="probe_metric_syntax").options == [
        "score minus offset baseline",
        "unlabelled attachment score",
    ]
    by_title = {f["layout"]["title"]["text"]: f for f in charts(at)}
    uas = by_title["syntax: unlabelled attachment score per head"]["data"][0]
    assert (uas["zmin"], uas["zmax"]) == pytest.approx((0.0, (N_LAYER - 1) / 10 + (N_HEAD - 1) / 100))
    scatter = by_title["window vs syntax unlabelled attachment score"]["layout"]
    assert scatter["yaxis"]["title"]["text"] == "syntax unlabelled attachment score"
    shown = screen_text(at)
    assert not [raw for raw in ("score_minus_baseline", "partition_verdict", " uas") if raw in shown], shown
    assert "partition validity is the cluster validity" in shown
    assert f"windows at step {STEPS - 1}" in figs
    # relations: the difference with its interval, positional best heads hollow
    deltas = figs["relations: best head against the offset baseline"]["data"][0]
    assert dict(zip(deltas["y"], deltas["x"])) == {"amod": -0.02, "det": 0.3}
    assert list(deltas["marker"]["symbol"]) == ["circle-open", "circle"]
    # coloured as the heatmaps read (det's interval is above 0: blue), with a key for colours and hollow marks
    assert deltas["marker"]["color"][1] == "#1f77b4"
    key = [t["name"] for t in figs["relations: best head against the offset baseline"]["data"][1:]]
    assert "above the baseline (interval above 0)" in key and "hollow: the best head is positional" in key
    relations = at.dataframe[0].value.set_index("relation")
    assert relations.loc["det", "best head"] == "L1H2" and relations.loc["det", "95% interval"] == "[+0.250, +0.350]"
    assert relations.loc["amod", "positional"] == "yes (+1, 90%)"
    # coreference by bucket: the best head overall against the nearest mention
    coref = {t["name"]: t for t in figs["coreference by antecedent distance"]["data"]}
    best = f"best head overall (L{N_LAYER - 1}H{N_HEAD - 1})"
    np.testing.assert_allclose(coref[best]["y"], [(N_LAYER + N_HEAD - 2 + i) / 100 for i in range(3)])
    np.testing.assert_allclose(coref["nearest mention (baseline)"]["y"], [0.7, 0.5, 0.3])
    # needed window: head (l, h) has all its attention in bucket (l + h) % 10
    needed = figs["needed window against executed window"]["data"][0]
    # whole layers on the colour bar; the legend below the chart, clear of the bar's title
    assert needed["marker"]["colorbar"]["dtick"] == 1
    assert figs["needed window against executed window"]["layout"]["legend"]["orientation"] == "h"
    by_head = dict(zip(needed["text"], np.asarray(needed["customdata"])[:, 1]))
    for layer in range(N_LAYER):
        for h in range(N_HEAD):
            i = (layer + h) % len(DISTANCE_EDGES)
            expect = DISTANCE_EDGES[i + 1] if i + 1 < len(DISTANCE_EDGES) else None
            got = by_head[f"L{layer}H{h}"]
            assert (got is None or np.isnan(got)) if expect is None else got == expect
    # head groups against probes: ARI per layer and pooled, the null band, degenerate rows grey
    comp_fig = figs["head groups against probe clusters, level 0"]["data"]
    band, points = comp_fig[0], comp_fig[1]
    assert {t["name"] for t in comp_fig[1:]} <= {"k-means of probe profiles", "Ward clusters of probe profiles",
                                                "clusters of attention (JS distance)"}  # fmt: skip
    assert list(points["x"]) == [f"layer {i}" for i in range(N_LAYER)] + ["pooled"]
    np.testing.assert_allclose(points["y"], [0.1 * i for i in range(N_LAYER)] + [0.2])
    assert points["marker"]["color"][0] == "#b0b0b0" and points["marker"]["color"][1] != "#b0b0b0"
    np.testing.assert_allclose(band["base"], [0.0] * (N_LAYER + 1))
    np.testing.assert_allclose(band["y"], [0.15] * N_LAYER + [0.1])
    comp = at.dataframe[1].value
    # words for the table's names, and the pooled row's layer a word, not 0.000000
    assert comp["layer"].tolist() == [str(i) for i in range(N_LAYER)] + ["pooled"]
    assert comp[["target", "ARI", "null mean", "p", "partition validity"]].values.tolist()[-1] == [
        "k-means of probe profiles",  # the chart's words for kmeans:profile
        0.2,
        0.0,
        0.04,
        "real",
    ]
    assert comp["reason"].tolist()[0] == "one AAH group"
    assert at.dataframe[2].value["Spearman's rho"].tolist() == [0.3]


def test_compare_page_groups_by_regime(app):
    goto(app, "compare")
    assert "Probes page" in app.get("page_link")[0].proto.label
    summary = app.dataframe[0].value.set_index("setup")
    assert summary.loc["full_adaptive", "n"] == 2 and summary.loc["shallow_freeze", "n"] == 1
    assert "±" in summary.loc["full_adaptive", "final loss (nats)"]
    assert "±" not in summary.loc["shallow_freeze", "final loss (nats)"]
    titles = chart_titles(app)
    assert any(t.startswith("setups:") for t in titles)
    buckets = next(f for f in charts(app) if f["layout"]["title"]["text"].startswith("final windows by setup"))
    assert "<br>" not in buckets["layout"]["title"]["text"]  # one line: "tokens" never left alone on a second
    np.testing.assert_allclose(np.asarray(buckets["data"][0]["z"]).sum(axis=1), 100.0, rtol=1e-5)
    assert any("No reference folder" in i.value for i in app.info)


def test_export_page_offers_tables_and_figures(app):
    goto(app, "export")
    assert app.selectbox(key="exp_table").options
    # the preview is the table as the text prints it: plain headers, one number format a column
    app.selectbox(key="exp_table").set_value("training").run()
    preview = app.dataframe[0].value
    assert "val. loss" in preview.columns and not [c for c in preview.columns if "_" in c], list(preview.columns)
    places = {len(v.split(".")[1]) for v in preview["val. loss"] if "." in v}
    assert len(places) == 1, preview["val. loss"].tolist()
    assert app.get("download_button")
    app.selectbox(key="exp_fig_kind").set_value("stability").run()
    assert not app.exception
    assert charts(app)[-1]["layout"]["title"]["text"].startswith("routing stability")
    # a figure of the Training page's charts starts from what that page shows; options named in words
    goto(app, "training")
    app.slider(key="tr_smoothing").set_value(0.3).run()
    app.radio(key="tr_x").set_value("tokens").run()
    goto(app, "export")
    app.selectbox(key="exp_fig_kind").set_value("curves").run()
    assert app.text_input(key="exp_opt_curves_smoothing").value == "0.3"
    assert app.text_input(key="exp_opt_curves_x").value == "tokens"
    assert app.text_input(key="exp_opt_curves_scalar").value == "loss"
    assert app.text_input(key="exp_opt_curves_log_y").label == "log y axis"
    preview = charts(app)[-1]
    assert preview["layout"]["xaxis"]["title"]["text"].startswith("tokens processed")


def test_a_query_parameter_cannot_leave_the_logs_root(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["run"] = "../../etc"
    at.run()
    assert any("ignored" in e.value and "leaves" in e.value for e in at.error)
    at.switch_page(PAGE_FILES["windows"]).run()
    assert not at.exception
    assert at.selectbox(key="run_picker").value == "adaptive-s0"
    # a valid run name in the address opens that run
    at2 = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at2.query_params["run"] = "nested/freeze-s0"
    at2.run()
    at2.switch_page(PAGE_FILES["hierarchy"]).run()
    assert not at2.error and at2.selectbox(key="run_picker").value == "nested/freeze-s0"
    # a link to a damaged run says so and which run it shows instead, never swaps it silently
    at3 = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at3.query_params["run"] = "broken"
    at3.run()
    at3.switch_page(PAGE_FILES["hierarchy"]).run()
    shown = at3.selectbox(key="run_picker").value
    assert shown != "broken" and not at3.exception
    assert any(w.value.startswith("Run broken cannot be read (") and f"showing {shown} instead" in w.value
               for w in at3.warning), [w.value for w in at3.warning]  # fmt: skip


def test_a_value_in_the_address_a_page_cannot_take_is_dropped_and_said(logs, monkeypatch, tmp_path):
    """/training?range=inf,5 (also 1e400,2 and -inf,inf): the page draws the full x range, no exception."""
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["training"]).run()
    full = at.slider(key="tr_range").value
    for text in ("inf,5", "1e400,2", "-inf,inf", "nan,3"):
        at.query_params["range"] = text
        at.run()
        assert not at.exception, (text, [e.value for e in at.exception])
        assert at.slider(key="tr_range").value == full, text
    # text that is no range at all, in a fresh tab: the full range, and said like any other refused value
    fresh = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    fresh.query_params["range"] = "abc"
    fresh.run()
    fresh.switch_page(PAGE_FILES["training"]).run()
    assert not fresh.exception and fresh.slider(key="tr_range").value == full
    (said,) = fresh.toast
    assert said.value == "The address's range=abc is not one this page can show; using the default."
    assert said.proto.duration >= 10  # read after a page that takes seconds to draw, not gone in 4
    # a refused range is no choice: the axis follows the run
    assert "tr_range_user" not in fresh.session_state or not fresh.session_state["tr_range_user"]
    assert "range" not in fresh.query_params
    # /windows?layer=9&head=99&step=99999 on a run of 3 layers, 6 heads and 120 steps: the page shows what it
    # can (layer 0, no head, the last update) and says so, one notice each; a parameter no page takes (a
    # typo) is said and taken out of the address, not carried along
    at.switch_page(PAGE_FILES["windows"])
    at.query_params.clear()
    at.query_params.update(run="adaptive-s0", layer="9", head="99", step="99999", frun="x")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (typo,) = [t.value for t in at.toast if "frun" in t.value]
    assert typo == "The address's frun=x is not a setting of any page; ignored." and "frun" not in at.query_params
    steps = [int(s) for s in at.select_slider(key="step_picker").options]  # the run's routing updates
    first, last = min(steps), max(steps)
    said = sorted(t.value for t in at.toast if "frun" not in t.value)
    assert said == [
        f"This run has no head 99; showing no head selected (its heads are 0-{N_HEAD - 1}).",
        f"This run has no layer 9; showing layer 0 (its layers are 0-{N_LAYER - 1}).",
        f"This run has no step 99999; showing step {last} (its steps here run {first}-{last}).",
    ], said
    assert (at.selectbox(key="layer_picker").value, at.selectbox(key="head_picker").value) == (0, -1)
    at.run()  # said once: the page now shows what it named
    assert not at.toast


def test_every_parameter_a_page_keeps_in_the_address_is_known_to_the_unknown_parameter_check():
    """Each address.bound / choose / choose_some call of the dashboard names its parameter with a literal that
    address.PAGE_PARAMS holds (else a page's own setting would be refused as unknown)."""
    import ast

    from aah_viz.dashboard import address

    found = set()
    for path in (REPO / "aah_viz" / "dashboard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("bound", "choose", "choose_some")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "address"):  # fmt: skip
                param = node.args[1]
                if isinstance(param, ast.Constant):
                    found.add(param.value)
                else:  # a parameter passed through (configuration.one_configuration's): its default
                    assert isinstance(param, ast.Name) and param.id == "param", (path, ast.dump(param))
    found.add(inspect_default("aah_viz.dashboard.configuration", "one_configuration", "param"))
    assert len(found) > 20 and found <= address.PAGE_PARAMS, sorted(found - address.PAGE_PARAMS)


def inspect_default(module: str, function: str, name: str):
    import importlib
    import inspect

    return inspect.signature(getattr(importlib.import_module(module), function)).parameters[name].default


def test_a_run_being_written_shows_new_rows_and_status_without_a_refresh(tmp_path, monkeypatch):
    root = tmp_path / "live"
    run_dir = make_synthetic_run(root / "live-run", n_layer=2, n_head=4, steps=60, status="running")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    row = at.dataframe[0].value.iloc[0]
    assert row["status"] == "running" and row["last step"] == 59
    w = RunWriter.resume(run_dir)
    w.append("scalars", pd.DataFrame({"step": [80], "layer": [None], "name": ["loss"], "value": [1.25]}))
    w.flush()
    at.run()  # no refresh: the run's files changed, so its cached rows are read again
    row = at.dataframe[0].value.iloc[0]
    assert row["last step"] == 80 and row["last-batch train loss"] == 1.25
    w.close("finished")
    fresh = AppTest.from_file(APP, default_timeout=PATIENCE_S)  # a new tab in the same server process
    fresh.run()
    assert fresh.dataframe[0].value.iloc[0]["status"] == "finished"


def test_a_new_run_appears_without_a_refresh_also_in_a_new_folder(tmp_path, monkeypatch):
    """Discovery runs again when a folder it searched changed: a run added beside the others, and one in a
    folder made since (its parent changed), are rows at the next redraw."""
    root = tmp_path / "grow"
    make_synthetic_run(root / "first", n_layer=2, n_head=4, steps=20)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert list(at.dataframe[0].value["run"]) == ["first"]
    make_synthetic_run(root / "second", n_layer=2, n_head=4, steps=20)
    at.run()
    assert list(at.dataframe[0].value["run"]) == ["first", "second"]
    make_synthetic_run(root / "sweep" / "cell-0", n_layer=2, n_head=4, steps=20)
    at.run()
    assert list(at.dataframe[0].value["run"]) == ["first", "second", "sweep/cell-0"]


REFERENCE = REPO.parent / "shared" / "reference" / "paper"


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the reference's paper/ CSVs are not beside this checkout")
def test_compare_page_shows_the_reference_beside_our_runs(logs, monkeypatch):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(REFERENCE))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    goto(at, "compare")
    figs = {f["layout"]["title"]["text"]: f for f in charts(at)}
    ours = next(f for t, f in figs.items() if t.startswith("setups:"))
    assert not [tr for tr in ours["data"] if tr.get("name") == "reference (published)"], "never on our axes"
    metrics = next(f for t, f in figs.items() if t.startswith("the reference's published values"))
    ref = [tr for tr in metrics["data"] if tr.get("name") == "reference (published)"]
    assert ref, "published values are drawn in their own figure"
    table1 = pd.read_csv(REFERENCE / "aah_v3_4096_table1_training.csv")
    published_acr = dict(zip(table1["method"], table1["ACR_train_proxy"]))
    acr_axis = next(
        k
        for k, v in metrics["layout"].items()
        if k.startswith("yaxis") and v.get("title", {}).get("text") == "ACR (Σ T·w / H·T²)"
    )
    acr_trace = next(tr for tr in ref if tr.get("yaxis", "y") == acr_axis.replace("axis", ""))
    drawn = dict(zip(acr_trace["x"], np.asarray(acr_trace["y"], float)))
    assert drawn["shallow_freeze"] == pytest.approx(published_acr["Shallow freeze"])
    assert drawn["full_adaptive"] == pytest.approx(published_acr["Full adaptive"])
    paper_buckets = next(f for t, f in figs.items() if "512, 1024, 2048, 4096" in t)
    rows = dict(zip(paper_buckets["data"][0]["y"], np.asarray(paper_buckets["data"][0]["z"], float)))
    want = (
        table1.set_index("method")
        .loc["Full adaptive", ["window_frac_512", "window_frac_1024", "window_frac_2048", "window_frac_4096"]]
        .to_numpy(float)
        * 100
    )
    np.testing.assert_allclose(rows["reference: full_adaptive"], want, rtol=1e-6)
    assert at.selectbox(key="cmp_qwen").options
    qwen = next(f for t, f in figs.items() if t.startswith("Qwen3-4B"))
    assert qwen["data"][0]["customdata"].shape == (36, 32)


@pytest.mark.slow
def test_every_page_on_a_paper_shaped_run_sends_under_5_mb_per_figure(tmp_path, monkeypatch):
    root = tmp_path / "paper"
    make_synthetic_run(
        root / "paper-shaped",
        n_layer=24,
        n_head=16,
        steps=10_000,
        windows=(512, 1024, 2048, 4096),
        seq_len=4096,
        flush_every=500,
    )
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    for page in ("hierarchy", "windows", "stability", "probes", "compare", "export"):
        goto(at, page)
        for el in at.get("plotly_chart"):
            assert len(el.proto.spec) < 5_000_000, page


SAMPLE_LOGS = REPO / "sample_logs"


def frontier_sinks(run) -> dict[str, int]:
    """Sink tokens of each configuration of a frontier run, read from its events."""
    rows = [json.loads(d) for d in run.events("inference")["detail"]]
    return {d["configuration"]: int(d.get("sink_tokens") or 0) for d in rows}


@pytest.mark.skipif(not any(SAMPLE_LOGS.glob("**/manifest.json")), reason="no recorded runs in sample_logs/ yet")
def test_every_page_works_on_the_recorded_sample_logs(monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(SAMPLE_LOGS))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception
    # the real model's frontier comes first: every configuration the run recorded, in the table
    assert [t.value for t in at.title] == ["Frontier"]
    frontier = load_run(SAMPLE_LOGS / at.selectbox(key="frontier_run").value)
    recorded = {json.loads(d)["configuration"] for d in frontier.events("inference")["detail"]}
    assert set(at.dataframe[0].value["configuration"]) == recorded and len(recorded) >= 8
    # the table names each point as the chart labels it, sink rows too, and each names one point
    marked = [t for t in charts(at)[0]["data"] if "markers" in t.get("mode", "")]
    labels = {n: c[3] for t in marked for n, c in zip(t["text"], t["customdata"])}
    table = at.dataframe[0].value
    assert dict(zip(table["configuration"], table["on the chart"])) == {n: lab or "–" for n, lab in labels.items()}
    # a label with its mark and colour names one point (an untrained and an adapted controller share a name)
    named = [(c[3], t["marker"]["symbol"], t["marker"]["color"]) for t in marked for c in t["customdata"] if c[3]]
    assert len(named) == len(set(named)), named
    sink_rows = {n for n, k in frontier_sinks(frontier).items() if k}
    assert sink_rows, "the sample frontier has configurations with sink tokens"
    # a configuration with sinks never wears the mark of its family's configurations without them
    plain_marks = {t["marker"]["symbol"] for t in marked if not set(t["text"]) & sink_rows}
    sink_marks = {t["marker"]["symbol"] for t in marked if set(t["text"]) & sink_rows}
    assert sink_marks and not sink_marks & plain_marks, (sink_marks, plain_marks)
    # the Adaptation section: every adapted configuration counted, each recorded curve named, first to last,
    # "no improvement" exactly when the last evaluation is not below the first, and where each is measured
    details = [json.loads(d) for d in frontier.events("inference")["detail"]]
    adapted = [d for d in details if d["family"] == "adapted"]
    with_curve = [d for d in adapted if d.get("adapt_curve")]
    text = "\n".join(m.value for m in at.markdown)
    assert f"{len(with_curve)} of {len(adapted)} adapted configurations recorded" in text
    for d in with_curve:
        first, last = (float(np.exp(d["adapt_curve"][i][1])) for i in (0, -1))
        (line,) = [x for x in text.splitlines() if x.startswith(f"- {d['configuration']}".replace("_", "\\_") + ":")]
        assert f"{first:.2f} → {last:.2f}" in line and ("no improvement" in line) == (last >= first), line
        adapt = load_run(Path(frontier.path).parent / d["adapt_run"]).manifest
        assert f"its {adapt['retrofit']['eval_batches']} evaluation batches" in text
    assert f"the frontier's {len(details[0]['block_nll'])} held-out blocks" in text
    curves = next(
        c for c in charts(at) if "adaptation run's validation" in c["layout"].get("title", {}).get("text", "")
    )
    assert curves["layout"]["showlegend"] is True
    assert [t["name"] for t in curves["data"]] == [d["configuration"] for d in with_curve]
    goto(at, "runs")
    listed = at.dataframe[0].value["run"].tolist()
    assert listed, "the recorded runs are listed"
    if len(listed) > runs_view.DIFF_MAX:  # too many to set side by side: said, and the short runs ticked instead
        assert any(f"Select {runs_view.DIFF_MAX} runs or fewer" in c.value for c in at.caption)
        at.selectbox(key="runs_filter_field").set_value("last step").run()
        at.text_input(key="runs_filter").set_value("<1000").run()
        at.button(key="runs_select_shown").click().run()
        assert not at.exception, [e.value for e in at.exception]
        listed = str(at.query_params["sel"]).strip("[]'").split("~")
        assert 2 <= len(listed) <= runs_view.DIFF_MAX, listed
    # the settings diff of the ticked runs: values every run has first, no field repeating another (config.regime)
    diff = next(df.value for df in at.dataframe if list(df.value.columns)[:1] == ["field"])
    fields = diff["field"].tolist()
    assert "regime" in fields and "config.regime" not in fields and "train.regime" not in fields, fields
    from aah_viz.analysis.manifest_fields import flat_fields

    flat = [flat_fields(load_run(SAMPLE_LOGS / key).manifest) for key in listed]
    assert all(f in run for f in fields for run in flat), fields  # every run has each field shown
    at.toggle(key="runs_diff_partial").set_value(True).run()  # then the fields only some runs have
    more = next(df.value for df in at.dataframe if list(df.value.columns)[:1] == ["field"])["field"].tolist()
    assert set(more) > set(fields) and all(any(f not in run for run in flat) for f in set(more) - set(fields))
    for key in listed:
        run = load_run(SAMPLE_LOGS / key)
        assert run.status in STATUSES
    tables = 0
    for page in ("runs", "hierarchy", "windows", "stability", "probes", "compare", "export"):
        goto(at, page)
        # a missing value reads "–" in every table, never the word "None" (Streamlit's own placeholder)
        assert [df.proto.placeholder for df in at.dataframe] == ["–"] * len(at.dataframe), page
        tables += len(at.dataframe)
    assert tables >= 7
    goto(at, "windows")
    run = load_run(SAMPLE_LOGS / at.selectbox(key="run_picker").value)
    heat = next(f for f in charts(at) if f["layout"]["title"]["text"].startswith("executed windows at step"))
    step = int(heat["layout"]["title"]["text"].rsplit(" ", 1)[1])
    heads = run.table("heads", filters=[("step", "==", step)])
    want = np.full((run.n_layer, run.n_head), -1)
    want[heads["layer"].astype(int), heads["head"].astype(int)] = heads["window"]
    np.testing.assert_array_equal(heat["data"][0]["customdata"], want)
    # a model profiled here (regime full_adaptive, nothing trained): no warning that its routing does not learn
    profiled = "smollm2_wikitext/heads-passkey"
    if (SAMPLE_LOGS / profiled).is_dir():
        at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
        at.query_params["run"] = profiled
        at.run()
        goto(at, "windows")
        assert at.selectbox(key="run_picker").value == profiled and not at.exception
        assert not [w.value for w in at.warning if "does not learn" in w.value]
    # a profile at a longer T than the run's windows reach says so beside its spans
    adapted = load_run(SAMPLE_LOGS / "smollm2_wikitext/frontier-full_adaptive")
    seq = json.loads(adapted.events("profile")["detail"].iloc[-1])["seq_len"]
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["run"] = "smollm2_wikitext/frontier-full_adaptive"
    at.run()
    goto(at, "windows")
    said = [c.value for c in at.caption if c.value.startswith("From aah-viz profile")]
    assert (
        said
        and f"on sequences of {seq} tokens, longer than the largest window here ({max(adapted.windows)})" in said[0]
    )


def test_a_run_that_just_started_shows_on_every_page_without_errors(tmp_path, monkeypatch):
    from aah_viz.runlog import make_manifest

    root = tmp_path / "fresh"
    manifest = make_manifest(
        run_id="fresh",
        regime="full_adaptive",
        seed=3,
        config={},
        windows=[32, 64],
        seq_len=64,
        n_layer=2,
        n_head=4,
        max_depth=2,
    )
    RunWriter.create(root / "fresh", manifest)  # manifest only, no rows yet
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert at.dataframe[0].value.iloc[0]["status"] == "running"
    for page in ("hierarchy", "windows", "stability", "probes", "compare", "export"):
        goto(at, page)
        assert not at.error, (page, [e.value for e in at.error])
        if page == "windows":
            assert any("No head rows recorded yet" in i.value for i in at.info)


@pytest.mark.slow
def test_every_page_on_runs_recorded_by_aah_viz_train(tmp_path, monkeypatch):
    import subprocess
    import sys

    root = tmp_path / "recorded"
    for regime in ("full_adaptive", "full_attention"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "aah_viz",
                "train",
                "--regime",
                regime,
                "--steps",
                "30",
                "--out",
                str(root / regime),
                "--threads",
                "1",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert sorted(at.dataframe[0].value["run"]) == ["full_adaptive", "full_attention"]
    for key in ("full_adaptive", "full_attention"):
        goto(at, "hierarchy")
        at.selectbox(key="run_picker").set_value(key).run()  # the choice is shared by every page
        for page in ("hierarchy", "windows", "stability", "probes", "compare", "export"):
            goto(at, page)
            assert not at.exception and not at.error, (key, page, [e.value for e in at.error])
            if page in ("hierarchy", "windows", "stability"):
                assert at.selectbox(key="run_picker").value == key


# ---------------------------------------------------------------------- selection, header, training, glossary


def test_the_selection_lives_in_the_address_and_follows_the_user_across_pages(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    run = load_run(logs / "nested" / "freeze-s0")
    ups = sorted(int(s) for s in run.table("updates", columns=["step"])["step"].unique())
    wanted = ups[len(ups) // 2]
    at.query_params.update({"run": "nested/freeze-s0", "layer": "2", "head": "4", "step": str(wanted + 1)})
    at.run()
    goto(at, "hierarchy")
    assert at.selectbox(key="run_picker").value == "nested/freeze-s0"
    assert at.selectbox(key="layer_picker").value == 2 and at.selectbox(key="head_picker").value == 4
    assert at.select_slider(key="step_picker").value == wanted  # snapped to the nearest routing update
    fig = charts(at)[0]
    assert fig["layout"]["title"]["text"].startswith(f"layer 2 at step {wanted}")
    nodes = next(t for t in fig["data"] if t.get("name") == "nodes")
    i = list(nodes["text"]).index("L2H4")
    assert nodes["marker"]["line"]["color"][i] == "#000000"  # the selected head is outlined
    # change the layer here: the Windows page and the address follow
    at.selectbox(key="layer_picker").set_value(1).run()
    goto(at, "windows")
    assert at.selectbox(key="layer_picker").value == 1 and at.selectbox(key="head_picker").value == 4
    assert at.select_slider(key="step_picker").value == wanted
    assert at.query_params["layer"] in ("1", ["1"])
    heat = next(f for f in charts(at) if f["layout"]["title"]["text"].startswith("executed windows at step"))
    assert heat["layout"]["title"]["text"] == f"executed windows at step {wanted}"


def test_the_default_run_is_an_adaptive_one(tmp_path, monkeypatch):
    root = tmp_path / "order"
    make_synthetic_run(root / "a-attention", n_layer=2, n_head=4, steps=40, regime="full_attention")
    make_synthetic_run(root / "b-adaptive", n_layer=2, n_head=4, steps=40, regime="full_adaptive")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    goto(at, "windows")
    assert at.selectbox(key="run_picker").value == "b-adaptive"


def test_the_summary_header_warns_about_a_zero_gradient_only_where_there_is_a_controller(tmp_path, monkeypatch):
    root = tmp_path / "ctrl"
    for name, regime in (("adaptive", "full_adaptive"), ("attention", "full_attention")):
        # all steps in warm-up: the synthetic controller gradient is zero throughout (the reference's situation)
        run_dir = make_synthetic_run(root / name, n_layer=2, n_head=4, steps=40, regime=regime, warmup=40)
        grad = load_run(run_dir).scalar("controller_grad_norm")["value"]
        assert len(grad) and (grad == 0).all()
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    goto(at, "windows")
    assert at.selectbox(key="run_picker").value == "adaptive"
    assert "Routing does not learn" in at.warning[0].value  # the first thing on the page
    line = next(c for c in at.caption if "causal-pair coverage" in c.value)  # the run in one line
    assert "controller grad = 0" in line.value
    for term in ("status", "acr", "causal-coverage", "ari", "controller-grad-norm"):  # each links its entry
        assert f"glossary#{term}" in line.help, term
    at.selectbox(key="run_picker").set_value("attention").run()
    assert not any("Routing does not learn" in w.value for w in at.warning)
    assert "controller none" in next(c.value for c in at.caption if "causal-pair coverage" in c.value)


def test_training_page_draws_the_logged_curves_with_tensorboard_smoothing(app, logs):
    goto(app, "training")
    run = load_run(logs / "adaptive-s0")
    loss = run.scalar("loss").sort_values("step")

    def loss_chart():
        return next(f for f in charts(app) if f["layout"]["title"]["text"] == "training loss against step")

    # smoothing 0: the raw values, one line
    app.slider(key="tr_smoothing").set_value(0.0).run()
    fig = loss_chart()
    assert fig["layout"]["hovermode"] == "x unified"  # one hover: every line's value at that x
    (line,) = fig["data"]
    np.testing.assert_allclose(np.asarray(line["y"], float), loss["value"].to_numpy(), rtol=1e-9)
    # smoothing 0.9: TensorBoard's debiased EMA, computed here independently; the raw line faint behind
    app.slider(key="tr_smoothing").set_value(0.9).run()
    raw, shown = loss_chart()["data"]
    values, ema, want = loss["value"].to_numpy(), 0.0, []
    for k, v in enumerate(values, start=1):
        ema = 0.9 * ema + 0.1 * v
        want.append(ema / (1 - 0.9**k))
    np.testing.assert_allclose(np.asarray(shown["y"], float), want, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(raw["y"], float), values, rtol=1e-9)
    assert raw["opacity"] < 0.5 and raw["showlegend"] is False
    # overlay a second run of the same regime: each run its own colour (W&B's way) ...
    app.multiselect(key="tr_runs").set_value(["adaptive-s0", "adaptive-s1"]).run()

    def lines():
        return {t["name"]: t["line"] for t in loss_chart()["data"] if t.get("showlegend") is not False}

    a, b = lines()["full_adaptive s0 (adaptive-s0)"], lines()["full_adaptive s1 (adaptive-s1)"]
    assert a["color"] != b["color"]
    # the stacked charts' plot areas line up (one step, one x position): the same left margin whatever the
    # tick labels, and the legend under each chart, never beside it
    app.multiselect(key="tr_scalars").set_value(["loss", "val_loss", "lr"]).run()
    looks = {(c["layout"]["margin"]["l"], c["layout"]["margin"]["r"], c["layout"]["legend"]["orientation"],
              c["layout"]["yaxis"]["automargin"]) for c in charts(app)}  # fmt: skip
    assert len(charts(app)) == 3 and len(looks) == 1 and next(iter(looks))[2:] == ("h", False), looks
    # ... or, asked for, the regime's colour with a dash a seed, kept in the address
    app.selectbox(key="tr_colour").set_value("regime").run()
    a, b = lines()["full_adaptive s0 (adaptive-s0)"], lines()["full_adaptive s1 (adaptive-s1)"]
    assert a["color"] == b["color"] and a["dash"] != b["dash"]
    assert app.query_params.get("colour") in ("regime", ["regime"])
    app.selectbox(key="tr_colour").set_value("run").run()
    # against tokens: the running total of tokens/s x step time, computed here from the run's own rows
    app.slider(key="tr_smoothing").set_value(0.0).run()
    app.radio(key="tr_x").set_value("tokens").run()
    fig = next(f for f in charts(app) if f["layout"]["title"]["text"] == "training loss against tokens")
    line = next(t for t in fig["data"] if t["name"] == "full_adaptive s0 (adaptive-s0)")
    rate = run.scalar("tokens_per_s").sort_values("step")["value"].to_numpy()
    secs = run.scalar("step_time_s").sort_values("step")["value"].to_numpy()
    np.testing.assert_allclose(np.asarray(line["x"], float), np.cumsum(rate * secs), rtol=1e-9)


def test_glossary_defines_every_term_the_tooltips_link_to(app):
    from aah_viz.dashboard.glossary import TERMS

    goto(app, "glossary")
    heads = [h.value for h in app.subheader]
    assert heads == [name for name, _ in TERMS.values()]
    # the words the pages print without a definition beside them (issue 42's walk) have an entry
    for words in ("% of slots", "offset baseline", "needed window", "NMI and V-measure", "Pareto front", "sink tokens"):
        assert words in heads, words


def test_every_chart_offers_its_data_and_images_for_download(app):
    goto(app, "windows")
    buttons = {b.key for b in app.get("download_button")}
    for key in ("win_heatmap", "win_branch", "win_timeline", "win_coverage"):
        assert {f"{key}_dl_{fmt}" for fmt in ("png", "svg", "pdf", "csv")} <= buttons, key


def test_the_play_control_steps_through_the_routing_updates(app):
    goto(app, "hierarchy")
    options = [int(s) for s in app.select_slider(key="step_picker").options]
    app.select_slider(key="step_picker").set_value(options[0]).run()
    app.toggle(key="hier_play").set_value(True).run()  # one tick per run of the page
    assert app.select_slider(key="step_picker").value == options[1]
    app.run()
    assert app.select_slider(key="step_picker").value == options[2]
    # at the last update it stops by itself
    app.toggle(key="hier_play").set_value(False).run()
    app.select_slider(key="step_picker").set_value(options[-1]).run()
    app.toggle(key="hier_play").set_value(True).run()
    app.run()
    assert not app.exception and app.toggle(key="hier_play").value is False
    assert app.select_slider(key="step_picker").value == options[-1]


CRAFTED = "[Session expired](https://evil.example/login) ![b](https://evil.example/t.png)"


def _rendered(markdown_source: str) -> str:
    """HTML of a Markdown string by an independent CommonMark renderer (markdown-it-py)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").render(markdown_source)


def test_crafted_text_renders_as_text_and_damage_is_shown_on_every_page(tmp_path, monkeypatch):
    from test_runlog_truth import set_aside_one_heads_segment  # tests/ is on sys.path under pytest

    root = tmp_path / "logs"
    run = make_synthetic_run(root / "dmg_*run*", n_layer=2, n_head=4, steps=20, flush_every=5)
    set_aside_one_heads_segment(run)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.query_params["run"] = CRAFTED
    at.run()
    echoed = [e.value for e in at.error if "ignored" in e.value]
    assert len(echoed) == 1
    html = _rendered(echoed[0])
    assert "<a" not in html and "<img" not in html and "<em" not in html
    assert "https://" not in echoed[0]  # no bare URL for a GFM autolink to find
    # the crafted value itself, shown literally (word joiners break the patterns autolinking looks for)
    assert CRAFTED in html.replace("&quot;", '"').replace("\u2060", "")
    for page in ("training", "windows", "hierarchy", "stability", "probes", "compare", "export"):
        at.switch_page(PAGE_FILES[page]).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        shown = [_rendered(w.value) for w in at.warning]
        assert any("set aside" in w for w in shown), (page, shown)
        assert any("5 steps missing (5-9)" in w for w in shown), (page, shown)
        if page in ("compare", "export"):  # pages of several runs name the damaged one
            assert any("run dmg_*run*:" in w for w in shown), (page, shown)
    # the Runs page names the run in its warnings: the file name's asterisks stay asterisks
    at.switch_page(PAGE_FILES["runs"]).run()
    named = [_rendered(w.value) for w in at.warning if "dmg" in w.value]
    assert named and all("Run dmg_*run*" in w and "<em>" not in w for w in named)


def test_the_frontier_page_opens_first_on_a_frontier_and_draws_every_configuration(monkeypatch, tmp_path):
    """With a frontier run under the logs root the dashboard opens on the Frontier page: one point per
    configuration at its ACR and perplexity (exp of the mean block loss, recomputed here), the table
    beside it; without one, the Runs page comes first and Frontier says how to make one."""
    from aah_viz.samples import make_synthetic_frontier_run

    root = tmp_path / "logs"
    make_synthetic_run(root / "adaptive-s0", n_layer=2, n_head=4, steps=20, regime="full_adaptive", seed=0)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert [t.value for t in at.title] == ["Runs"]
    goto(at, "frontier")
    assert "aah-viz frontier" in at.info[0].value

    run = load_run(make_synthetic_frontier_run(root / "fr", seed=1))
    st.cache_data.clear()  # discovery is cached per 5-second slice; a new session must see the new run now
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Frontier"]
    want, speeds = {}, {}
    for detail in run.events("inference")["detail"]:
        d = json.loads(detail)
        nll = np.asarray(d["block_nll"], dtype=float)
        want[d["configuration"]] = (d["acr"], float(np.exp(nll.sum() / (d["tokens_per_block"] * len(nll)))))
        speeds[d["configuration"]] = (d["speed_vs_unpatched"]["median"], *d["speed_vs_unpatched"]["ci95"])
    points = {}
    for trace in charts(at)[0]["data"]:
        if "markers" in trace.get("mode", ""):
            for name, x, y in zip(trace["text"], trace["x"], trace["y"]):
                points[name] = (x, y)
    assert points.keys() == want.keys()
    for name, (acr, ppl) in want.items():
        assert points[name] == pytest.approx((acr, ppl), rel=1e-9)
    table = at.dataframe[0].value
    assert sorted(table["configuration"]) == sorted(want)
    assert {"frontier_data_csv", "frontier_data_parquet"} <= {b.key for b in at.get("download_button")}
    # each speed with the interval its pairs give, and the run's own warning about how few they are
    shown_speed = table.set_index("configuration")[["speed vs unpatched", "speed low (95%)", "speed high (95%)"]]
    assert sorted(shown_speed.index) == sorted(speeds)
    for name, row in shown_speed.iterrows():
        assert tuple(row) == pytest.approx(speeds[name]), name
    assert any("from 2 timing pairs (the run warns: only 2 pairs (at least 9 recommended))" in c.value
               for c in at.caption)  # fmt: skip
    assert "passkey retrieved" not in table  # no questions asked in this frontier: no empty column
    # the table names each point as the chart labels it (the chart's names and the table's agree)
    labels = {n: lab for trace in charts(at)[0]["data"] if "markers" in trace.get("mode", "")
              for n, lab in zip(trace["text"], [c[3] for c in trace["customdata"]])}  # fmt: skip
    for name, on_chart in zip(table["configuration"], table["on the chart"]):
        assert on_chart == (labels[name] or "–"), (name, on_chart)
    first_spec = at.get("plotly_chart")[0].proto.spec
    # a second frontier: the picker travels in the address, and a link opens that frontier
    asked = load_run(make_synthetic_frontier_run(root / "fr2", seed=2, retrieval=True)).events("retrieval")
    # fr2 stopped before its plan was done: its manifest plans one configuration more than it evaluated
    m = json.loads((root / "fr2" / "manifest.json").read_text())
    m["frontier"] = {"configurations": [*want, "grouping_off_adapted_sink4"]}
    (root / "fr2" / "manifest.json").write_text(json.dumps(m))
    assert not [w for w in at.warning if "planned" in w.value]  # fr has no plan left undone
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.selectbox(key="frontier_run").set_value("fr2").run()
    assert not at.exception and at.query_params["frontier"] == "fr2"
    linked = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    linked.query_params["frontier"] = "fr2"
    linked.run()
    assert linked.selectbox(key="frontier_run").value == "fr2"
    assert linked.get("plotly_chart")[0].proto.spec == at.get("plotly_chart")[0].proto.spec  # fr2's figure
    assert linked.get("plotly_chart")[0].proto.spec != first_spec
    undone = [w.value.replace("\\_", "_") for w in linked.warning if "planned" in w.value]  # markdown escapes
    assert len(undone) == 1 and undone[0].startswith(f"{len(want)} of {len(want) + 1} planned configurations")
    assert "not yet: grouping_off_adapted_sink4." in undone[0]
    answered = {d["configuration"]: d["correct"] / d["n"] for d in map(json.loads, asked["detail"])}
    shown = linked.dataframe[0].value.set_index("configuration")["passkey retrieved"]
    assert shown.to_dict() == pytest.approx(answered)


def test_a_fresh_server_opened_on_a_page_address_runs_the_entry_point(logs, monkeypatch, tmp_path):
    """The entry point ``aah-viz dashboard`` runs is the package's app.py; a first request for a page's
    address must still go through it (state, sidebar, navigation), not run the page file alone as
    Streamlit does for a ``pages/`` folder beside the main script."""
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(REPO / "aah_viz" / "dashboard" / "app.py"), default_timeout=PATIENCE_S)
    at.switch_page(PAGE_FILES["windows"]).run()  # the first run of this app is for the Windows page
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Windows"]
    assert any("Logs root" in c.value for c in at.sidebar.caption)  # the entry point's sidebar ran


@pytest.mark.parametrize(
    ("page", "title_start"), [("windows", "executed windows at step"), ("hierarchy", "layer 0 at step")]
)
def test_the_step_follows_a_growing_run_until_the_user_moves_it(monkeypatch, tmp_path, page, title_start):
    """A live run's Windows and Hierarchy pages show its newest routing update, and keep no step in the
    address, until the user picks one: then that step stays, in the address too, while the run grows.
    Training's scalars likewise: opened before the first evaluation, they take the validation loss in once
    it is logged."""
    logs = tmp_path / "logs"
    evals = dict(eval_interval=50)  # no validation loss in the first 40 steps; at step 49 and 99 later
    run = make_synthetic_run(logs / "live", n_layer=2, n_head=4, steps=40, seed=3, status="running", **evals)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    goto(at, page)

    def updates() -> list[int]:
        ups = load_run(run).table("events", filters=[("kind", "==", "routing_update")])
        return sorted(int(s) for s in ups["step"].unique())

    def heat_step() -> int:
        (title,) = [t for t in chart_titles(at) if t.startswith(title_start)]
        return int(title[len(title_start) :].split()[0])

    first = updates()
    assert heat_step() == first[-1] and "step" not in at.query_params
    goto(at, "training")  # before the first evaluation: training loss only, and nothing in the address
    assert at.multiselect(key="tr_scalars").value == ["loss"] and "scalars" not in at.query_params
    goto(at, page)
    # the run grows: the page follows it
    make_synthetic_run(run, n_layer=2, n_head=4, steps=90, seed=3, status="running", overwrite=True, **evals)
    at.run()
    assert updates()[-1] > first[-1]
    assert heat_step() == updates()[-1] and "step" not in at.query_params
    # the browser echoes the newest update of an earlier draw (a rerun cut that draw short): not a choice,
    # the page goes on following (live, this froze Hierarchy at its first update and wrote it to the address)
    at.select_slider(key="step_picker").set_value(first[-1]).run()
    assert heat_step() == updates()[-1] and "step" not in at.query_params
    # the user picks an earlier update: it stays while the run grows further
    chosen = updates()[1]
    at.select_slider(key="step_picker").set_value(chosen).run()
    assert heat_step() == chosen and at.query_params.get("step") in (str(chosen), [str(chosen)])
    make_synthetic_run(run, n_layer=2, n_head=4, steps=140, seed=3, status="running", overwrite=True, **evals)
    at.run()
    assert heat_step() == chosen and at.query_params.get("step") in (str(chosen), [str(chosen)])
    # Training again, evaluated by now: the default takes the validation loss in, still out of the address
    goto(at, "training")
    assert at.multiselect(key="tr_scalars").value == ["loss", "val_loss"] and "scalars" not in at.query_params
    at.multiselect(key="tr_scalars").set_value(["val_loss"]).run()  # the user's choice: kept, in the address
    assert at.query_params.get("scalars") in ("val_loss", ["val_loss"])
    make_synthetic_run(run, n_layer=2, n_head=4, steps=160, seed=3, status="running", overwrite=True, **evals)
    at.run()
    assert at.multiselect(key="tr_scalars").value == ["val_loss"]


def test_windows_compares_the_runs_of_its_own_configuration_by_default(monkeypatch, tmp_path):
    logs = tmp_path / "logs"
    runs = (("a0", 64, 60, 0), ("a0-again", 64, 60, 0), ("a1", 64, 60, 1), ("long", 64, 90, 2), ("t128", 128, 60, 3))
    for name, seq_len, steps, seed in runs:
        make_synthetic_run(logs / name, n_layer=2, n_head=4, steps=steps, seq_len=seq_len, seed=seed)
    # another regime of the same configuration, whose name sorts first: not a seed of a0, not in its default
    make_synthetic_run(logs / "_other", n_layer=2, n_head=4, steps=60, seq_len=64, seed=0, regime="shallow_freeze")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["windows"]).run()
    at.selectbox(key="run_picker").set_value("a0").run()
    assert not at.exception, [e.value for e in at.exception]
    pick = at.multiselect(key="win_compare_pick")
    assert sorted(pick.value) == ["a0", "a0-again", "a1"]  # another T or another length of training is not a seed
    assert not [w for w in at.warning if "configurations" in w.value]
    # two runs of one regime and seed: each its own colour and name in the coverage figure, the small multiples
    coverage = next(c for c in charts(at) if c["layout"]["title"]["text"].startswith("ACR, causal-pair"))
    named = {t["name"]: t["line"]["color"] for t in coverage["data"] if t.get("showlegend") is not False}
    assert len(named) == 3 and len(set(named.values())) == 3, named
    assert {"a0", "a0-again", "a1"} <= set(chart_titles(at))
    pick.set_value(["a0", "t128"]).run()
    (said,) = [w.value for w in at.warning if "configurations" in w.value]
    assert "These runs are of 2 configurations" in said and "T = 128" in said
    # runs ticked on the Runs page (here by a copied link): the default compares them, other seeds or not
    ticked = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    ticked.query_params.update(sel="a0~_other~t128", run="a0")
    ticked.run()
    goto(ticked, "windows")
    assert ticked.multiselect(key="win_compare_pick").value == ["a0", "_other"]  # t128: another configuration


def test_an_empty_logs_root_says_so_on_the_pages_of_several_runs(tmp_path, monkeypatch):
    """No run under the root: Training, Compare and Export say so and how to record one (issue 42); none sends
    the user to pick runs on a Runs page that has none."""
    root = tmp_path / "empty"
    root.mkdir()
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    for page in ("training", "compare", "export"):
        goto(at, page)
        said = " ".join(i.value.replace("\\", "") for i in at.info)
        assert f"No readable run under {root}" in said and "aah-viz train --out" in said, (page, said)
        assert "Runs page" not in said, (page, said)


def test_one_number_format_a_column_reads_every_kind_of_float_column():
    """Fractions get fixed decimals (more where the smallest would read 0.000), whole numbers stay whole, a
    pandas Float64 column with missing values is read too, and text is left alone."""
    from aah_viz.dashboard.common import number_formats

    frame = pd.DataFrame(
        {
            "split-half": [0.481, 0.6739, 0.811],
            "p": [0.0005, 0.2, np.nan],
            "step": [1.0, 250.0, np.nan],
            "share": pd.array([0.5, None, 0.25], dtype="Float64"),
            "name": ["a", "b", "c"],
        }
    )
    formats = number_formats(frame)
    assert formats == {"split-half": "%.3f", "p": "%.5f", "step": "%d", "share": "%.3f"}
    assert {formats["split-half"] % v for v in frame["split-half"]} == {"0.481", "0.674", "0.811"}
    assert formats["p"] % 0.0005 == "0.00050"
