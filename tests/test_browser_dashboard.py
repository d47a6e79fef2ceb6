"""The dashboard in a real browser: Debian Chromium through Playwright against ``streamlit run app.py``.

Like a user: every page loads and renders its charts without an exception (screenshots land in
``test-artifacts/``); the selection travels in the address from page to page and into a fresh tab;
a click on a head selects it; a chart's data and image download; a run being written updates on
its own. One server and one browser serve all tests (browser sessions are the costly part).
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from browser_harness import (
    ARTIFACTS,
    need_chromium,
    new_page,
    open_page,
    settle,
    wait_selector,
)
from waiting import PATIENCE_MS, TEST_S, until, waiting_for

# (url path, page title, least number of Plotly charts, elements that must have rendered)
PAGES = [
    ("", "Runs", 0, ['[data-testid="stDataFrame"] canvas', ".st-key-runs_filter input"]),
    ("training", "Training", 1, [".st-key-tr_fig_loss_dl"]),
    ("hierarchy", "Hierarchy", 1, ['[data-testid="stSliderThumbValue"]']),
    ("windows", "Windows", 4, ['[data-testid="stSliderThumbValue"]']),
    ("stability", "Stability", 3, ['[data-testid="stDataFrame"] canvas']),
    ("probes", "Probes", 4, ['[data-testid="stDataFrame"] canvas']),
    ("compare", "Compare", 1, ['[data-testid="stDataFrame"] canvas']),
    ("export", "Export", 1, [".st-key-exp_table_download button", ".st-key-exp_fig_download button"]),
    ("glossary", "Glossary", 0, ["#acr"]),
]
N_LAYER, N_HEAD, STEPS = 3, 8, 120

pytestmark = [pytest.mark.browser, pytest.mark.timeout(TEST_S)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    need_chromium()
    from aah_viz.samples import make_synthetic_run

    logs = tmp_path_factory.mktemp("browser_logs")
    from test_figures_registry import add_probe_tables  # tests/ is on sys.path under pytest

    kw = dict(n_layer=N_LAYER, n_head=N_HEAD, steps=STEPS)
    make_synthetic_run(logs / "adaptive-s0", regime="full_adaptive", seed=0, **kw)
    add_probe_tables(logs / "adaptive-s0", N_LAYER, N_HEAD, STEPS - 1)
    make_synthetic_run(logs / "freeze-s1", regime="shallow_freeze", seed=1, **kw)
    return logs


_settle = settle
_open = open_page


def _query(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _wait_query(page, **want) -> None:
    def arrived() -> bool:
        return {k: _query(page).get(k) for k in want} == {k: str(v) for k, v in want.items()}

    # page.wait_for_timeout lets Playwright take in the page's events (page.url follows them)
    until(arrived, f"the address to say {want}", sleep=lambda s: page.wait_for_timeout(s * 1000),
          detail=lambda: page.url)  # fmt: skip


def _picker(page, key: str) -> str:
    """The text a selectbox shows (its combobox input)."""
    return page.locator(f".st-key-{key} input").first.input_value().strip()


def test_every_page_renders_in_chromium(server, browser):
    page = new_page(browser)
    started = time.monotonic()
    for path, title, min_charts, selectors in PAGES:
        _open(page, f"{server}/{path}", title)
        if min_charts:
            wait_selector(page, ".js-plotly-plot", f"a chart on {title}")
            # plotly draws its SVG main layer once the chart rendered
            wait_selector(page, ".js-plotly-plot .main-svg", f"a chart's drawing on {title}")
        for selector in selectors:
            wait_selector(page, selector, f"an element of {title}")
        charts = page.locator(".js-plotly-plot").count()
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{path or 'runs'}.png"))
        print(f"{path or 'runs'}: {time.monotonic() - started:.1f}s")
        assert page.locator('[data-testid="stException"]').count() == 0, f"{path}: a Streamlit exception is shown"
        assert charts >= min_charts, f"{path}: {charts} charts rendered, expected at least {min_charts}"
        if path == "training":  # the default run is an adaptive one, named in the address
            assert _query(page).get("run") == "adaptive-s0"
    # the Export page's downloads: a CSV table and a PNG rendered on click through Kaleido
    _open(page, f"{server}/export", "Export")
    with waiting_for("the Export page's table download"), page.expect_download(timeout=PATIENCE_MS) as table_dl:
        page.locator(".st-key-exp_table_download button").click()
    text = Path(table_dl.value.path()).read_text()
    _settle(page)
    assert "adaptive-s0" in text and "freeze-s1" in text
    with waiting_for("the Export page's PNG download"), page.expect_download(timeout=PATIENCE_MS) as fig_dl:
        page.locator(".st-key-exp_fig_download button").click()
    assert Path(fig_dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.close()


def test_page_paths_do_not_depend_on_the_logs_root(server, browser):
    """No frontier run here: the first page is Runs, yet /runs is the Runs page (not "Page not found")
    and the bare address opens Runs with its query kept."""
    page = new_page(browser, height=1000)
    _open(page, f"{server}/runs", "Runs")
    assert "Page not found" not in page.locator("body").inner_text()
    _open(page, f"{server}/?q=freeze", "Runs")
    _wait_query(page, q="freeze")
    _open(page, f"{server}/frontier", "Frontier")
    # `streamlit run app.py` in a checkout reads .streamlit/config.toml: a user's tool, no "Deploy" button
    wait_selector(page, '[data-testid="stMainMenu"]', "the app's menu")
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    page.close()


def test_selection_travels_in_the_address_and_a_click_selects_a_head(server, browser, logs):
    from aah_viz.runlog import load_run

    run = load_run(logs / "freeze-s1")
    updates = sorted(int(s) for s in run.table("updates", columns=["step"])["step"].unique())
    step = updates[len(updates) // 2]
    page = new_page(browser)
    # a link names run, layer, head and step: the page opens on exactly that
    _open(page, f"{server}/windows?run=freeze-s1&layer=2&head=5&step={step + 1}", "Windows")
    assert "freeze-s1" in _picker(page, "run_picker")
    assert _picker(page, "layer_picker") == "2" and _picker(page, "head_picker") == "L2H5"
    _wait_query(page, run="freeze-s1", layer=2, head=5, step=step)  # the step snapped to a routing update
    title = page.locator(".st-key-win_heatmap .gtitle").text_content()
    assert title == f"executed windows at step {step}"

    # a click on the cell of layer 1, head 3 selects that head
    heatmap = page.locator(".st-key-win_heatmap .js-plotly-plot")
    box = heatmap.bounding_box()
    x, y = page.evaluate(
        """() => { const gd = document.querySelector('.st-key-win_heatmap .js-plotly-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        return [xa._offset + xa.l2p(3), ya._offset + ya.l2p(1)]; }"""
    )
    page.mouse.move(box["x"] + x - 20, box["y"] + y)  # hover first, as a hand would
    page.mouse.move(box["x"] + x, box["y"] + y, steps=5)
    wait_selector(page, ".st-key-win_heatmap .hoverlayer .hovertext", "the heatmap's hover label")
    page.mouse.click(box["x"] + x, box["y"] + y)
    _wait_query(page, layer=1, head=3)
    _settle(page)
    assert _picker(page, "head_picker") == "L1H3"

    # the heatmap's data downloads as CSV (equal to the run's head rows) and as an image
    page.locator(".st-key-win_heatmap_dl button").first.click()
    with waiting_for("the heatmap's CSV download"), page.expect_download(timeout=PATIENCE_MS) as dl:
        page.locator(".st-key-win_heatmap_dl_csv button").click()
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    heads = run.table("heads", filters=[("step", "==", step)])
    want = np.zeros((N_LAYER, N_HEAD))
    want[heads["layer"], heads["head"]] = heads["window"]
    got = np.zeros((N_LAYER, N_HEAD))
    for r in rows:
        got[int(r["y"]), int(r["x"])] = float(r["value"])
    np.testing.assert_array_equal(got, want)
    with waiting_for("the heatmap's SVG download"), page.expect_download(timeout=PATIENCE_MS) as dl:
        page.locator(".st-key-win_heatmap_dl_svg button").click()
    assert b"<svg" in Path(dl.value.path()).read_bytes()[:400]
    page.keyboard.press("Escape")

    # another page through the sidebar keeps the selection, and the hierarchy highlights the head
    page.get_by_role("link", name="Hierarchy").click()
    with waiting_for("the Hierarchy page's heading after a sidebar click"):
        page.get_by_role("heading", name="Hierarchy", exact=True).first.wait_for(timeout=PATIENCE_MS)
    _settle(page)
    _wait_query(page, run="freeze-s1", layer=1, head=3, step=step)
    assert page.locator(".st-key-hier_fig .gtitle").text_content().startswith(f"layer 1 at step {step}")
    outline = page.evaluate(
        """() => { const gd = document.querySelector('.st-key-hier_fig .js-plotly-plot');
        const t = gd.data.find(d => d.name === 'nodes'); const i = t.text.indexOf('L1H3');
        return [t.marker.line.color[i], t.marker.line.width[i]]; }"""
    )
    assert outline == ["#000000", 4]
    page.screenshot(path=str(ARTIFACTS / "dashboard-hierarchy-selected.png"))
    copied = page.url
    page.close()

    # the copied address reopens the same view in a fresh tab (a new session)
    fresh = new_page(browser, height=1600)
    _open(fresh, copied, "Hierarchy")
    assert _picker(fresh, "layer_picker") == "1" and _picker(fresh, "head_picker") == "L1H3"
    assert fresh.locator(".st-key-hier_fig .gtitle").text_content().startswith(f"layer 1 at step {step}")
    fresh.close()


def test_a_run_being_written_updates_without_a_reload(server, browser, logs):
    from aah_viz.runlog import RunWriter
    from aah_viz.samples import make_synthetic_run

    live = make_synthetic_run(
        logs / "live-s2", n_layer=N_LAYER, n_head=N_HEAD, steps=60, regime="full_adaptive", seed=2, status="running"
    )
    page = new_page(browser, height=1600)
    _open(page, f"{server}/training?run=live-s2", "Training")
    header = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="seed 2").first
    assert "running" in header.inner_text() and "60 / 60" in header.inner_text()
    w = RunWriter.resume(live)
    w.update_manifest(steps=200)
    w.append("scalars", {"step": [150], "layer": [None], "name": ["loss"], "value": [1.0]})
    w.flush()
    # no reload, no button: live refresh notices the new segment
    with waiting_for("the header to show the new segment (151 / 200) without a reload"):
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
            ".some(e => e.innerText.includes('151 / 200'))",
            timeout=PATIENCE_MS,
        )
    w.close("finished")
    with waiting_for("the header to show the run finished (finished: 151 / 200) without a reload"):
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
            ".some(e => e.innerText.includes('finished: 151 / 200'))",
            timeout=PATIENCE_MS,
        )
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
