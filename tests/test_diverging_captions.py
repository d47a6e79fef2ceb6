"""A diverging scale's caption says what its colours say (issue: the Probes page called blue "above the
baseline" while its scale drew blue below, so a run whose heads all sat below read as the opposite).

On the real Probes page (AppTest, a real run with probe tables): every heatmap drawn on a diverging
scale centred at 0, the head with the lowest and the highest value, the colour the scale gives it,
and the words of the caption that explains the colours.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import plotly.colors as pcolors
import pytest
from streamlit.testing.v1 import AppTest
from test_figures_registry import add_probe_tables  # tests/ is on sys.path under pytest
from waiting import PATIENCE_S

from aah_viz.dashboard.app import PAGE_FILES
from aah_viz.figures.payload import figure_data
from aah_viz.samples import make_synthetic_run

REPO = Path(__file__).resolve().parents[1]
N_LAYER, N_HEAD, STEPS = 3, 4, 40
CAPTION = re.compile(r"(\w+) above the baseline, (\w+) below")


def _colour_at(scale: list, t: float) -> tuple[int, int, int]:
    """The colour a Plotly scale gives position t in [0, 1] (linear between its stops)."""
    pos = [float(p) for p, _ in scale]
    rgb = [pcolors.hex_to_rgb(c) if c.startswith("#") else pcolors.unlabel_rgb(c) for _, c in scale]
    return tuple(int(np.interp(t, pos, [c[i] for c in rgb])) for i in range(3))


def _says(word: str, rgb: tuple[int, int, int]) -> bool:
    r, _, b = rgb
    return {"red": r > b + 40, "blue": b > r + 40}[word]


@pytest.fixture(scope="module")
def probes_page(tmp_path_factory):
    logs = tmp_path_factory.mktemp("diverging")
    run = make_synthetic_run(logs / "r", n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS, regime="full_adaptive")
    add_probe_tables(run, N_LAYER, N_HEAD, STEPS - 1)  # layer 0 below its baselines, layers 1-2 above
    mp = pytest.MonkeyPatch()
    mp.setenv("AAH_VIZ_LOGS", str(logs))
    mp.setenv("AAH_VIZ_REFERENCE", str(logs / "none"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["probes"]).run()
    yield at
    mp.undo()


def test_every_diverging_heatmap_draws_what_its_caption_says(probes_page):
    at = probes_page
    assert not at.exception, [e.value for e in at.exception]
    said = [CAPTION.search(c.value) for c in at.caption]
    said = [m.groups() for m in said if m]
    assert said, "no caption names the colours of the score-minus-baseline scale"
    diverging = []
    for el in at.get("plotly_chart"):
        for trace in figure_data(el.proto.spec)["data"]:
            zmin, zmax = trace.get("zmin"), trace.get("zmax")
            if trace.get("type") == "heatmap" and zmin is not None and zmin == -zmax and zmin < 0:
                diverging.append(trace)
    assert len(diverging) >= 1
    for trace in diverging:
        z = np.asarray(trace["z"], dtype=float)
        low, high = np.nanmin(z), np.nanmax(z)
        assert low < 0 < high  # the run has heads on both sides of the baseline
        span = trace["zmax"] - trace["zmin"]
        low_rgb = _colour_at(trace["colorscale"], (low - trace["zmin"]) / span)
        high_rgb = _colour_at(trace["colorscale"], (high - trace["zmin"]) / span)
        for above, below in said:
            assert _says(above, high_rgb), f"caption: {above} above the baseline; the highest head is drawn {high_rgb}"
            assert _says(below, low_rgb), f"caption: {below} below the baseline; the lowest head is drawn {low_rgb}"
