"""One page of the real dashboard (``app.py`` through Streamlit's test runner) over a folder of runs, as the
tests open it: no reference tables, the page rendered without an exception."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from waiting import PATIENCE_S

from aah_viz.dashboard.app import PAGE_FILES

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def open_page(page: str, logs: Path, tmp_path: Path, monkeypatch) -> AppTest:
    """The app over the runs in ``logs`` (no reference tables), switched to ``page``."""
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at
