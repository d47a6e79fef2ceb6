"""Comparing runs in a real browser (issue 28): Debian Chromium through Playwright against
``streamlit run app.py`` on five recorded runs of the bundled sample logs (three regimes, one or
two seeds each; their first losses are about 115 nats, as real runs start).

Like a researcher: group runs by regime into a mean with a band; the first losses do not flatten the
loss axis and a box drawn on one chart sets the x range of every chart; tick runs in the runs table
and read what differs between them; plot a scalar against tokens with one hover naming every run;
copy the address into a fresh tab and find the same view; download the data behind the page.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pandas as pd
import pytest
from browser_harness import need_chromium, new_page, open_page, settle, wait_selector
from waiting import PATIENCE_MS, TEST_S

from aah_viz.runlog.paths import is_run

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
WAIT_MS = PATIENCE_MS  # deadlines far beyond any plausible machine; each wait says what it waited for
SAMPLE_LOGS = REPO / "sample_logs"
RUNS = ["full_adaptive_seed0", "full_adaptive_seed1", "shallow_freeze_seed0", "shallow_freeze_seed1"]
RUNS += ["full_attention_seed0"]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(TEST_S)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    need_chromium()
    import shutil

    if not all(is_run(SAMPLE_LOGS / key) for key in RUNS):
        pytest.skip("the bundled sample logs are not in this checkout")
    root = tmp_path_factory.mktemp("compare_logs")
    for key in RUNS:
        shutil.copytree(SAMPLE_LOGS / key, root / key)
    return root


def _query(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _until(page, check, what: str):
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_MS / 1000:.0f} s for {what}; the address is {page.url}")
        page.wait_for_timeout(250)


def _chart(page, key: str):
    return page.locator(f".st-key-{key} .js-plotly-plot").first


def _legend(page, key: str) -> list[str]:
    return [t.strip() for t in _chart(page, key).locator(".legendtext").all_text_contents()]


def _captions(page) -> list[str]:
    return page.locator('[data-testid="stCaptionContainer"]').all_inner_texts()


def test_grouped_runs_robust_axis_and_one_x_range(server, browser):
    page = new_page(browser, 1400, 1800)
    runs = "~".join(RUNS)
    open_page(page, f"{server}/training?runs={runs}&group=regime&smooth=0", "Training")
    wait_selector(page, ".st-key-tr_fig_loss .js-plotly-plot .legendtext", "the loss chart's legend")
    assert sorted(_legend(page, "tr_fig_loss")) == [
        "regime=full_adaptive (n=2)",
        "regime=full_attention (n=1)",
        "regime=shallow_freeze (n=2)",
    ]
    assert _chart(page, "tr_fig_loss").locator("path.js-fill").count() >= 2  # a band per group of two
    assert any("3 groups by regime" in c for c in _captions(page))
    # the first losses (about 115 nats) are off the axis: no tick reaches a tenth of them
    ticks = [float(t.replace("−", "-")) for t in _chart(page, "tr_fig_loss").locator(".ytick text").all_text_contents()]
    assert ticks and max(ticks) < 11.5, ticks
    page.screenshot(path=str(ARTIFACTS / "compare-grouped.png"))
    # a box drawn on the loss chart becomes every chart's x range, and the address's
    plot = _chart(page, "tr_fig_loss").locator(".nsewdrag").first
    box = plot.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.6, steps=8)
    page.mouse.up()
    chosen = _until(page, lambda: _query(page).get("range"), "the drawn box's x range in the address")
    settle(page)
    lo, hi = (float(v) for v in chosen.split(","))
    assert 20 < lo < hi < 279, chosen
    # the val_loss chart (another chart of the page) now spans the same range
    ticks = [float(t) for t in _chart(page, "tr_fig_val_loss").locator(".xtick text").all_text_contents() if t]
    assert ticks and lo - 1 <= min(ticks) and max(ticks) <= hi + 1, (ticks, chosen)
    page.close()


def test_the_runs_table_sorts_filters_selects_by_ticking_and_shows_what_differs(server, browser):
    page = new_page(browser, 1400, 1400)
    open_page(page, f"{server}/?filter=regime&q=full_", "Runs")
    wait_selector(page, '[data-testid="stDataFrame"] canvas', "the runs table")
    selected = _until(page, lambda: [c for c in _captions(page) if "runs selected" in c], "the selection caption")
    assert selected[0].startswith("5 of 5 runs selected; the filter hides 2")  # every run, none ticked yet
    page.get_by_role("button", name="Select only shown").first.click()
    _until(page, lambda: any(c.startswith("3 of 5 runs selected") for c in _captions(page)), "3 runs selected")
    settle(page)
    table = page.locator(".st-key-runs_table").first
    grid = table.bounding_box()
    for _ in range(2):  # the run column's header: sorted ascending, then descending
        page.mouse.click(grid["x"] + 120, grid["y"] + 17)
        page.wait_for_timeout(500)
    rows = table.locator('[role="row"]')  # the grid's accessible rows, in the order shown

    def order():
        return [rows.nth(i).locator('[role="gridcell"]').first.text_content() for i in range(1, rows.count())]

    _until(page, lambda: order() == ["full_attention_seed0", "full_adaptive_seed1", "full_adaptive_seed0"], "sorting")
    page.mouse.click(grid["x"] + 15, grid["y"] + 35 + 17)  # the box of the first row shown: untick it
    _until(page, lambda: any(c.startswith("2 of 5 runs selected") for c in _captions(page)), "2 runs selected")
    settle(page)
    # the settings that differ between the two selected runs, one column each: the sorted first run is out
    _until(page, lambda: any("fields differ" in c for c in _captions(page)), "the caption of the settings diff")
    diff = page.locator('[data-testid="stDataFrame"]').nth(1)
    assert diff.locator('[role="columnheader"]').all_text_contents() == [
        "field",
        "full_adaptive_seed0",
        "full_adaptive_seed1",
    ]
    fields = [r.locator('[role="gridcell"]').first.text_content() for r in diff.locator('[role="row"]').all()[1:]]
    assert "seed" in fields and "regime" not in fields  # same regime: not a difference
    page.screenshot(path=str(ARTIFACTS / "compare-runs-table.png"))
    page.close()


def test_a_scalar_against_tokens_with_one_hover_for_every_run(server, browser):
    page = new_page(browser, 1400, 1400)
    view = "runs=full_adaptive_seed1~shallow_freeze_seed1&x=tokens&scalars=lr~loss"
    open_page(page, f"{server}/training?{view}", "Training")
    wait_selector(page, ".st-key-tr_fig_lr .js-plotly-plot .legendtext", "the learning-rate chart's legend")
    title = _chart(page, "tr_fig_lr").locator(".gtitle").first.text_content()
    assert title == "learning rate against tokens"
    assert "tokens processed" in _chart(page, "tr_fig_lr").locator(".xtitle").first.text_content()
    plot = _chart(page, "tr_fig_loss").locator(".nsewdrag").first
    plot.scroll_into_view_if_needed()
    plot.hover()  # the middle of the plot area
    hover = page.locator(".st-key-tr_fig_loss .hoverlayer .legend")
    hover.first.wait_for(timeout=WAIT_MS)
    text = hover.first.text_content()
    assert "full_adaptive_seed1" in text and "shallow_freeze_seed1" in text, text
    # the header is the tokens at that x, whole, with separators ("21,967"), never "21.96692k"
    assert re.search(r"\d{1,3}(,\d{3})+", text) and not re.search(r"\d\.\d+k", text), text
    page.close()


def test_a_copied_address_reopens_the_view_and_the_data_downloads(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    context.set_default_timeout(WAIT_MS)  # every Playwright wait: minutes, never one
    page = context.new_page()
    open_page(
        page,
        f"{server}/training?runs=full_adaptive_seed0~full_adaptive_seed1~shallow_freeze_seed0&group=seed&x=wall_s&logy=1",
        "Training",
    )
    wait_selector(page, ".st-key-tr_fig_loss .js-plotly-plot .legendtext", "the loss chart's legend")
    legend = sorted(_legend(page, "tr_fig_loss"))
    # seed 0 of two regimes: two lines (runs set up differently are never averaged together), keyed in the
    # legend (S1: full_adaptive, S2: shallow_freeze; the table of groups spells them out)
    assert legend == ["seed=0 · S1 (n=1)", "seed=0 · S2 (n=1)", "seed=1 (n=1)"]
    address = page.url
    with page.expect_download(timeout=WAIT_MS) as download:
        page.locator(".st-key-tr_data_parquet button").click()
    data = pd.read_parquet(io.BytesIO(Path(download.value.path()).read_bytes()))
    assert set(data["run"]) == {"full_adaptive_seed0", "full_adaptive_seed1", "shallow_freeze_seed0"}
    assert {"step", "tokens", "wall_s", "value", "name"} <= set(data.columns)
    context.close()
    # a fresh browser session on the copied address: the same view
    fresh = browser.new_context(viewport={"width": 1400, "height": 1400})
    fresh.set_default_timeout(WAIT_MS)
    page = fresh.new_page()
    open_page(page, address, "Training")
    wait_selector(page, ".st-key-tr_fig_loss .js-plotly-plot .legendtext", "the loss chart's legend in the new tab")
    assert sorted(_legend(page, "tr_fig_loss")) == legend
    assert page.locator(".st-key-tr_group input").first.input_value() == "seed"
    assert "wall time" in _chart(page, "tr_fig_loss").locator(".xtitle").first.text_content()
    fresh.close()
