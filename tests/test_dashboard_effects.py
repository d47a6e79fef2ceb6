"""The Effects page (``views/effects``) through Streamlit's test runner on real sweeps: the bundled half
fraction (a copy of ``sample_logs/sweep_ablation_tiny``), the same sweep cut to one seed, and a full 2 x 2
factorial of generated runs. Its numbers are checked against ``aah-viz effects``'s CSV (the command run in
the test) and against means computed here from the runs' own validation losses."""

from __future__ import annotations

import io
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S, TEST_S

from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.dashboard.labels import metric_words
from aah_viz.export.effects import ALIASED, ONE_SEED, TOO_FEW_SEEDS
from aah_viz.figures.payload import figure_data
from aah_viz.runlog import load_run
from aah_viz.samples import make_synthetic_frontier_run, make_synthetic_run
from aah_viz.sweep.design import parse_design, run_name
from aah_viz.sweep.plan import recorded_design, write_design_record

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
SAMPLE = REPO / "sample_logs" / "sweep_ablation_tiny"

pytestmark = [
    pytest.mark.timeout(TEST_S),
    pytest.mark.skipif(not (SAMPLE / ".sweep" / "design.json").is_file(), reason="the sample sweep is not here"),
]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A logs root holding three sweeps and a run that belongs to none."""
    root = tmp_path_factory.mktemp("effects-logs")
    shutil.copytree(SAMPLE, root / "ablation")
    # the same sweep with seed 0 only: four cells, one run each, a saturated half fraction
    design = recorded_design(SAMPLE)
    one = parse_design(_source(design, seeds=[0]))
    for cell in one.cells:
        shutil.copytree(SAMPLE / run_name(cell, 0), root / "oneseed" / run_name(cell, 0))
    write_design_record(one, root / "oneseed")
    # a full 2 x 2 factorial over two seeds, every run its own generated losses
    full = parse_design(
        {"name": "full", "seeds": [0, 1], "fixed": {"preset": "tiny"},
         "factors": {"grouping": ["feature", "random"], "scoring": ["joint", "independent"]}}
    )  # fmt: skip
    for i, (cell, seed) in enumerate(full.trials()):
        make_synthetic_run(
            root / "full" / run_name(cell, seed), n_layer=2, n_head=4, steps=40, eval_interval=10, seed=7 + 3 * i
        )
    write_design_record(full, root / "full")
    # three factors in full over one seed: the residual is the three-way interaction's alone
    three = parse_design(
        {"name": "three", "seeds": [0], "fixed": {"preset": "tiny"},
         "factors": {"grouping": ["feature", "random"], "scoring": ["joint", "independent"],
                     "feature_ema": ["on", "off"]}}
    )  # fmt: skip
    for i, (cell, seed) in enumerate(three.trials()):
        make_synthetic_run(
            root / "three" / run_name(cell, seed), n_layer=2, n_head=4, steps=40, eval_interval=10, seed=50 + i
        )
    write_design_record(three, root / "three")
    # a frontier sweep: each run's table of configurations, its metrics named COLUMN@CONFIGURATION
    frontier = parse_design(
        {"name": "frontier", "command": "frontier", "seeds": [0, 1], "fixed": {"model": "m", "data": "t.txt"},
         "factors": {"grouping": ["feature", "random"]}}
    )  # fmt: skip
    for i, (cell, seed) in enumerate(frontier.trials()):
        make_synthetic_frontier_run(root / "frontier" / run_name(cell, seed), seed=90 + i)
    write_design_record(frontier, root / "frontier")
    make_synthetic_run(root / "loose-run", n_layer=2, n_head=4, steps=20, seed=1)
    return root


def _source(design, *, seeds) -> dict:
    """The design-file data of a parsed design (its factors' levels as tables of settings)."""
    data = design.canonical()
    return {
        "name": design.name,
        "command": data["command"],
        "seeds": seeds,
        "fixed": data["fixed"],
        "fraction": data["fraction"],
        "factors": data["factors"],
    }


@pytest.fixture
def app(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page(PAGE_FILES["effects"]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def cli_table(logs: Path, capsys, *args) -> pd.DataFrame:
    from aah_viz.cli import main

    assert main(["effects", str(logs), "--metric", "val_loss,acr", "--format", "csv", *args]) == 0
    return pd.read_csv(io.StringIO(capsys.readouterr().out.split("\n\n")[0]))


def charts(at: AppTest) -> list[dict]:
    return [figure_data(el.proto.spec) for el in at.get("plotly_chart")]


def axis_title(chart: dict, axis: str) -> str:
    return chart["layout"].get(axis, {}).get("title", {}).get("text", "")


def interaction_plots(at: AppTest, metric: str) -> list[dict]:
    return [c for c in charts(at) if axis_title(c, "yaxis") == f"mean final {metric_words(metric)}"]


def forests(at: AppTest) -> dict[str, dict]:
    """The forest charts by the metric's name (their x axis says which, in words)."""
    words = {metric_words(m): m for m in at.multiselect(key="effects_metrics").value}
    out = {}
    for c in charts(at):
        title = axis_title(c, "xaxis")
        if title.startswith("effect on "):
            out[words[title.removeprefix("effect on ").split(" (level")[0]]] = c
    return out


def forest_points(chart: dict) -> pd.DataFrame:
    rows = []
    for trace in chart["data"]:
        err = trace["error_x"]
        for x, y, plus, minus in zip(trace["x"], trace["y"], err["array"], err["arrayminus"]):
            rows.append({"label": y, "effect": x, "ci_low": x - minus, "ci_high": x + plus})
    return pd.DataFrame(rows).set_index("label")


def choose_sweep(at: AppTest, name: str) -> AppTest:
    at.selectbox(key="effects_sweep").set_value(name).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_lists_the_sweeps_and_draws_the_commands_numbers(app, logs, capsys):
    # the sweeps, and not loose-run
    assert app.selectbox(key="effects_sweep").options == ["ablation", "frontier", "full", "oneseed", "three"]
    cli = cli_table(logs / "ablation", capsys)
    shown = app.dataframe[0].value
    pd.testing.assert_frame_equal(
        shown.reset_index(drop=True)[list(cli.columns)].fillna({"note": ""}),
        cli.fillna({"note": ""}),
        check_dtype=False,
        rtol=1e-12,
    )
    found = forests(app)
    assert set(found) == {"val_loss", "acr"}
    # the metrics in words on screen; the tables and the address keep their names
    assert app.multiselect(key="effects_metrics").options[:2] == ["validation loss", "validation perplexity"]
    assert [h.value for h in app.subheader][:2] == ["Final validation loss", "Final ACR"]
    assert axis_title(found["val_loss"], "xaxis") == "effect on validation loss (level minus reference level)"
    assert found["val_loss"]["layout"]["title"]["text"].startswith("Effects on the final validation loss")
    titles = json.dumps([c["layout"] for c in charts(app)])
    assert "val_loss" not in titles and "final acr" not in titles
    for metric, chart in found.items():
        points = forest_points(chart)
        rows = cli[(cli["metric"] == metric) & cli["effect"].notna()]
        assert len(points) == len(rows) == 3  # the three main effects; the interactions are aliased
        for row in rows.itertuples():
            point = points.loc[f"{row.factors}: {row.levels}"]
            assert point["effect"] == pytest.approx(row.effect, rel=1e-9)
            assert point["ci_low"] == pytest.approx(row.ci_low, rel=1e-9)
            assert point["ci_high"] == pytest.approx(row.ci_high, rel=1e-9)
    assert (cli.loc[cli["term"] == "interaction", "note"] == ALIASED).all()
    assert any("aliased in this fraction" in c.value for c in app.caption)
    assert not any("Too few seeds" in w.value for w in app.warning)


def test_cells_and_interaction_plots_equal_means_of_the_runs(app, logs, capsys):
    cells_cli = cli_table(logs / "ablation", capsys, "--table", "cells")
    pd.testing.assert_frame_equal(
        app.dataframe[1].value.reset_index(drop=True), cells_cli, check_dtype=False, rtol=1e-12
    )
    # the final validation loss of every run, read here from its scalars, averaged by cell then by pair
    rows = []
    for run_dir in sorted((logs / "ablation").glob("*__seed-*")):
        levels = dict(part.split("-", 1) for part in run_dir.name.split("__")[:-1])
        loss = load_run(run_dir).scalar("val_loss").sort_values("step")["value"].iloc[-1]
        rows.append({**levels, "y": float(loss)})
    runs = pd.DataFrame(rows)
    cells = runs.groupby(["grouping", "scoring", "feature_ema"], as_index=False)["y"].mean()
    ix = interaction_plots(app, "val_loss")
    assert len(ix) == 3  # one plot a pair of three factors
    for chart in ix:
        f = axis_title(chart, "xaxis")
        for trace in chart["data"]:
            g, level = trace["name"].split(" = ")
            for x, y in zip(trace["x"], trace["y"]):
                expected = cells[(cells[f] == x) & (cells[g] == level)]["y"].mean()
                assert y == pytest.approx(expected, rel=1e-12)


def test_one_seed_a_cell_says_there_is_no_interval(app, logs, capsys):
    choose_sweep(app, "oneseed")
    assert app.query_params.get("sweep") == "oneseed"  # a copied link keeps the sweep
    cli = cli_table(logs / "oneseed", capsys)
    assert (cli.loc[cli["term"] == "main", "note"] == TOO_FEW_SEEDS).all()
    warnings = [w.value for w in app.warning]
    assert len(warnings) == 2 and all(w.startswith("Too few seeds for an interval") for w in warnings)
    for metric, chart in forests(app).items():
        points = forest_points(chart)
        expected = cli[(cli["metric"] == metric) & (cli["term"] == "main")]
        assert list(points["effect"]) == pytest.approx(list(expected["effect"]), rel=1e-9)
        assert (points["ci_low"] == points["effect"]).all()  # no bar drawn
        assert chart["data"][0]["name"] == "no interval (too few seeds)"


def test_one_seed_of_a_full_factorial_says_what_its_interval_rests_on(app, logs, capsys):
    choose_sweep(app, "three")
    cli = cli_table(logs / "three", capsys)
    assert (cli["note"] == ONE_SEED).all() and (cli["df"] == 1).all()
    warnings = [w.value for w in app.warning]
    assert len(warnings) == 2 and all(w.startswith("One seed a cell: the intervals below rest on") for w in warnings)
    points = forest_points(forests(app)["val_loss"])
    assert len(points) == 6 and np.isfinite(points["ci_low"]).all()  # 3 main effects, 3 interactions


def test_a_full_factorial_shows_its_interaction_as_a_difference_of_differences(app, logs, capsys):
    choose_sweep(app, "full")
    assert not app.warning
    runs = pd.DataFrame(
        [
            {**dict(part.split("-", 1) for part in d.name.split("__")[:-1]),
             "y": float(load_run(d).scalar("val_loss").sort_values("step")["value"].iloc[-1])}
            for d in sorted((logs / "full").glob("*__seed-*"))
        ]
    )  # fmt: skip
    m = runs.groupby(["grouping", "scoring"])["y"].mean()
    hand = m["random", "independent"] - m["random", "joint"] - m["feature", "independent"] + m["feature", "joint"]
    points = forest_points(forests(app)["val_loss"])
    assert points.loc["grouping x scoring: random x independent", "effect"] == pytest.approx(hand, rel=1e-9)
    main_hand = (m["random"].mean() - m["feature"].mean(), m[:, "independent"].mean() - m[:, "joint"].mean())
    assert points.loc["grouping: random vs feature", "effect"] == pytest.approx(main_hand[0], rel=1e-9)
    assert points.loc["scoring: independent vs joint", "effect"] == pytest.approx(main_hand[1], rel=1e-9)
    cli = cli_table(logs / "full", capsys).set_index(["metric", "factors"])
    lo, hi = cli.loc[("val_loss", "grouping x scoring"), ["ci_low", "ci_high"]]
    assert points.loc["grouping x scoring: random x independent", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        [lo, hi], rel=1e-9
    )
    ix = interaction_plots(app, "val_loss")
    assert len(ix) == 1
    lines = {t["name"]: dict(zip(t["x"], t["y"])) for t in ix[0]["data"]}
    for g, a in itertools.product(["joint", "independent"], ["feature", "random"]):
        assert lines[f"scoring = {g}"][a] == pytest.approx(m[a, g], rel=1e-12)
    assert np.isfinite(points["ci_low"]).all()


def test_a_frontier_sweep_offers_its_configurations_and_draws_the_commands_numbers(app, logs, capsys):
    from aah_viz.cli import main

    choose_sweep(app, "frontier")
    box = app.multiselect(key="effects_metrics")
    table = load_run(logs / "frontier" / "grouping-feature__seed-0").events("inference")
    names = [json.loads(d)["configuration"] for d in table["detail"]]
    assert box.options == [f"perplexity, {n}" for n in names] and box.value == [f"ppl@{n}" for n in names[:2]]
    metric = "ppl@sliding_window_8"
    box.set_value([metric]).run()
    assert main(["effects", str(logs / "frontier"), "--metric", metric, "--format", "csv"]) == 0
    cli = pd.read_csv(io.StringIO(capsys.readouterr().out.split("\n\n")[0]))
    point = forest_points(forests(app)[metric]).iloc[0]
    assert point["effect"] == pytest.approx(cli["effect"].iloc[0], rel=1e-9)


def test_a_copied_address_opens_its_sweep_and_metrics(logs, monkeypatch, tmp_path):
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.query_params.update({"sweep": "full", "emetric": "acr~val_ppl"})
    at.switch_page(PAGE_FILES["effects"]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="effects_sweep").value == "full"
    assert at.multiselect(key="effects_metrics").value == ["acr", "val_ppl"]
    assert set(forests(at)) == {"acr", "val_ppl"}


def test_a_root_without_a_sweep_says_how_to_make_one(tmp_path, monkeypatch):
    make_synthetic_run(tmp_path / "logs" / "a-run", n_layer=2, n_head=4, steps=20, seed=2)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(tmp_path / "logs"))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["effects"]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("No sweep under this logs root" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_the_pages_numbers_and_figures_come_without_torch(app, logs):
    """The page's whole computation (the design record, the runs' metrics, statsmodels' fit, the forest)
    in a process where torch looks uninstalled gives the effects the page shows."""
    import subprocess
    import sys

    from test_light_side import HIDE_TORCH  # tests/ is on sys.path under pytest

    code = HIDE_TORCH + (
        "import json, sys\n"
        "from aah_viz.export.design_effects import design_runs_frame, effects_table\n"
        "from aah_viz.figures.effects import forest_figure, interaction_figure\n"
        "from aah_viz.export.effects import interaction_means\n"
        "from aah_viz.sweep.plan import recorded_design\n"
        "d = recorded_design(sys.argv[1])\n"
        "frame, notes = design_runs_frame(sys.argv[1], d, ['val_loss', 'acr'])\n"
        "t = effects_table(frame, d, ['val_loss', 'acr'])\n"
        "forest_figure(t.df[t.df['metric'] == 'acr'], 'acr')\n"
        "levels = {f.name: list(f.levels) for f in d.factors}\n"
        "pair = ('grouping', 'scoring')\n"
        "interaction_figure(interaction_means(frame, levels, pair, 'acr'), pair, 'acr')\n"
        "print(json.dumps(t.df['effect'].tolist()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(logs / "ablation")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = app.dataframe[0].value["effect"].tolist()
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == pytest.approx(shown, nan_ok=True, rel=1e-12)
