"""Every registered figure builds from real run directories; its data and axis titles are right."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from aah_viz.errors import AAHVizError
from aah_viz.figures import FIGURE_KINDS, build_figure
from aah_viz.figures.payload import figure_data, payload_bytes
from aah_viz.runlog import RunWriter, load_run
from aah_viz.samples import make_synthetic_run

REQUIRED_KINDS = {
    "hierarchy",
    "window_heatmap",
    "head_timeline",
    "branch_bars",
    "coverage_over_training",
    "stability",
    "controller_health",
    "probe_heatmap",
    "window_vs_probe",
}


def probe_value(layer: int, head: int) -> float:
    """The rule of the synthetic ``syntax score_minus_baseline`` rows (negative for layer 0)."""
    return (layer - 1) / 10 + head / 100


def add_probe_tables(run_dir, n_layer: int, n_head: int, step: int) -> None:
    """Probe rows as ``aah-viz probe`` / ``compare`` write them (values follow known rules): head
    (l, h) puts all its attention in distance bucket (l + h) % 10; layer 0's comparison is degenerate."""
    from aah_viz.probes.distance import distance_labels

    run = load_run(run_dir)
    heads = run.table("heads", filters=[("step", "==", step)])
    w = RunWriter.resume(run_dir)
    rows = []
    labels = distance_labels()
    for rec in heads.itertuples():
        base = dict(step=step, layer=rec.layer, head=rec.head, window=rec.window)
        rows.append(dict(base, probe="syntax", metric="uas", value=rec.layer / 10 + rec.head / 100))
        rows.append(dict(base, probe="syntax", metric="score_minus_baseline", value=probe_value(rec.layer, rec.head)))
        rows.append(dict(base, probe="coref", metric="accuracy", value=0.5))
        rows.append(dict(base, probe="sufficiency", metric="syntax_links_beyond_window", value=0.1))
        for i, label in enumerate(labels):
            value = 1.0 if i == (rec.layer + rec.head) % len(labels) else 0.0
            rows.append(dict(base, probe="distance", metric=f"mass:{label}", value=value))
        rows.append(dict(base, probe="distance", metric="forward", value=0.0))
    w.append("probe_heads", pd.DataFrame(rows))
    w.append(
        "probe_relations",
        pd.DataFrame(
            {
                "step": [step, step],
                "relation": ["det", "amod"],
                "count": [120, 80],
                "best_layer": [1, 0],
                "best_head": [2, 3],
                "direction": ["dep2head", "head2dep"],
                "best_acc": [0.8, 0.6],
                "baseline_offset": [-1, 1],
                "baseline_acc": [0.5, 0.62],
                "delta": [0.3, -0.02],
                "delta_ci_low": [0.25, -0.05],
                "delta_ci_high": [0.35, 0.01],
                "positional": [False, True],
                "positional_offset": [-1, 1],
                "positional_share": [0.3, 0.9],
                "n_sentences": [60, 50],
                "labels": ["universal"] * 2,
                "context": ["sentence"] * 2,
            }
        ),
    )
    buckets = [("1-3", 1, 3), ("4-7", 4, 7), ("8+", 8, None)]
    coref = []
    for layer in range(n_layer):
        for head in range(n_head):
            # each distance bucket of 10 antecedents, then all 30 together
            parts = [(b, lo, hi, 10, (layer + head + i) / 100) for i, (b, lo, hi) in enumerate(buckets)]
            for b, lo, hi, count, accuracy in [*parts, ("all", 1, None, 30, (layer + head) / 100)]:
                coref.append(dict(step=step, layer=layer, head=head, method="head", bucket=b, bucket_lo=lo,
                                  bucket_hi=hi, correct=0, count=count, accuracy=accuracy))  # fmt: skip
    for i, (b, lo, hi) in enumerate(buckets):
        coref.append(dict(step=step, method="nearest_mention", bucket=b, bucket_lo=lo, bucket_hi=hi, correct=0,
                          count=10, accuracy=0.7 - 0.2 * i))  # fmt: skip
    w.append("probe_coref", pd.DataFrame(coref))
    comp = [
        dict(
            step=step,
            level=0,
            layer=layer,
            target="kmeans:profile",
            ari=0.1 * layer,
            null_mean=0.0,
            null_p95=0.15,
            p_value=0.5 if layer == 0 else 0.01,
            n_heads=n_head,
            n_groups=1 if layer == 0 else 2,
            n_probe_clusters=2,
            n_layers=1,
            degenerate=layer == 0,
            reason="one AAH group" if layer == 0 else "",
            partition_verdict="undefined" if layer == 0 else "real",
        )  # fmt: skip
        for layer in range(n_layer)
    ]
    comp.append(
        dict(
            step=step,
            level=0,
            layer=None,
            target="kmeans:profile",
            ari=0.2,
            null_mean=0.0,
            null_p95=0.1,
            p_value=0.04,
            n_heads=n_layer * n_head,
            n_groups=2,
            n_probe_clusters=2,
            n_layers=n_layer - 1,
            degenerate=False,
            reason="",
            partition_verdict="real",
        )  # fmt: skip
    )
    w.append("comparisons", pd.DataFrame(comp))
    w.append(
        "window_association",
        pd.DataFrame({"step": [step], "layer": [None], "target": ["spearman:syntax"], "rho": [0.3], "p_value": [0.2]}),
    )
    w.close("finished")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fig")
    a = make_synthetic_run(root / "a", n_layer=4, n_head=6, steps=160, regime="full_adaptive", seed=0)
    b = make_synthetic_run(root / "b", n_layer=4, n_head=6, steps=160, regime="shallow_freeze", seed=1)
    add_probe_tables(a, 4, 6, 159)
    return [load_run(a), load_run(b)]


