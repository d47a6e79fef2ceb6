"""A run without head groups (``grouping_off``, every head alone) on the pages: axes over the steps
it recorded, and the true reason for what is missing. Read from the bundled sample run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dashboard_pages import open_page

from aah_viz.figures import data
from aah_viz.figures.validity import validity_figure
from aah_viz.probes.partition_agreement import NO_GROUPS, degenerate_reasons
from aah_viz.runlog import load_run
from aah_viz.runlog.paths import is_run

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_logs" / "grouping_off_seed0"


@pytest.fixture(scope="module")
def grouping_off():
    if not is_run(SAMPLE):
        pytest.skip(f"{SAMPLE} is not in this checkout")
    return load_run(SAMPLE)


def test_cluster_validity_spans_the_recorded_steps_and_says_why_there_is_no_silhouette(grouping_off):
    v = data.validity_data(grouping_off)
    assert len(v["validity"]) and set(v["validity"]["origin"]) == {"ungrouped"}  # the sample is what it claims
    fig = validity_figure(v["validity"], v["threshold"], "cluster validity over training")
    steps = v["validity"]["step"]
    axes = [fig.layout[name] for name in fig.layout if name.startswith("xaxis")]
    assert len(axes) == 3
    for axis in axes:
        assert axis.range is not None and tuple(axis.range) == (steps.min(), steps.max())
    notes = [a.text for a in fig.layout.annotations if "silhouette" in a.text and "minus" not in a.text]
    assert notes == ["no silhouettes: no level-0 partition has one (no grouping: every head alone)"]
    plotted = [np.asarray(t.x, dtype=float) for t in fig.data]
    assert min(x.min() for x in plotted) >= steps.min() >= 0
    # Plotly.js draws no axes for a panel without traces: an annotation placed on one would not show
    drawn = {t.xaxis or "x" for t in fig.data} | {t.yaxis or "y" for t in fig.data}
    for note in fig.layout.annotations:
        for ref in (note.xref, note.yref):
            axis = (ref or "paper").split()[0]
            assert axis == "paper" or axis in drawn, (note.text, ref)


def test_a_layer_of_ungrouped_heads_is_no_comparison():
    rng = np.random.default_rng(0)
    probe, windows = rng.integers(0, 3, 12), np.full(12, 64)
    assert NO_GROUPS in degenerate_reasons(np.arange(12), probe, windows, n_features=5)
    assert degenerate_reasons(np.repeat([0, 1, 2], 4), probe, windows, n_features=5) == []


def test_the_probes_page_flags_comparisons_of_a_run_without_groups(grouping_off, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "logs" / SAMPLE.name)  # the recorded table, written before the flag
    assert not grouping_off.table("comparisons")["degenerate"].any()
    at = open_page("probes", tmp_path / "logs", tmp_path, monkeypatch)
    table = next(getattr(d.value, "data", d.value) for d in at.dataframe if "NMI" in getattr(d.value, "data", d.value))
    assert len(table) and table["degenerate"].all()  # ARI 0 beside NMI 0.976 is no result
    pooled = table["layer"] == "pooled"  # the page writes the pooled rows' layer as a word
    assert table.loc[~pooled, "reason"].str.contains(NO_GROUPS, regex=False).all()
    assert (table.loc[pooled, "reason"] == "every layer degenerate").all()
