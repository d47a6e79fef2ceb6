"""The Probes page explains why the window-coreference correlation changes sign between all and
reachable antecedents (rho +0.86 beside -0.86 on the bundled full_adaptive sample)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from dashboard_pages import open_page

from aah_viz.probes.coref_reach import reach_note
from aah_viz.runlog import load_run
from aah_viz.runlog.paths import is_run

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_logs" / "full_adaptive_seed0"


def _assoc(every: float, reach: float) -> pd.DataFrame:
    return pd.DataFrame({"step": 5, "layer": [None, None, 0], "target": ["spearman:coref", "spearman:coref_reachable",
                         "spearman:coref"], "rho": [every, reach, 0.1], "degenerate": False})  # fmt: skip


def test_the_note_gives_both_numbers_and_the_reason_and_says_more_when_the_signs_differ():
    note = reach_note(_assoc(0.86, -0.86))
    assert "+0.86 over all antecedents, -0.86 over reachable ones" in note
    assert "beyond a head's window counts as a miss" in note and "opposite signs" in note and "smaller share" in note
    same = reach_note(_assoc(0.5, 0.2))
    assert "+0.50" in same and "opposite" not in same
    assert reach_note(_assoc(0.5, 0.2).iloc[[0, 2]]) is None  # no reachable row: nothing to explain


def test_the_probes_page_explains_the_sign_change_of_the_sample_run(tmp_path, monkeypatch):
    if not is_run(SAMPLE):
        pytest.skip(f"{SAMPLE} is not in this checkout")
    pooled = load_run(SAMPLE).table("window_association").query("layer != layer").set_index("target")["rho"]
    assert pooled["spearman:coref"] > 0 > pooled["spearman:coref_reachable"]  # the sample shows the case
    shutil.copytree(SAMPLE, tmp_path / "logs" / SAMPLE.name)
    at = open_page("probes", tmp_path / "logs", tmp_path, monkeypatch)
    notes = [c.value for c in at.caption if c.value.startswith("Coreference: rho")]
    assert len(notes) == 1
    assert f"{pooled['spearman:coref']:+.2f} over all antecedents" in notes[0] and "opposite signs" in notes[0]