def _axis_titles(fig) -> list[str]:
    layout = fig.to_plotly_json()["layout"]
    out = []
    for k, v in layout.items():
        if (k.startswith("xaxis") or k.startswith("yaxis")) and isinstance(v, dict) and v.get("title"):
            out.append(v["title"].get("text", "").replace("<br>", " "))  # a line break is a space
    return out


@pytest.fixture(scope="module")
def frontier_run(tmp_path_factory):
    """A frontier run as aah-viz frontier writes one: an inference event per configuration."""
    from aah_viz.samples import make_synthetic_frontier_run

    return load_run(make_synthetic_frontier_run(tmp_path_factory.mktemp("frontier") / "fr"))


@pytest.fixture(scope="module")
def lens_run(tmp_path_factory):
    """A run with a lens of one document (random causal attention), written as aah-viz lens writes it."""
    from aah_viz.samples import add_synthetic_lens

    path = make_synthetic_run(tmp_path_factory.mktemp("lens") / "l", n_layer=2, n_head=3, steps=20, seed=0)
    add_synthetic_lens(path, 19, 2, 3)
    return load_run(path)


def test_registry_names_every_required_kind_and_each_builds(runs, frontier_run, lens_run):
    assert REQUIRED_KINDS <= set(FIGURE_KINDS)
    special = {"frontier": frontier_run, "head_spans": frontier_run, "tokens": lens_run}
    for kind in FIGURE_KINDS:
        fig = build_figure(kind, [special[kind]] if kind in special else runs)
        assert fig.data, kind
        assert payload_bytes(fig) < 5_000_000, kind


def test_unknown_kind_names_the_known_ones(runs):
    with pytest.raises(AAHVizError, match="window_heatmap"):
        build_figure("nope", runs)


def test_window_heatmap_data_is_the_head_table_at_the_step(runs):
    run = runs[0]
    fig = FIGURE_KINDS["window_heatmap"]([run], step=77)
    trace = figure_data(fig)["data"][0]
    heads = run.table("heads", filters=[("step", "==", 77)])
    want = np.zeros((4, 6))
    want[heads["layer"], heads["head"]] = heads["window"]
    np.testing.assert_array_equal(trace["customdata"], want)
    np.testing.assert_allclose(trace["z"], np.log2(want), rtol=1e-6)
    assert "step 77" in fig.layout.title.text
    assert "window (tokens)" in fig.data[0].colorbar.title.text


def test_head_timeline_samples_routing_updates_only(runs):
    run = runs[0]
    fig = FIGURE_KINDS["head_timeline"]([run], layer=2)
    trace = figure_data(fig)["data"][0]
    ups = set(run.events("routing_update").query("layer == 2")["step"])
    cols = trace["x"].tolist()
    assert set(cols[:-1]) <= ups | {0} and cols[-1] == 159
    heads = run.table("heads", filters=[("layer", "==", 2)])
    warmup = int(run.config.get("warmup_steps") or 0)
    for j, s in enumerate(cols):
        w = heads[heads["step"] == s].sort_values("head")["window"].to_numpy()
        np.testing.assert_array_equal(trace["customdata"][:, j], -1 if s < warmup else w)  # warm-up: no window


