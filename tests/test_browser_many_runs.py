"""A sweep's worth of runs in a real browser: Debian Chromium through Playwright against ``streamlit run
app.py`` on 300 generated runs (``aah-viz bench dashboard --runs``' runs: distinct run directories sharing
their segment files). Like a researcher after a sweep: filter the Runs table down to one run by typing its
name, select it, and open it on a page of one run.
"""

from __future__ import annotations

import pytest
from browser_harness import need_chromium, new_page, open_page, settle, wait_selector
from waiting import PATIENCE_MS, TEST_S, until

from aah_viz.cli._many_runs import make_many_runs
from aah_viz.runlog import load_run

N_RUNS = 300
WANTED = "run-0123"

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(TEST_S)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    need_chromium()
    root = tmp_path_factory.mktemp("many_runs")
    make_many_runs(root, N_RUNS, steps=40, flush_every=10)
    return root


def _captions(page) -> list[str]:
    return page.locator('[data-testid="stCaptionContainer"]').all_inner_texts()


def _caption(page, start: str) -> str:
    found = until(
        lambda: [c for c in _captions(page) if c.startswith(start)], f"a caption starting {start!r}", interval=0.25
    )
    return found[0]


def test_a_run_found_by_its_name_among_hundreds_and_opened(server, browser, logs):
    page = new_page(browser, 1400, 1400)
    open_page(page, f"{server}/runs?filter=run", "Runs")  # the filter's column: the run's name
    wait_selector(page, '[data-testid="stDataFrame"] canvas', "the runs table")
    assert _caption(page, f"{N_RUNS} of {N_RUNS} runs selected").startswith(f"{N_RUNS} of {N_RUNS} runs selected.")
    box = page.locator(".st-key-runs_filter input").first
    box.fill(f"={WANTED}")
    box.press("Enter")
    _caption(page, f"{N_RUNS} of {N_RUNS} runs selected; the filter hides {N_RUNS - 1}")
    settle(page)
    rows = page.locator('.st-key-runs_table [role="row"]')
    until(lambda: rows.count() == 2, "the table to hold the one run the filter shows (and its header)")
    assert rows.nth(1).locator('[role="gridcell"]').first.text_content() == WANTED
    page.get_by_role("button", name="Select only shown").first.click()
    _caption(page, f"1 of {N_RUNS} runs selected")
    settle(page)
    assert f"sel={WANTED}" in page.url  # the selection is in the address
    # open it: a page of one run shows the selected run, its regime and seed in the picker
    page.get_by_role("link", name="Hierarchy").first.click()
    page.get_by_role("heading", name="Hierarchy", exact=True).first.wait_for(timeout=PATIENCE_MS)
    settle(page)
    run = load_run(logs / WANTED)
    picker = page.locator(".st-key-run_picker input").first  # the text a selectbox shows
    until(lambda: WANTED in picker.input_value(), f"the run picker to show {WANTED}", interval=0.25)
    assert picker.input_value().strip() == f"{run.regime} s{run.seed} · {WANTED}"
    assert f"run={WANTED}" in page.url
    page.close()
