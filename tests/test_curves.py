"""The curve arithmetic behind the Training page (aah_viz.analysis.curves), against computations
written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from aah_viz.analysis import curves


def test_smoothing_is_tensorboards_debiased_ema_and_skips_missing_values():
    values = np.array([10.0, 2.0, np.nan, 4.0, 3.0])
    w, ema, n, want = 0.8, 0.0, 0, []
    for v in values:
        if math.isnan(v):
            want.append(ema / (1 - w**n))
            continue
        ema, n = w * ema + (1 - w) * v, n + 1
        want.append(ema / (1 - w**n))
    np.testing.assert_allclose(curves.smooth(values, w), want, rtol=1e-12)
    assert curves.smooth(values, w)[0] == 10.0  # debiased: the first point is the first value
    np.testing.assert_array_equal(curves.smooth(values, 0.0), values)


def test_running_totals_count_each_logged_value_for_the_steps_since_the_last():
    # logged at steps 0, 1, 5 (every step, then after a gap of four)
    np.testing.assert_allclose(curves.cumulative([0, 1, 5], [2.0, 3.0, 1.0]), [2.0, 5.0, 9.0])
    np.testing.assert_allclose(curves.cumulative([0, 1, 2], [2.0, np.nan, 1.0]), [2.0, 4.0, 5.0])


def test_the_robust_range_drops_a_spike_and_keeps_a_clean_series_whole():
    clean = np.linspace(3.0, 5.0, 200)
    lo, hi = curves.robust_range([clean])
    assert lo < 3.0 and hi > 5.0 and hi - lo < 2.5
    spiked = np.concatenate([[115.0, 90.0, 60.0], clean])
    lo, hi = curves.robust_range([spiked])
    assert hi < 6.0 and lo < 3.0
    assert curves.robust_range([[np.nan]]) is None
    lo, hi = curves.robust_range([[1.0, 10.0, 100.0]], log=True)  # log10 units, as Plotly wants
    assert lo < 0.0 and 2.0 < hi < 2.5


def test_a_group_is_a_mean_with_a_band_over_the_runs_that_reached_each_x():
    x = np.arange(10.0)
    a, b, c = 1.0 + x, 3.0 + x, 5.0 + x
    gx, mean, lower, upper, n = curves.group_band([(x, a), (x, b), (x[:5], c[:5])], band="minmax", points=10)
    np.testing.assert_allclose(gx, x)
    np.testing.assert_array_equal(n, [3] * 5 + [2] * 5)  # the short run counts only where it logged
    np.testing.assert_allclose(mean[:5], 3.0 + x[:5])
    np.testing.assert_allclose(mean[5:], 2.0 + x[5:])
    np.testing.assert_allclose(lower, a)
    np.testing.assert_allclose(upper[:5], c[:5])
    gx, mean, lower, upper, n = curves.group_band([(x, a), (x, b), (x, c)], band="ci95", points=10)
    half = stats.t.ppf(0.975, 2) * np.std([1.0, 3.0, 5.0], ddof=1) / math.sqrt(3)
    np.testing.assert_allclose(upper - mean, half)
    np.testing.assert_allclose(mean - lower, half)
    sd = np.std([1.0, 3.0, 5.0], ddof=1)
    _, mean, lower, upper, _ = curves.group_band([(x, a), (x, b), (x, c)], band="std", points=10)
    np.testing.assert_allclose(upper - mean, sd)
    _, mean, lower, upper, _ = curves.group_band([(x, a), (x, b), (x, c)], band="stderr", points=10)
    np.testing.assert_allclose(mean - lower, sd / math.sqrt(3))
    with pytest.raises(ValueError):
        curves.group_band([(x, a)], band="iqr")


def test_a_band_stays_within_the_values_the_metric_can_take():
    from aah_viz.figures.curves import value_domain

    x = np.arange(5.0)
    lo_run, hi_run = np.full(5, 0.05), np.full(5, 0.95)  # two runs of a share: n = 2, t = 12.7
    _, mean, lower, upper, _ = curves.group_band([(x, lo_run), (x, hi_run)], band="ci95", points=5)
    assert lower.min() < 0 and upper.max() > 1  # unclipped, the interval leaves [0, 1]
    _, mean, lower, upper, _ = curves.group_band([(x, lo_run), (x, hi_run)], band="ci95", points=5, domain=(0, 1))
    np.testing.assert_allclose(lower, 0.0)
    np.testing.assert_allclose(upper, 1.0)
    np.testing.assert_allclose(mean, 0.5)
    assert value_domain("acr/layer_3") == (0.0, 1.0) and value_domain("val_loss") == (0.0, np.inf)
    assert value_domain("margin") is None


def test_run_names_and_manifest_values_are_text_in_the_curves_figure():
    import pandas as pd

    from aah_viz.figures.curves import curves_figure

    label = '<a href="https://evil.example">run</a>'
    frame = pd.DataFrame(
        {
            "run": "r",
            "label": label,
            "regime": "<b>x</b>",
            "seed": 0,
            "name": "loss",
            "step": [0, 1, 2],
            "tokens": [1.0, 2.0, 3.0],
            "wall_s": [0.1, 0.2, 0.3],
            "value": [3.0, 2.0, 1.0],
        }
    )
    names = [t.name for t in curves_figure(frame, "loss").data]
    assert names == ['&lt;a href="https://evil.example"&gt;run&lt;/a&gt;']
    grouped = curves_figure(frame, "loss", groups={"r": "<b>x</b>"}, group_by="regime").data
    assert all("<" not in (t.name or "") for t in grouped)


def test_a_grouped_hover_says_n_once_and_a_points_count_only_where_runs_left_the_group():
    """The legend says "(n=2)"; the hover adds "(1 of 2 runs)" only past the shorter run's last step."""
    import pandas as pd

    from aah_viz.figures.curves import curves_figure

    def rows(run, steps):
        return pd.DataFrame({"run": run, "label": run, "regime": "a", "seed": 0, "name": "loss", "step": steps,
                             "tokens": np.asarray(steps, float), "wall_s": np.asarray(steps, float),
                             "value": np.linspace(3, 1, len(steps))})  # fmt: skip

    frame = pd.concat([rows("long", [0, 1, 2, 3, 4]), rows("short", [0, 1, 2])], ignore_index=True)
    (band, mean) = curves_figure(frame, "loss", groups={"long": "a", "short": "a"}, group_by="regime").data
    assert mean.name == "regime=a (n=2)" and "n=" not in mean.hovertemplate
    reach = [(x <= 2) for x in mean.x]  # both runs reach steps 0-2, only the long one 3 and 4
    assert list(mean.customdata) == ["" if both else " (1 of 2 runs)" for both in reach]


