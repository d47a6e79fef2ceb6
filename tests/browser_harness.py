"""The dashboard in Debian Chromium: a Streamlit server on 127.0.0.1, a browser, and page waits.

Every wait goes through :mod:`waiting`: a deadline of minutes that names what it waited for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from waiting import PATIENCE_MS, PATIENCE_S, until, waiting_for

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def need_chromium() -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed at /usr/bin/chromium (./dev test installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def wait_healthy(url: str, proc: subprocess.Popen, what: str) -> None:
    """Until the server at ``url`` answers its health check; a server that exits ends the wait at once."""

    def answered() -> bool:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            pytest.fail(f"{what} exited with {proc.returncode} before answering on {url}: {out[-2000:]}")
        return _healthy(url)

    until(answered, f"{what} to answer its health check on {url}", interval=0.5)


@contextmanager
def streamlit_app(logs: Path):
    """``streamlit run app.py`` of this checkout on a free port, reading ``logs``; yields its address."""
    port = free_port()
    env = dict(os.environ, AAH_VIZ_LOGS=str(logs), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"),
        "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, "the Streamlit server")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def new_page(browser, width: int = 1400, height: int = 2400):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(PATIENCE_MS)  # every Playwright wait: minutes, never one
    return page


def settle(page) -> None:
    """Wait until the script run finished: the status widget (running man) is gone."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with waiting_for("the Streamlit app to mount"):
        page.wait_for_selector('[data-testid="stApp"]', timeout=PATIENCE_MS)
    try:  # the widget appears once the rerun starts; a rerun that already finished shows none
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="attached", timeout=2000)
    except PlaywrightTimeout:
        pass
    with waiting_for(f"the script run of {page.url} to finish (the status widget to go)"):
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=PATIENCE_MS)


def open_page(page, url: str, title: str) -> None:
    """Go to ``url`` and wait for the page titled ``title`` to finish its script run."""
    page.goto(url, wait_until="domcontentloaded", timeout=PATIENCE_MS)
    with waiting_for(f"the heading {title!r} at {url}"):
        page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=PATIENCE_MS)
    settle(page)


def wait_selector(page, selector: str, what: str, state: str = "visible") -> None:
    with waiting_for(f"{what} ({selector} {state})"):
        page.wait_for_selector(selector, state=state, timeout=PATIENCE_MS)
