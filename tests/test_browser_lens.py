"""The Lens page in Debian Chromium (issue 39): point at a token and read the colours the selected
head gives the earlier tokens; move with the keyboard; click a head in the Windows heatmap and land
on the Lens with that head. Against a tiny trained run and its lens, recorded by the real commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_harness import need_chromium, new_page, open_page, settle, wait_selector
from waiting import PATIENCE_MS, TEST_S, until, waiting_for

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "aah_viz" / "data" / "english_fixture.conllu"
# the fixtures server and browser (tests/conftest.py) serve this module's logs

pytestmark = [pytest.mark.browser, pytest.mark.torch, pytest.mark.timeout(TEST_S)]


def _cli(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "aah_viz", *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    need_chromium()
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("lens_logs")
    run = root / "toy"
    _cli("train", "--out", str(run), "--preset", "tiny", "--steps", "4", "--n-docs", "24", "--no-progress",
         "--threads", "1")  # fmt: skip
    _cli("lens", str(run), "--syntax", str(FIXTURE), "--docs", "2", "--max-tokens", "40", "--no-progress")
    _cli("probe", str(run), "--syntax", str(FIXTURE), "--min-count", "1", "--no-progress", "--threads", "1")
    return root


def _alpha(style: str) -> float:
    """The opacity of the token's blue (a browser writes an opaque rgba as rgb)."""
    found = re.search(r"rgba?\(\s*33,\s*113,\s*181(?:,\s*([0-9.]+))?\)", style or "")
    if not found:
        return 0.0
    return 1.0 if found.group(1) is None else float(found.group(1))


def test_pointing_at_a_token_colours_what_the_head_reads(server, browser, logs):
    from aah_viz.analysis import lens
    from aah_viz.runlog import load_run

    t = lens.lens_tables(load_run(logs / "toy"))
    page = new_page(browser, 1400, 1800)
    open_page(page, f"{server}/lens?run=toy&layer=1&head=2&doc=0", "Lens")
    wait_selector(page, "iframe", "the token view")
    frame = page.frame_locator("iframe").first
    tokens = frame.locator(".tok")
    with waiting_for("the token view's tokens"):
        tokens.first.wait_for(timeout=PATIENCE_MS)
    q = 12
    tokens.nth(q).hover()
    status = frame.locator("#status")
    until(lambda: f"(position {q})" in (status.text_content() or ""), f"the status line to name position {q}")
    row = lens.query_row(t["attention_samples"], 0, 1, 2, q)
    strongest = int(row["keys"][0])
    styles = [tokens.nth(j).get_attribute("style") or "" for j in range(q + 1)]
    alphas = [_alpha(s) for s in styles]
    # the strongest key is the deepest blue; every stored key is coloured in proportion to its weight
    assert alphas[strongest] == pytest.approx(1.0)
    for key, weight in zip(row["keys"], row["weights"]):
        assert alphas[int(key)] == pytest.approx(weight / row["weights"][0], abs=0.006)  # the browser keeps 2 decimals
    later = tokens.nth(q + 1).get_attribute("class")
    assert "future" in later and "query" in tokens.nth(q).get_attribute("class")
    assert f"{row['window']}-token window" in status.text_content()
    # the executed window is a band over the last window's tokens; the keys before it are struck through
    classes = [tokens.nth(j).get_attribute("class") for j in range(q + 1)]
    w = int(row["window"])
    assert [("inwin" in c, "cut" in c) for c in classes] == [(j > q - w, j <= q - w) for j in range(q + 1)]

    # the keyboard moves the query: focus, then the right arrow
    tokens.nth(q).focus()
    page.keyboard.press("ArrowRight")
    until(lambda: f"(position {q + 1})" in (status.text_content() or ""), "the arrow key to move the query")
    page.screenshot(path=str(REPO / "test-artifacts" / "lens-page.png"))
    page.close()


def _click_head(page, chart_key: str, layer: int, head: int) -> None:
    """Click the cell of ``layer``, ``head`` on the heatmap in the element keyed ``chart_key``."""
    _click_cell(page, chart_key, head, layer)


def _click_cell(page, chart_key: str, column: int, row: int) -> None:
    """Click the cell at x index ``column``, y index ``row`` of the heatmap keyed ``chart_key``."""
    heatmap = page.locator(f".st-key-{chart_key} .js-plotly-plot")
    wait_selector(page, f".st-key-{chart_key} .js-plotly-plot .main-svg", f"the heatmap {chart_key}")
    heatmap.scroll_into_view_if_needed()
    box = heatmap.bounding_box()
    x, y = page.evaluate(
        """([key, row, column]) => { const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        return [xa._offset + xa.l2p(column), ya._offset + ya.l2p(row)]; }""",
        [chart_key, row, column],
    )
    page.mouse.move(box["x"] + x - 20, box["y"] + y)
    page.mouse.move(box["x"] + x, box["y"] + y, steps=5)
    wait_selector(page, f".st-key-{chart_key} .hoverlayer .hovertext", f"the hover label of {chart_key}")
    page.mouse.click(box["x"] + x, box["y"] + y)


def _follow_to_lens(page, layer: int, head: int) -> None:
    link = page.get_by_role("link", name=re.compile(f"What L{layer}H{head} reads"))
    with waiting_for(f"the link to the Lens for L{layer}H{head}"):
        link.wait_for(timeout=PATIENCE_MS)
    settle(page)
    link.click()
    with waiting_for("the Lens page's heading"):
        page.get_by_role("heading", name="Lens", exact=True).first.wait_for(timeout=PATIENCE_MS)
    settle(page)
    with waiting_for(f"the Lens on L{layer}H{head}"):
        page.get_by_role("heading", name=f"L{layer}H{head}", exact=True).first.wait_for(timeout=PATIENCE_MS)


def test_a_head_clicked_on_the_windows_heatmap_opens_in_the_lens(server, browser):
    page = new_page(browser)
    open_page(page, f"{server}/windows?run=toy", "Windows")
    _click_head(page, "win_heatmap", 1, 3)
    _follow_to_lens(page, 1, 3)
    page.close()


def test_a_head_clicked_on_a_probe_heatmap_opens_in_the_lens(server, browser):
    page = new_page(browser, 1500, 1400)
    open_page(page, f"{server}/probes?run=toy", "Probes")
    _click_head(page, "probe_headline", 0, 2)
    _follow_to_lens(page, 0, 2)
    page.close()


@pytest.mark.slow  # the click path is the Windows heatmap's (default run); this, the lens's own map
def test_a_head_clicked_on_the_lens_distance_map_is_the_head_looked_through(server, browser, logs):
    from aah_viz.runlog import load_run

    n_head = int(load_run(logs / "toy").manifest["n_head"])
    page = new_page(browser, 1500, 1400)
    open_page(page, f"{server}/lens?run=toy&layer=0&head=0&doc=0", "Lens")
    _click_cell(page, "lens_map", 0, 1 * n_head + 2)  # the row of L1H2, the first distance bin
    with waiting_for("the Lens on L1H2 after the click on the distance map"):
        page.get_by_role("heading", name="L1H2", exact=True).first.wait_for(timeout=PATIENCE_MS)
    until(lambda: "layer=1" in page.url and "head=2" in page.url, "the clicked head in the address")
    page.close()
