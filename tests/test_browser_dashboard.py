"""The dashboard in a real browser: Debian Chromium through Playwright against ``streamlit run app.py``.

Every page loads, its Plotly charts render, no Streamlit exception shows, and a screenshot of each
page lands in ``test-artifacts/``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
# (url path, page title, least number of Plotly charts, elements that must have rendered)
PAGES = [
    ("", "Runs", 0, ['[data-testid="stDataFrame"] canvas', ".st-key-runs_select input"]),
    ("hierarchy", "Hierarchy", 1, ['[data-testid="stSliderThumbValue"]']),
    ("windows", "Windows", 4, ['[data-testid="stSliderThumbValue"]']),
    ("stability", "Stability", 3, ['[data-testid="stDataFrame"] canvas']),
    ("probes", "Probes", 4, ['[data-testid="stDataFrame"] canvas']),
    ("compare", "Compare", 1, ['[data-testid="stDataFrame"] canvas']),
    ("export", "Export", 1, [".st-key-exp_table_download button", ".st-key-exp_fig_download button"]),
]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed at /usr/bin/chromium (./dev test installs it)")
    from aah_viz.runlog.synthetic import make_synthetic_run

    logs = tmp_path_factory.mktemp("browser_logs")
    from test_figures_registry import add_probe_tables  # tests/ is on sys.path under pytest

    make_synthetic_run(logs / "adaptive-s0", n_layer=3, n_head=8, steps=120, regime="full_adaptive", seed=0)
    add_probe_tables(logs / "adaptive-s0", 3, 8, 119)
    make_synthetic_run(logs / "freeze-s1", n_layer=3, n_head=8, steps=120, regime="shallow_freeze", seed=1)
    port = _free_port()
    env = dict(os.environ, AAH_VIZ_LOGS=str(logs), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(REPO / "app.py"),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                pytest.fail(f"streamlit did not start on {url}: {out[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _settle(page) -> None:
    """Wait until the script run finished: the status widget (running man) is gone."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=30000)
    time.sleep(0.3)  # the widget appears a moment after the rerun starts
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60000)


def test_every_page_renders_in_chromium(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            started = time.monotonic()
            for path, title, min_charts, selectors in PAGES:
                page.goto(f"{server}/{path}", wait_until="domcontentloaded")
                page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=60000)
                _settle(page)
                if min_charts:
                    page.wait_for_selector(".js-plotly-plot", timeout=60000)
                    # plotly draws its SVG main layer once the chart rendered
                    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30000)
                for selector in selectors:
                    page.wait_for_selector(selector, state="visible", timeout=30000)
                charts = page.locator(".js-plotly-plot").count()
                page.screenshot(path=str(ARTIFACTS / f"dashboard-{path or 'runs'}.png"))
                print(f"{path or 'runs'}: {time.monotonic() - started:.1f}s")
                assert page.locator('[data-testid="stException"]').count() == 0, (
                    f"{path}: a Streamlit exception is shown"
                )
                assert charts >= min_charts, f"{path}: {charts} charts rendered, expected at least {min_charts}"
            # the Export page's downloads: a CSV table and a PNG rendered on click through Kaleido
            page.goto(f"{server}/export", wait_until="domcontentloaded")
            page.get_by_role("heading", name="Export", exact=True).first.wait_for(timeout=60000)
            _settle(page)
            with page.expect_download(timeout=60000) as table_dl:
                page.locator(".st-key-exp_table_download button").click()
            text = Path(table_dl.value.path()).read_text()
            _settle(page)
            assert "adaptive-s0" in text and "freeze-s1" in text
            with page.expect_download(timeout=90000) as fig_dl:
                page.locator(".st-key-exp_fig_download button").click()
            assert Path(fig_dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            _settle(page)

            # interactions: pick another layer on the Hierarchy page, then refresh the runs
            page.goto(f"{server}/hierarchy", wait_until="domcontentloaded")
            page.get_by_role("heading", name="Hierarchy", exact=True).first.wait_for(timeout=60000)
            _settle(page)
            title = page.locator(".js-plotly-plot .gtitle").first
            assert title.text_content().startswith("layer 0")
            page.locator('[data-testid="stSelectbox"]').filter(has_text="Layer").click()
            page.get_by_role("option", name="1", exact=True).click()
            _settle(page)
            page.wait_for_function(
                "() => document.querySelector('.js-plotly-plot .gtitle')?.textContent.startsWith('layer 1')",
                timeout=30000,
            )
            page.get_by_role("button", name="Refresh runs").click()
            _settle(page)
            assert page.locator('[data-testid="stException"]').count() == 0
            assert title.text_content().startswith("layer 1")
            page.screenshot(path=str(ARTIFACTS / "dashboard-hierarchy-layer1.png"))
        finally:
            browser.close()
