"""The dashboard family of ``scripts/adversarial_pass.py``: a Streamlit server bound to 127.0.0.1 on the hostile
logs root, and Debian Chromium (playwright) opening each page with bad query strings, unknown runs, path
traversal in run names and each damaged run selected. An address is clear when its script run finishes
without a Streamlit exception, a traceback or decoy text on the page, and nothing outside changed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from adversarial_cases import DECOY

import aah_viz

REPO = Path(aah_viz.__file__).resolve().parents[1]  # the checkout whose code is under test (PYTHONPATH)
CHROMIUM = "/usr/bin/chromium"
PAGES = ["runs", "frontier", "training", "hierarchy", "windows", "stability", "probes", "lens", "compare"]
PAGES += ["export", "glossary", "guide"]
# every bound parameter at once, each with a value it cannot take (one address per page)
HOSTILE = "run=../../../../etc/passwd&range=inf,5&layer=-1&head=99999999999999999999999&step=nan"
HOSTILE += "&sel=..~..%2F..%2Fetc~good&doc=-1&lens_doc=1e400&query=999999999&level=-5&smooth=inf&x=%3Cscript%3E"
TRAVERSAL = ["run=%2Fetc%2Fpasswd", "run=outside/decoy-heads", "run=unknown-run", "range=1e400,2", "range=-inf,inf"]
PAGE_DEADLINE_S = 120  # a page whose script run has not finished by then counts as a hang


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(logs: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = dict(os.environ, AAH_VIZ_LOGS=str(logs), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.headless", "true"]
    cmd += ["--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the Streamlit server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the Streamlit server did not answer its health check in 300 s")


def _visit(page, url: str) -> tuple[str, str]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.goto(url, wait_until="domcontentloaded", timeout=PAGE_DEADLINE_S * 1000)
        page.wait_for_selector('[data-testid="stApp"]', timeout=PAGE_DEADLINE_S * 1000)
        try:
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="attached", timeout=2000)
        except PlaywrightTimeout:
            pass
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=PAGE_DEADLINE_S * 1000)
    except PlaywrightTimeout:
        return "hang", "the page's script run did not finish"
    text = page.inner_text("body")
    if page.locator('[data-testid="stException"]').count():
        shown = page.locator('[data-testid="stException"]').first.inner_text()
        return "page exception", " ".join(shown.split())[:300]
    if "Traceback (most recent call last)" in text:
        return "traceback", "a traceback shown on the page"
    if DECOY.decode() in text or "root:x:0:0" in text:
        return "security", "text from outside the logs root shown on the page"
    return "clear", ""


def addresses(p: dict) -> list[str]:
    out = [address for page in PAGES for address in (page, f"{page}?{HOSTILE}")]
    out += [f"training?{q}" for q in TRAVERSAL]
    out += [f"training?run={name}" for name in p["synthetic"]]
    out.append("compare?sel=" + "~".join(["good", *p["synthetic"]]))
    return out


def dashboard_cases(p: dict, watched: list[Path], tree_state) -> list[dict]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        print("no /usr/bin/chromium: the dashboard family is left out", file=sys.stderr)
        return []
    proc, url = _serve(p["logs"])
    results = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            todo = addresses(p)
            for i, address in enumerate(todo, 1):
                before = [tree_state(w) for w in watched]
                started = time.monotonic()
                outcome, why = _visit(page, f"{url}/{address}")
                if outcome == "hang":  # a fresh page: the stuck one may keep its script run going
                    page.close()
                    page = browser.new_page(viewport={"width": 1400, "height": 2000})
                if [tree_state(w) for w in watched] != before:
                    outcome, why = "security", "a file outside the logs root changed or appeared"
                seconds = time.monotonic() - started
                results.append(dict(family="dashboard addresses", case=address, code=None, outcome=outcome, why=why,
                                    seconds=round(seconds, 2)))  # fmt: skip
                print(f"[{i}/{len(todo)}] {outcome:10s} dashboard: {address} ({seconds:.1f} s)", file=sys.stderr)
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return results
