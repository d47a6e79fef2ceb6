"""The Effects page in Debian Chromium: a copied address (sweep and metric) opens on that sweep's forest
and interaction plots, drawn by Plotly, with no exception."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_harness import ARTIFACTS, chromium, need_chromium, new_page, open_page, streamlit_app, wait_selector
from waiting import TEST_S, until

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "sweep_ablation_tiny"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # a server and a browser of its own: about 40 s on a loaded 2-core machine
    pytest.mark.timeout(TEST_S),
    pytest.mark.skipif(not (SAMPLE / ".sweep" / "design.json").is_file(), reason="the sample sweep is not here"),
]


def test_a_copied_address_opens_the_effects_of_its_sweep_and_metric(tmp_path):
    need_chromium()
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLE, logs / "ablation")
    shutil.copytree(SAMPLE, logs / "again")  # a second sweep, so the address has a choice to make
    with streamlit_app(logs) as url, chromium() as browser:
        page = new_page(browser)
        open_page(page, f"{url}/effects?sweep=ablation&emetric=acr", "Effects")
        wait_selector(page, ".js-plotly-plot .main-svg", "a chart's drawing on Effects")
        # one forest of acr and the three interaction plots of its three factors
        charts = page.locator(".js-plotly-plot")
        until(lambda: charts.count() == 4, "four charts on the Effects page",
              sleep=lambda s: page.wait_for_timeout(s * 1000), detail=lambda: str(charts.count()))  # fmt: skip
        text = page.locator('[data-testid="stApp"]').inner_text()
        assert "Final acr" in text and "Final val_loss" not in text
        assert page.locator(".st-key-effects_sweep input").first.input_value().strip() == "ablation"
        assert "Effects on the final acr" in charts.first.inner_text()
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(ARTIFACTS / "dashboard-effects.png"), full_page=True)
        page.close()