def test_every_group_has_a_look_of_its_own_a_short_legend_name_and_its_full_name_on_hover():
    """18 groups (the walk's Training chart, issue 42 M1): no two alike in colour and dash, even two setups of
    one regime (the regime's colour is kept only where each group is a regime of its own colours); the legend
    holds the short name given, the hover the full one."""
    import pandas as pd

    from aah_viz.figures.curves import curves_figure
    from aah_viz.regimes import REGIMES

    def frame(groups):
        return pd.concat(
            [pd.DataFrame({"run": run, "label": run, "regime": "a", "seed": 0, "name": "loss", "step": [0, 1, 2],
                           "tokens": [1.0, 2.0, 3.0], "wall_s": [0.1, 0.2, 0.3], "value": [3.0, 2.0, 1.0]})
             for run in groups],
            ignore_index=True,
        )  # fmt: skip

    groups = {f"r{i}": f"full_adaptive, ema_alpha={i / 100} [preset small, T = 128, 280 steps]" for i in range(18)}
    labels = {name: f"full_adaptive · S{i + 1}" for i, name in enumerate(sorted(set(groups.values())))}
    lines = [t for t in curves_figure(frame(groups), "loss", groups=groups, group_by="regime", labels=labels).data]
    looks = {(t.line.color, t.line.dash or "solid") for t in lines}
    assert len(lines) == len(looks) == 18
    assert [t.name for t in lines] == [f"regime={labels[n]} (n=1)" for n in sorted(labels)]
    assert all(full in t.hovertemplate for t, full in zip(lines, sorted(labels)))
    # one group a regime: each in its regime's colour, as on every page
    plain = {"a": "full_adaptive", "b": "sliding_window"}
    lines = curves_figure(frame(plain), "loss", groups=plain, group_by="regime").data
    assert [t.line.color for t in lines] == [REGIMES["full_adaptive"].color, REGIMES["sliding_window"].color]
    assert [t.hovertemplate for t in lines] == ["%{y:.4g}%{customdata}"] * 2  # the name says it all


def test_the_grouped_view_downloads_as_its_means_band_edges_and_counts():
    """The grouped chart's CSV: per group and step the mean, the min-max edges and the runs behind it,
    computed here from the two runs' rows."""
    import pandas as pd

    from aah_viz.figures.curves import curves_figure, grouped_frame

    def rows(run, regime, values):
        steps = np.arange(len(values))
        return pd.DataFrame({"run": run, "label": run, "regime": regime, "seed": 0, "name": "loss", "step": steps,
                             "tokens": steps * 10.0, "wall_s": steps * 1.0, "value": values})  # fmt: skip

    frame = pd.concat([rows("a", "x", [3.0, 2.0, 1.5]), rows("b", "x", [4.0, 2.5]), rows("c", "y", [5.0, 4.0])])
    groups = {"a": "x", "b": "x", "c": "y"}
    fig = curves_figure(frame, "loss", x="tokens", groups=groups, group_by="regime", band="minmax")
    got = grouped_frame(fig, "loss", "tokens")
    assert list(got.columns) == ["scalar", "group", "tokens", "mean", "lower", "upper", "runs"]
    x = got[got["group"] == "x"]
    at = x["tokens"].to_numpy()
    assert at.min() == 0.0 and at.max() == 20.0
    a = np.interp(at, [0, 10, 20], [3.0, 2.0, 1.5])
    b = np.where(at <= 10, np.interp(at, [0, 10], [4.0, 2.5]), np.nan)  # run b ends at 10 tokens
    both = np.vstack([a, b])
    np.testing.assert_allclose(x["mean"], np.nanmean(both, axis=0))
    np.testing.assert_allclose(x["lower"], np.nanmin(both, axis=0))
    np.testing.assert_allclose(x["upper"], np.nanmax(both, axis=0))
    assert x["runs"].tolist() == np.isfinite(both).sum(axis=0).tolist()
    y = got[got["group"] == "y"]  # one run: no band
    assert y["lower"].isna().all() and set(y["runs"]) == {1}


