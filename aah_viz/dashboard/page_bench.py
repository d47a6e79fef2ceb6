"""Whole dashboard pages as users meet them, through Streamlit's own test runner
(``streamlit.testing.v1.AppTest``): the server's CPU time to draw each page, cold and warm.

Cold: every ``st.cache_data`` and ``st.cache_resource`` entry cleared, then the page drawn in a
session that has already opened the dashboard (the first visit to that page after a server start,
the imports done). Warm: the same page drawn again in the same session (a widget change that hits
the caches), the median over ``warm_rounds``. CPU seconds are the process's (``time.process_time``,
every thread: the script runner's too), which a loaded machine distorts less than wall time; wall
seconds come alongside.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

GOAL_WARM_CPU_S = 1.0
GOAL_COLD_CPU_S = 3.0


@contextmanager
def env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def clocks():
    return time.process_time(), time.perf_counter()


def since(start) -> tuple[float, float]:
    cpu, wall = clocks()
    return cpu - start[0], wall - start[1]


def _problems(at) -> list[str]:
    return [str(e.value)[:300] for e in at.exception] + [str(e.value)[:300] for e in at.error]


def measure_pages(
    logs_root: Path, warm_rounds: int = 3, pages=None, timeout_s: float = 600.0, progress=None, address=None
) -> dict:
    """{page url: {cold_cpu_s, warm_cpu_s, cold_wall_s, warm_wall_s, warm_cpu_times, problems}};
    ``address``: the query parameters ({name: value}) the dashboard is opened with (a run, a head, ...)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from aah_viz.dashboard.app import PAGE_DIR, PAGE_FILES

    entry = str(PAGE_DIR / "app.py")
    out = {}
    with env(AAH_VIZ_LOGS=logs_root):
        for url, file in PAGE_FILES.items():
            if pages and url not in pages:
                continue
            at = AppTest.from_file(entry, default_timeout=timeout_s)
            at.query_params.update(address or {})  # as a copied link opens it
            at.run()  # the dashboard opened (its landing page), as a user arrives
            st.cache_data.clear()
            st.cache_resource.clear()
            start = clocks()
            at.switch_page(file).run()
            cold_cpu, cold_wall = since(start)
            problems = _problems(at)
            warm = []
            for _ in range(max(1, warm_rounds)):
                start = clocks()
                at.run()
                warm.append(since(start))
            out[url] = {
                "cold_cpu_s": round(cold_cpu, 3),
                "warm_cpu_s": round(statistics.median(c for c, _ in warm), 3),
                "cold_wall_s": round(cold_wall, 3),
                "warm_wall_s": round(statistics.median(w for _, w in warm), 3),
                "warm_cpu_times": [round(c, 3) for c, _ in warm],
                "problems": problems,
                "within_goal": cold_cpu <= GOAL_COLD_CPU_S
                and statistics.median(c for c, _ in warm) <= GOAL_WARM_CPU_S
                and not problems,
            }
            if progress is not None:
                progress.update(1)
    return out
