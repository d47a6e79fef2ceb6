"""Comparing runs on the dashboard (issue 28) and pages that show only what they can (issue 29 item 9),
through ``streamlit.testing.v1.AppTest`` on real run directories: the bundled sample logs and
synthetic runs written here."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from aah_viz.dashboard.app import PAGE_DIR, PAGES

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
SAMPLE_LOGS = REPO / "sample_logs"
PROBE_ONLY = "minilm_pud_gap"  # MiniLM probed at T = 510 beside the trained runs at T = 128
PAGE_FILES = {m.rsplit("/", 1)[-1]: str(PAGE_DIR / f"{m}.py") for m, _, _ in PAGES}

pytestmark = pytest.mark.timeout(600)


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(PAGE_FILES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def captions(at: AppTest) -> list[str]:
    return [c.value.replace("\\", "") for c in at.caption]


@pytest.fixture
def samples(monkeypatch, tmp_path):
    if not (SAMPLE_LOGS / PROBE_ONLY / "manifest.json").is_file():
        pytest.skip("the bundled sample logs are not in this checkout")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(SAMPLE_LOGS))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "none"))
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    assert not at.exception
    return at


def test_export_opens_on_the_largest_configuration_and_names_the_probe_only_run(samples):
    at = goto(samples, "export")
    assert not at.error, [e.value for e in at.error]
    config = at.selectbox(key="exp_config")
    assert config.value.startswith("T128_") and any(o.startswith("T510_") for o in config.options)
    left = [c for c in captions(at) if c.startswith("Left out")]
    assert len(left) == 1 and PROBE_ONLY in left[0]
    preview = at.dataframe[0].value
    assert len(preview) and not preview.astype(str).apply(lambda c: c.str.contains(PROBE_ONLY)).any().any()


def test_compare_and_windows_leave_the_probe_only_run_out_and_say_so(samples):
    at = goto(samples, "compare")
    regimes = at.dataframe[0].value["regime"].tolist()
    assert "external" not in regimes and "full_adaptive" in regimes
    assert any(c.startswith("Left out") and PROBE_ONLY in c for c in captions(at))
    at = goto(at, "windows")
    assert PROBE_ONLY not in at.multiselect(key="win_compare_pick").options
    assert any(c.startswith("Left out") and PROBE_ONLY in c for c in captions(at))


def test_the_probe_only_run_shows_no_nan_in_its_header(samples):
    samples.query_params["run"] = PROBE_ONLY
    at = goto(samples, "windows")
    assert at.selectbox(key="run_picker").value == PROBE_ONLY
    shown = {m.label: m.value for m in at.metric}
    assert "nan" not in " ".join(shown.values()).lower(), shown
    assert not at.error, [e.value for e in at.error]