def test_the_timeline_draws_warm_up_grey_not_in_the_colour_of_a_window():
    from aah_viz.figures.windows import head_timeline_figure

    steps = np.array([0, 10, 20, 30])
    matrix = np.array([[128, 128, 16, 32], [128, 128, 64, 64]])  # warm-up runs full attention (128)
    fig = figure_data(head_timeline_figure(steps, matrix, [16, 32, 64, 128], warmup=20))
    cells = fig["data"][0]
    z = np.asarray(cells["z"], dtype=float)
    assert np.isnan(z[:, :2]).all() and np.isfinite(z[:, 2:]).all()  # no colour before step 20
    assert cells["hoverongaps"] is False
    assert [a["text"] for a in fig["layout"]["annotations"]] == ["warm-up: full attention"]
    np.testing.assert_array_equal(np.asarray(cells["customdata"])[:, 2:], matrix[:, 2:])


def test_branch_bars_stack_to_one_per_layer(runs):
    fig = FIGURE_KINDS["branch_bars"](runs[:1])
    data = figure_data(fig)["data"]
    total = sum(np.asarray(t["y"], dtype=float) for t in data)
    np.testing.assert_allclose(total, 1.0, atol=1e-6)
    assert [t["name"] for t in data] == [str(w) for w in runs[0].windows]


def test_coverage_has_a_line_per_run_and_named_denominators(runs):
    fig = FIGURE_KINDS["coverage_over_training"](runs)
    titles = _axis_titles(fig)
    assert set(titles) >= {"ACR", "coverage", "realised work", "training step"}
    panels = [a.text for a in fig.layout.annotations]  # the definitions with their denominators
    assert "ACR: Σ T·w / H·T² (the paper's key-length proxy)" in panels
    assert "causal-pair coverage: attended causal pairs / all causal pairs" in panels
    names = {t.name for t in fig.data}
    assert len(names) == 2
    acr = runs[0].scalar("acr")
    first = figure_data(fig)["data"][0]
    assert np.asarray(first["y"]).mean() == pytest.approx(acr["value"].mean(), rel=0.02)


def test_stability_and_controller_axes_name_units(runs):
    titles = _axis_titles(FIGURE_KINDS["stability"](runs))
    assert any("ARI" in t for t in titles) and any("heads / H" in t for t in titles) and "training step" in titles
    panels = [a.text for a in FIGURE_KINDS["stability"](runs).layout.annotations]
    assert any(p.startswith("ARI of the level-0 partition vs the previous update") for p in panels)
    titles = _axis_titles(FIGURE_KINDS["controller_health"](runs))
    assert "controller gradient norm (L2)" in titles and "controller weight drift (L2 distance from init)" in titles


def test_hierarchy_figure_hover_names_members_logits_and_joint_effect(runs):
    fig = FIGURE_KINDS["hierarchy"](runs, layer=1)
    hovers = [h for t in fig.data if t.hovertext for h in t.hovertext]
    group_hovers = [h for h in hovers if h.startswith("level")]
    assert group_hovers and all(
        "members:" in h and "logits" in h and "margin" in h and "joint scorer" in h for h in group_hovers
    )
    head_hovers = [h for h in hovers if h.startswith("L1H")]  # heads are named L<layer>H<head> everywhere
    assert sorted(h.split("<br>")[0] for h in head_hovers) == sorted(f"L1H{h}" for h in range(runs[0].n_head))
    assert all("final logits (window: logit)" in h for h in group_hovers)  # logits labelled by window
    assert fig.to_json() == FIGURE_KINDS["hierarchy"](runs, layer=1).to_json()  # deterministic


def test_probe_figures_show_the_logged_scores(runs):
    fig = FIGURE_KINDS["probe_heatmap"](runs[:1], probe="syntax", metric="uas")
    z = figure_data(fig)["data"][0]["z"]
    want = np.add.outer(np.arange(4) / 10, np.arange(6) / 100)
    np.testing.assert_allclose(z, want, rtol=1e-6)
    scatter = figure_data(FIGURE_KINDS["window_vs_probe"](runs[:1], probe="syntax", metric="uas"))["data"][0]
    assert len(scatter["y"]) == 24
    # a run without probe tables says how to make them
    empty = FIGURE_KINDS["probe_heatmap"](runs[1:])
    assert "aah-viz probe" in empty.layout.annotations[0].text


SAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "sample_logs" / "full_adaptive_seed0"


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample_logs/ not generated")
def test_coverage_shows_realised_work_and_the_cost_table_labels_the_estimate():
    from aah_viz.figures.data import cost_table

    run = load_run(SAMPLE)  # a real recorded run: its backend reports realised work
    fig = FIGURE_KINDS["coverage_over_training"]([run])
    assert "realised work" in _axis_titles(fig)
    assert any(
        a.text.startswith("realised work: score elements computed / all causal pairs") for a in fig.layout.annotations
    )
    panels = {t.xaxis: t for t in fig.data}
    assert set(panels) == {"x", "x2", "x3"}  # ACR, causal-pair coverage, realised work side by side
    scalars = pd.read_parquet(SAMPLE / "scalars")
    model_wide = scalars[scalars["layer"].isna()]
    work = model_wide[model_wide["name"] == "realised_work"].sort_values("step")
    assert np.asarray(figure_data(fig)["data"][2]["y"]).mean() == pytest.approx(work["value"].mean(), rel=0.02)

    table = cost_table([run]).iloc[0]
    last = model_wide.sort_values("step").groupby("name")["value"].last()
    assert table["ACR"] == pytest.approx(last["acr"])
    assert table["realised work"] == pytest.approx(last["realised_work"])
    assert table["FLOPs ratio (analytic estimate)"] == pytest.approx(last["flops_ratio_est"])
    steps = model_wide[model_wide["name"] == "step_time_s"]["value"]
    assert table["step time, median (s, measured)"] == pytest.approx(steps.median())


def test_the_exact_patch_never_hides_the_unpatched_model_on_the_frontier():
    """The patch sits on the unpatched point: a ring drawn under the unpatched star, which stays visible."""
    import pandas as pd

    from aah_viz.figures.frontier import frontier_figure

    table = pd.DataFrame({"configuration": ["unpatched", "patch_full", "sliding_window_8"],
                          "family": ["unpatched", "patch", "sliding_window"], "acr": [1.0, 1.0, 0.3],
                          "ppl": [20.0, 20.0, 24.0], "ppl_lo": [19.0, 19.0, 23.0], "ppl_hi": [21.0, 21.0, 25.0],
                          "acr_causal": [1.0, 1.0, 0.5], "pareto": [True, False, True]})  # fmt: skip
    fig = frontier_figure(table)
    drawn = [t.name for t in fig.data]
    patch, star = (next(t for t in fig.data if t.name == n) for n in ("full-attention patch", "unpatched model"))
    assert drawn.index("unpatched model") > drawn.index("full-attention patch")
    assert patch.marker.symbol.endswith("-open") and patch.marker.size > star.marker.size
    assert patch.legendrank > star.legendrank  # the legend keeps the unpatched model first


def test_frontier_figure_draws_each_configuration_with_its_interval_and_the_front(frontier_run, runs):
    from aah_viz.analysis.frontier import run_frontier_table

    table = run_frontier_table(frontier_run).set_index("configuration")
    fig = build_figure("frontier", [frontier_run])
    points = {}
    for trace in fig.data:
        if "markers" in (trace.mode or ""):
            for name, x, y, up, down in zip(
                trace.text, trace.x, trace.y, trace.error_y.array, trace.error_y.arrayminus
            ):
                points[name] = (x, y, y + up, y - down)
    assert set(points) == set(table.index)
    for name, (x, y, hi, lo) in points.items():
        row = table.loc[name]
        assert (x, y, hi, lo) == pytest.approx((row["acr"], row["ppl"], row["ppl_hi"], row["ppl_lo"]))
    # each AAH point is labelled with its regime, each static window with its size, in the figure itself
    written = {name: cd[3] for t in fig.data if t.customdata is not None for name, cd in zip(t.text, t.customdata)}
    assert written["full_adaptive_adapted"] == "full_adaptive" and written["sliding_window_8"] == "w 8"
    assert written["unpatched"] == ""
    # where labels sit (points of nearly the same ACR take turns) is tested in test_frontier_seeds.py
    (front,) = [t for t in fig.data if t.name == "Pareto front"]
    on_front = table[table["pareto"]].sort_values("acr")
    assert list(front.x) == pytest.approx(list(on_front["acr"]))
    assert set(on_front.index) == {"unpatched", "sliding_window_8", "full_adaptive_adapted"}
    with pytest.raises(AAHVizError, match="holds no frontier"):
        build_figure("frontier", runs)  # a training run


def test_the_unchecked_template_gives_the_figure_a_checked_assignment_gives():
    """``style.with_template`` skips Plotly's copy-and-check of the registered template: the figure it gives is
    the one ``update_layout(template=...)`` gives, template included, and the layout checks values again after."""
    import plotly.graph_objects as go

    from aah_viz.figures import style

    def fig():
        return go.Figure(go.Heatmap(z=np.arange(6.0).reshape(2, 3))).update_layout(height=300)

    fast = style.with_template(fig())
    checked = fig().update_layout(template=style.TEMPLATE)
    assert fast.to_dict() == checked.to_dict()
    assert fast.to_dict()["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
    with pytest.raises(ValueError):
        fast.update_layout(height="tall")  # validation is back on
