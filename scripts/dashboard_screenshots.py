"""The screenshots of docs/dashboard.md, taken from the running dashboard so they stay current.

    python scripts/dashboard_screenshots.py [--logs sample_logs] [--out docs] [--only lens ...]

Starts ``streamlit run app.py`` on a copy of the logs root (127.0.0.1, a free port), opens Debian
Chromium (``/usr/bin/chromium``, through Playwright) at 1500 x 1000, and writes
``dashboard-frontier.png``, ``dashboard-training-live.png`` (a tiny ``aah-viz train`` run writing while
the page is open), ``dashboard-compare.png``, ``dashboard-stability.png`` and ``lens-page.png`` (the
README's and docs/lens.md's: SmolLM2's adapted windows beside full attention, 1500 x 1240) into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
PATIENCE_MS = 300_000  # a deadline far beyond any plausible machine, never a speed
SIZE = {"width": 1500, "height": 1000}
SHOTS = ("frontier", "compare", "stability", "training", "lens")
# the lens of docs/lens.md: SmolLM2's L14H3 from token 74 of a GAP snippet, adapted windows beside full attention
LENS_RUN = "smollm2_wikitext/frontier-full_adaptive"
LENS_QUERY = {"layer": 14, "head": 3, "doc": 2, "query": 74, "lens_vs": "smollm2_wikitext/lens-full_attention#2"}


def fail(message: str) -> None:
    print(f"dashboard_screenshots: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + PATIENCE_MS / 1000
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"the Streamlit server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    fail(f"the Streamlit server did not answer on {url}")


def shoot(page, url: str, title: str, path: Path, ready: str, scroll: bool = False) -> None:
    """``url`` once ``ready`` has drawn and no rerun is running; ``scroll``: that element in the middle of the
    screen (a chart below the page's words), else the page's top."""
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=PATIENCE_MS)
    page.wait_for_selector(ready, timeout=PATIENCE_MS)
    idle = '[data-testid="stStatusWidget"]'
    page.wait_for_selector(idle, state="detached", timeout=PATIENCE_MS)
    if scroll:
        page.locator(ready).first.evaluate("e => e.scrollIntoView({block: 'center'})")
    page.wait_for_timeout(1000)  # plotly's transitions
    # a live run's page reruns on its own: shoot between two reruns, never a page greyed out mid-run
    page.wait_for_selector(idle, state="detached", timeout=PATIENCE_MS)
    page.screenshot(path=str(path))
    print(f"wrote {path}")


def start_live_run(logs: Path, env: dict) -> subprocess.Popen:
    """A tiny aah-viz train run writing into the logs root, once its first scalars are there."""
    train = subprocess.Popen(
        [sys.executable, "-m", "aah_viz", "train", "--out", str(logs / "live-run"), "--preset", "tiny",
         "--steps", "400", "--n-docs", "24", "--no-progress", "--threads", "1", "--flush-every", "5"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + PATIENCE_MS / 1000
    while not (logs / "live-run" / "scalars").is_dir() and time.monotonic() < deadline:
        time.sleep(0.5)
    return train


def shoot_lens(page, url: str, path: Path) -> None:
    """The Lens page with two token views side by side, once both show the pinned query."""
    from urllib.parse import urlencode

    page.set_viewport_size({"width": 1500, "height": 1240})
    page.goto(f"{url}/lens?{urlencode({'run': LENS_RUN, **LENS_QUERY})}", wait_until="domcontentloaded")
    page.get_by_role("heading", name="Lens", exact=True).first.wait_for(timeout=PATIENCE_MS)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=PATIENCE_MS)
    page.wait_for_function("document.querySelectorAll('iframe').length >= 2", timeout=PATIENCE_MS)
    for i in range(2):
        page.frame_locator("iframe").nth(i).locator(".tok.query").wait_for(timeout=PATIENCE_MS)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(path))
    page.set_viewport_size(SIZE)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", default=str(ROOT / "sample_logs"), help="logs root to show (copied first)")
    parser.add_argument("--out", default=str(ROOT / "docs"), help="folder the PNG files go to")
    parser.add_argument("--only", nargs="+", choices=SHOTS, default=SHOTS, help="take only these screenshots")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        fail(f"Debian chromium is not installed at {CHROMIUM}")
    if not Path(args.logs).is_dir():
        fail(f"no logs root at {args.logs}: give --logs DIR")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        shutil.copytree(args.logs, logs)
        port = free_port()
        env = dict(os.environ, AAH_VIZ_LOGS=str(logs), OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port),
               "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]  # fmt: skip
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        train = None
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, server)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport=SIZE)
                page.set_default_timeout(PATIENCE_MS)
                if "frontier" in args.only:
                    shoot(page, f"{url}/frontier", "Frontier", out / "dashboard-frontier.png",
                          ".st-key-frontier_fig .main-svg")  # fmt: skip
                if "compare" in args.only:
                    shoot(page, f"{url}/compare", "Compare", out / "dashboard-compare.png",
                          ".st-key-cmp_metrics .main-svg", scroll=True)  # fmt: skip
                if "stability" in args.only:
                    shoot(page, f"{url}/stability", "Stability", out / "dashboard-stability.png",
                          ".js-plotly-plot .main-svg")  # fmt: skip
                if "lens" in args.only:
                    shoot_lens(page, url, out / "lens-page.png")
                if "training" in args.only:
                    train = start_live_run(logs, env)
                    shoot(page, f"{url}/training?run=live-run", "Training", out / "dashboard-training-live.png",
                          ".st-key-tr_fig_loss .main-svg")  # fmt: skip
                browser.close()
        finally:
            for proc in (train, server):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait()


if __name__ == "__main__":
    main()
