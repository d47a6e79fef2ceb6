"""Text from an address, a run's names and manifest, and its tables stays text on every page.

A hostile ``?run=`` value (Markdown link and image, bare URLs, ``www.``, an e-mail address, HTML,
Streamlit's colour and icon directives) and a run whose folder name, ``run_id``, manifest fields
and probe table cells carry the same are shown on every page in Debian Chromium. No page may hold
an anchor or image that leads off the dashboard's own host, nor ask the network for one, and the
directives must show as the characters they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote, urljoin, urlparse

import pandas as pd
import pytest
from browser_harness import ARTIFACTS, chromium, need_chromium, new_page, open_page, streamlit_app
from waiting import TEST_S

from aah_viz.dashboard.app import PAGES as APP_PAGES

# every page of the dashboard by its address (the first is served at the root), as the entry point lists them
PAGES = [("" if i == 0 else url, title) for i, (_, title, url) in enumerate(APP_PAGES)]
N_LAYER, N_HEAD, STEPS = 2, 4, 60
EVIL = "evil.example"
LINKS = "[Session expired, sign in](https://evil.example/login) ![b](https://evil.example/t.png)"
BARE = "www.evil.example/w me@evil.example https://evil.example/bare"
HTML = "<img src=https://evil.example/h.png> <a href='https://evil.example/a'>a</a>"
DIRECTIVES = ":red[RED] :material/home:"
HOSTILE = f"{LINKS} {BARE} {HTML} {DIRECTIVES}"
# a folder name cannot hold "/": the same ideas in a file name
HOSTILE_KEY = "www.evil.example me@evil.example [x](https:evil.example) :red[RED] :material/home:"
INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(TEST_S)]


def _hostile_run(logs: Path) -> Path:
    from test_figures_registry import add_probe_tables  # tests/ is on sys.path under pytest

    from aah_viz.runlog import RunWriter
    from aah_viz.samples import make_synthetic_run

    run = make_synthetic_run(logs / HOSTILE_KEY, regime="full_adaptive", seed=3, n_layer=N_LAYER, n_head=N_HEAD,
                             steps=STEPS)  # fmt: skip
    add_probe_tables(run, N_LAYER, N_HEAD, STEPS - 2)
    w = RunWriter.resume(run)
    step = STEPS - 1  # the newest probe step: the one the pages show
    w.append("probe_relations", pd.DataFrame({
        "step": [step], "relation": [HOSTILE], "count": [10], "best_layer": [0], "best_head": [1],
        "direction": [HOSTILE], "best_acc": [0.7], "baseline_offset": [1], "baseline_acc": [0.5], "delta": [0.2],
        "delta_ci_low": [0.1], "delta_ci_high": [0.3], "positional": [False], "positional_offset": [1],
        "positional_share": [0.2], "n_sentences": [5], "labels": [HOSTILE], "context": [HOSTILE],
    }))  # fmt: skip
    w.append("comparisons", pd.DataFrame([dict(
        step=step, level=0, layer=layer, target=HOSTILE, ari=0.1, null_mean=0.0, null_p95=0.1, p_value=0.3,
        n_heads=N_HEAD, n_groups=2, n_probe_clusters=2, n_layers=1, degenerate=layer == 0,
        reason=HOSTILE if layer == 0 else "", partition_verdict=HOSTILE,
    ) for layer in range(N_LAYER)]))  # fmt: skip
    w.close("finished")
    manifest_file = run / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest.update(run_id=HOSTILE, data=HOSTILE, preset=HOSTILE, model=HOSTILE, regime=HOSTILE)
    manifest_file.write_text(json.dumps(manifest))
    return run


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need_chromium()
    from aah_viz.samples import make_synthetic_run

    logs = tmp_path_factory.mktemp("hostile_logs")
    make_synthetic_run(logs / "plain-s0", regime="shallow_freeze", seed=0, n_layer=N_LAYER, n_head=N_HEAD,
                       steps=STEPS)  # fmt: skip
    _hostile_run(logs)
    with streamlit_app(logs) as url:
        yield url


# every element that can lead somewhere or fetch something, with the address it names
REFS_JS = """() => [...document.querySelectorAll('a, area, img, image, iframe, source, video, audio, object, embed')]
  .map(e => [e.tagName, e.getAttribute('href') || e.getAttribute('xlink:href') || e.getAttribute('src')
             || e.getAttribute('srcset') || e.getAttribute('data') || ''])"""


def _off_host(ref: str, base: str) -> bool:
    if ref == "" or ref.startswith("#"):
        return False
    url = urlparse(urljoin(base, ref))
    if url.scheme in ("data", "blob", "about"):
        return False
    return url.hostname != urlparse(base).hostname  # mailto:, javascript: and every other host


def _check_page(page, base: str, where: str, fetched: list[str], shown: bool) -> None:
    """``shown``: the hostile text must be on the page (the box that refuses the query value)."""
    refs = page.evaluate(REFS_JS)
    off = [(tag, ref) for tag, ref in refs if _off_host(ref, base)]
    assert not off, f"{where}: elements leading off the dashboard: {off}"
    text = INVISIBLE.sub("", page.locator('[data-testid="stApp"]').inner_text())
    if shown:
        assert "Session expired" in text and "www.evil.example/w me@evil.example" in text, f"{where}: not shown"
    # a directive shows its characters: RED only inside ":red[RED]", no icon named home
    # (a whole word: the Guide's docs name RETIRED_KEYS)
    assert len(re.findall(r"\bRED\b", text)) == text.count(":red[RED]"), f"{where}: a colour directive rendered"
    icons = page.locator('[data-testid="stIconMaterial"]').all_inner_texts()
    assert "home" not in icons, f"{where}: an icon directive rendered"
    assert page.locator('[data-testid="stException"]').count() == 0, f"{where}: a Streamlit exception is shown"
    foreign = [u for u in fetched if urlparse(u).hostname not in (urlparse(base).hostname, None)]
    assert not foreign, f"{where}: the browser asked the network for {foreign}"


def test_hostile_text_renders_as_text_on_every_page(server):
    with chromium() as browser:
        page = new_page(browser)
        fetched: list[str] = []
        page.on("request", lambda r: fetched.append(r.url))
        for path, title in PAGES:
            for query in (HOSTILE, HOSTILE_KEY):
                where = f"/{path}?run={query[:20]}..."
                open_page(page, f"{server}/{path}?run={quote(query, safe='')}", title)
                page.screenshot(path=str(ARTIFACTS / f"hostile-{path or 'runs'}-{len(query)}.png"))
                # the hostile query value is refused in a box on every page; the Runs page lists the hostile
                # run in its table, which the browser draws on a canvas (no markup, no links: nothing to find)
                _check_page(page, server, where, fetched, shown=query == HOSTILE)
        page.close()