def test_step_bins_keep_each_step_until_there_are_too_many():
    steps = np.array([5, 1, 5, 3, 1])
    assert curves.step_bins(steps, 10).tolist() == [2, 0, 2, 1, 0]  # one bin per distinct step, in step order
    many = np.repeat(np.arange(1000), 2)
    bins = curves.step_bins(many, 10)
    assert bins.min() == 0 and bins.max() == 9
    assert np.all(np.diff(bins) >= 0)  # bins follow the steps
    widths = np.bincount(bins)
    assert widths.max() - widths.min() <= 4  # equal-width bins over evenly spaced steps hold (almost) equal rows


def test_two_copies_of_one_run_are_two_lines_of_their_own_colour_and_name(tmp_path):
    """The same run id, regime and seed in two folders (a copied run, a rerun): ``aah-viz figure --kind
    curves`` draws two lines told apart by colour and by name; by regime they share the colour and the dash."""
    import shutil
    from pathlib import Path

    from aah_viz.errors import AAHVizError
    from aah_viz.figures import FIGURE_KINDS
    from aah_viz.runlog import load_run

    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "sweep_ablation_tiny"
    source = next(sample.glob("*seed-0"))
    runs = []
    for folder in ("a", "b"):
        shutil.copytree(source, tmp_path / folder / source.name)
        runs.append(load_run(tmp_path / folder / source.name))
    assert runs[0].run_id == runs[1].run_id and runs[0].seed == runs[1].seed

    def lines(**opts):
        fig = FIGURE_KINDS["curves"](runs, scalar="loss", smoothing=0, **opts)
        return [(t.name, t.line.color, t.line.dash) for t in fig.data if t.showlegend is not False]

    (a, b) = lines()
    assert a[0] != b[0] and a[1] != b[1]
    assert str(tmp_path / "a") in a[0] and str(tmp_path / "b") in b[0]  # the folder tells them apart
    (a, b) = lines(color_by="regime")
    assert a[1:] == b[1:]
    with pytest.raises(AAHVizError, match="color_by"):
        lines(color_by="seed")


def test_many_runs_grow_the_chart_under_its_plot_never_shrink_the_plot_or_cover_the_axis_title():
    """17 runs (the walk's Training page): the plot area stays as high as with 2, the legend starts below the
    x axis's title, and past its rows it scrolls inside itself (Plotly would take its room from the plot)."""
    import pandas as pd

    from aah_viz.figures.curves import BELOW_AXIS_PX, LEGEND_MAX_ROWS, LEGEND_ROW_PX, curves_figure

    def frame(n):
        return pd.concat(
            [pd.DataFrame({"run": f"r{i}", "label": f"sweep_ablation_small/grouping-on__seed-{i}", "regime": "a",
                           "seed": i, "name": "loss", "step": [0, 1, 2], "tokens": [1.0, 2.0, 3.0],
                           "wall_s": [0.1, 0.2, 0.3], "value": [3.0, 2.0, 1.0]}) for i in range(n)],
            ignore_index=True,
        )  # fmt: skip

    layouts = {n: curves_figure(frame(n), "loss").layout for n in (2, 17, 200)}
    plot = {n: lay.height - lay.margin.t - lay.margin.b for n, lay in layouts.items()}
    assert plot[2] == plot[17] == plot[200] >= 240, plot
    for n, lay in layouts.items():
        assert lay.margin.autoexpand is False  # the legend cannot take the plot's height
        assert -lay.legend.y * plot[n] >= BELOW_AXIS_PX - 1  # below the ticks and the x title, in px
        assert lay.legend.maxheight <= lay.margin.b - BELOW_AXIS_PX  # within the room made for it
    # entries of about 300 px: 3 a row at 900 px; 17 take 6 rows, 200 stop at the most rows and scroll
    assert layouts[17].margin.b - layouts[2].margin.b == 5 * LEGEND_ROW_PX
    assert layouts[200].legend.maxheight == LEGEND_ROW_PX * LEGEND_MAX_ROWS + 8
    # a file cannot scroll: the export shows every entry, its margin grown to hold them
    from aah_viz.export.static import fit_for_export

    exported = fit_for_export(curves_figure(frame(17), "loss")).layout
    assert exported.legend.maxheight is None and exported.margin.autoexpand is True
    assert exported.height - exported.margin.t - exported.margin.b == plot[17]  # the plot keeps its height
    assert exported.margin.b >= BELOW_AXIS_PX + 17 * 20  # and the column of 17 entries has its room
