"""Live refresh measured as a user meets it, through Streamlit's test runner: what an idle tab costs the
server, and how long a new run takes to become a row of the Runs page (``aah-viz bench dashboard --pages
--runs N``).

Idle: a tab that has drawn its page once and then only runs live refresh's check (``live.check``) every
``live.INTERVAL_S`` seconds; each check is one script run here, so Streamlit's cost of a fragment run is
counted too. Beside it, the same looks taken the way they were before this module (every run's full stamp,
``session.run_stamp``) for the ratio.

New run: the Runs page drawn, then a run written beside the others (its first segments), then the rerun that
live refresh's check starts. The latency is the wait for the next check (at most ``live.INTERVAL_S``) plus
that rerun's wall time.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from aah_viz.dashboard.page_bench import clocks, env, since

NEW_RUN = "zz-new-run"
OLD_DISCOVERY_S = 5.0  # how often discovery walked the logs root before it watched the folders' times


def _idle_tab() -> None:  # the script of an idle tab (run by AppTest.from_function: its imports inside)
    import streamlit as st

    from aah_viz.dashboard import live, session

    if "drawn" not in st.session_state:
        session.overviews()  # the page drawn once: the tab knows which runs are being written
        st.session_state["drawn"] = True
    else:
        live.check()


def idle_cost(logs_root: Path, ticks: int = 10, timeout_s: float = 600.0) -> dict:
    """Server CPU seconds an idle tab costs per 30 s of live refresh, now and with every run's full stamp."""
    from streamlit.testing.v1 import AppTest

    from aah_viz.dashboard import live, session
    from aah_viz.runlog import discover_runs

    per_30s = 30.0 / live.INTERVAL_S
    with env(AAH_VIZ_LOGS=logs_root):
        at = AppTest.from_function(_idle_tab, default_timeout=timeout_s)
        at.run()  # the page drawn
        at.run()  # the first check takes the signature
        looks = []
        for _ in range(max(1, ticks)):
            start = clocks()
            at.run()
            looks.append(since(start)[0])
    root = str(logs_root)
    full, walks = [], []
    for _ in range(max(1, ticks)):
        start = clocks()
        keys = [p.relative_to(logs_root).as_posix() for p in discover_runs(logs_root)]
        walks.append(since(start)[0])
        start = clocks()
        tuple((k, session.run_stamp(root, k)) for k in keys)
        full.append(since(start)[0])
    now = statistics.median(looks)
    # before: every check took every run's full stamp, and discovery walked the tree every 5 s
    before = statistics.median(full) * per_30s + statistics.median(walks) * 30.0 / OLD_DISCOVERY_S
    return {
        "interval_s": live.INTERVAL_S,
        "check_cpu_s": round(now, 4),
        "idle_cpu_s_per_30s": round(now * per_30s, 3),
        "before_cpu_s_per_30s": round(before, 3),
        "ratio_before_over_now": round(before / max(now * per_30s, 1e-9), 2),
        "runs": len(keys),
    }


def new_run_latency(logs_root: Path, shape: dict, steps: int = 50, timeout_s: float = 600.0) -> dict:
    """Seconds from a new run's first segments to its row on the Runs page (the Runs page open already, its
    filter set to the new run's name: with many runs the row could be on a later page of the table)."""
    from streamlit.testing.v1 import AppTest

    from aah_viz.dashboard import live
    from aah_viz.dashboard.app import PAGE_DIR, PAGE_FILES
    from aah_viz.samples import make_synthetic_run

    with env(AAH_VIZ_LOGS=logs_root):
        at = AppTest.from_file(str(PAGE_DIR / "app.py"), default_timeout=timeout_s)
        at.query_params.update(filter="run", q=NEW_RUN)  # the user watches for it (else it may be on a later page)
        at.run()
        at.switch_page(PAGE_FILES["runs"]).run()
        at.run()  # warm: what a tab that has been open a while holds
        make_synthetic_run(Path(logs_root) / NEW_RUN, **shape, steps=steps, flush_every=steps, status="running")
        start = clocks()
        at.run()  # the rerun live refresh's check starts when it sees the new run
        cpu, wall = since(start)
        shown = bool(at.dataframe) and NEW_RUN in list(at.dataframe[0].value["run"])
    return {
        "found": shown,
        "rerun_cpu_s": round(cpu, 3),
        "rerun_wall_s": round(wall, 3),
        "latency_s_at_most": round(live.INTERVAL_S + wall, 3),
        "problems": [str(e.value)[:300] for e in at.exception],
    }


def measure_live(logs_root: Path, shape: dict, ticks: int = 10) -> dict:
    """The idle cost and the new run's latency (a run of ``shape``: layers, heads, T, windows); the new run is
    removed again."""
    import shutil

    idle = idle_cost(logs_root, ticks)
    t0 = time.perf_counter()
    try:
        latency = new_run_latency(logs_root, shape)
    finally:
        shutil.rmtree(Path(logs_root) / NEW_RUN, ignore_errors=True)
    return {"idle": idle, "new_run": latency, "seconds": round(time.perf_counter() - t0, 1)}
