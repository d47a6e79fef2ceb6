"""A run without head groups (``grouping_off``, every head alone) on the pages: axes over the steps
it recorded, and the true reason for what is missing. Read from the bundled sample run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aah_viz.figures import data
from aah_viz.figures.validity import validity_figure
from aah_viz.runlog import load_run

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "grouping_off_seed0"


@pytest.fixture(scope="module")
def grouping_off():
    if not (SAMPLE / "manifest.json").is_file():
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
