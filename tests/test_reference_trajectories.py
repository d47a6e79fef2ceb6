"""Faithfulness to the reference: replay its recorded training trajectories forward by forward.

Each trajectory is a 200-step training run of the reference (2 layers, 8 heads, T = 64) in one of
the 10 paper and appendix routing configurations. Started from the same weights with the same
batches, optimiser and per-step calls, our model must reproduce every loss, executed window,
hierarchy (groups in order), head statistic and level feature. On a CPU whose capability has a
recording of its own that means ``==``; elsewhere it means within the stated tolerances of the
nearest recording, decisions equal except near ties (``reference_replay.replay_plan``). The header
of the test session says which mode ran. The data lives beside the repository (``../shared``);
without it these tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import reference_replay as rr  # noqa: E402

PLAN = rr.replay_plan()
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(PLAN is None, reason="reference trajectories (../shared) not present"),
]

NAMES = rr.trajectory_names(PLAN.folder) if PLAN else []
PREFIX_STEPS = 50  # warm-up, the first control updates and the first evaluation (after step 49)
HERE = Path(__file__).resolve().parent


def _assert_replays(name: str, max_steps: int | None) -> None:
    torch.set_num_threads(1)  # the reference was recorded on one thread
    doc, ours = rr.replay(name, max_steps=max_steps, folder=PLAN.folder, follow_near_ties=PLAN.mode == "tolerance")
    expected = [f for f in doc["forwards"] if max_steps is None or f["step"] < max_steps]
    assert len(ours.losses) == len(expected) > 0
    if PLAN.mode == "exact":
        diffs = rr.compare(doc, ours)
        assert all(not diffs[f] for f in rr.FIELDS), (PLAN.describe(), {f: d[:5] for f, d in diffs.items() if d})
        return
    report = rr.compare_within_tolerance(doc, ours)
    rr.REPORTS.append(f"{name} ({max_steps or 'all'} steps): {report.summary()}")
    assert report.passed, (PLAN.describe(), report.summary(), {f: d[:5] for f, d in report.diffs.items() if d})


@pytest.mark.parametrize("name", NAMES)
def test_first_fifty_steps_replay(name):
    _assert_replays(name, PREFIX_STEPS)


def test_full_adaptive_replays_over_the_whole_run():
    _assert_replays("main_full_adaptive_s0", None)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_whole_run_replays(name):
    _assert_replays(name, None)


# --- the check can fail, in both modes ---------------------------------------------------------


@pytest.fixture(scope="module")
def recording() -> dict:
    return json.loads((PLAN.folder / "main_full_adaptive_s0.json").read_text())


def _copy(replay: rr.Replay) -> rr.Replay:
    return rr.Replay(list(replay.losses), json.loads(json.dumps(replay.layers)))


def test_exact_mode_notices_a_difference(recording):
    """One changed value in any field is reported where it is (the recording itself as the replay,
    so that the check is shown to fail in either mode)."""
    doc = recording
    ours = _recorded_as_ours(doc)
    assert not any(rr.compare(doc, ours).values())
    ours.losses[3] += 1e-7
    ours.layers[10][0]["windows"][0] ^= 1
    ours.layers[0][1]["levels"][0].reverse()
    ours.layers[5][0]["head_stats"][0][2] += 1e-9
    ours.layers[0][0]["level_features"][0][0][0] = 0.0
    diffs = rr.compare(doc, ours)
    assert diffs == {
        "loss": ["train 3"],
        "path": [],
        "windows": ["train 10 L0"],
        "levels": ["train 0 L1"],
        "head_stats": ["train 5 L0"],
        "level_features": ["train 0 L0"],
    }


def _recorded_as_ours(doc: dict, steps: int = 12) -> rr.Replay:
    """The recording's first ``steps`` in our replay's format: what a perfect replay would give."""
    out = rr.Replay()
    for fwd in (f for f in doc["forwards"] if f["step"] < steps):
        out.losses.append(fwd["loss"])
        out.layers.append(
            [
                {
                    "path": ref["path"],
                    "windows": list(ref["executed_window_idx"]),
                    "levels": json.loads(json.dumps(ref["levels"])),
                    "level_features": json.loads(json.dumps(ref.get("level_features"))),
                    "head_stats": json.loads(json.dumps(ref["head_stats_entropy_norm_usage"])),
                    "levels_margin": 1.0,  # decisive, unless a test says otherwise
                    "windows_margin": 1.0,
                }
                for ref in fwd["layers"]
            ]
        )
    return out


def _swap_split(row: dict) -> None:
    """The two level-0 groups of a split in the other order, and every level above with them."""
    assert len(row["levels"][0]) == 2 and all(lvl == [[0], [1]] for lvl in row["levels"][1:]), row["levels"]
    row["levels"][0].reverse()
    for feats in row["level_features"]:
        feats.reverse()


def test_tolerance_mode_accepts_rounding_and_near_ties(recording):
    doc = recording
    perfect = _recorded_as_ours(doc)
    report = rr.compare_within_tolerance(doc, perfect)
    assert report.passed and not report.near_ties and report.compared_steps == 12
    assert all(v == 0.0 for v in report.worst.values())

    ours = _copy(perfect)
    ours.losses[3] *= 1 + 2e-6  # rounding of another CPU: inside FLOAT_RTOL
    ours.layers[5][0]["head_stats"][0][2] += 2e-6
    _swap_split(ours.layers[0][1])  # the groups of a split in the other order ...
    ours.layers[0][1]["levels_margin"] = 1e-7  # ... decided by a near tie
    report = rr.compare_within_tolerance(doc, ours)
    assert report.passed, report.summary()
    assert report.near_ties == ["train 0 L1"]
    assert 0.1 < report.worst["loss"] < 1.0 and 0.1 < report.worst["head_stats"] < 1.0
    assert report.worst["level_features"] == 0.0  # compared group by group, each with its twin


def test_tolerance_mode_notices_a_difference(recording):
    """Each field beyond tolerance, and a decision that was not a near tie, is reported where it is."""
    doc = recording
    ours = _recorded_as_ours(doc)
    ours.losses[3] *= 1 + 1e-4
    ours.layers[2][0]["path"] = "grouped_control_cached"
    ours.layers[10][0]["windows"][0] ^= 1  # a decisive window decision, changed
    ours.layers[0][1]["levels"][0].reverse()  # a decisive grouping, reordered
    ours.layers[5][0]["head_stats"][0][2] += 1e-3
    ours.layers[0][0]["level_features"][0][0][0] += 1e-3
    report = rr.compare_within_tolerance(doc, ours)
    assert not report.passed
    assert report.diffs == {
        "loss": ["train 3"],
        "path": ["train 2 L0"],
        "windows": ["train 10 L0"],
        "levels": ["train 0 L1"],
        "head_stats": ["train 5 L0"],
        "level_features": ["train 0 L0"],
    }
    assert report.near_ties == []


def test_tolerance_mode_stops_at_a_fork_and_bounds_it(recording):
    """A near tie that changes the executed windows forks the runs: compared up to there, and only
    accepted after the warm-up and the first control updates have been compared."""
    doc = recording
    ours = _recorded_as_ours(doc)
    ours.layers[10][0]["windows"][0] ^= 1
    ours.layers[10][0]["windows_margin"] = 0.0
    ours.losses[11] += 1.0  # after the fork: not compared
    report = rr.compare_within_tolerance(doc, ours)
    assert report.forked_at == "train 10 L0" and report.compared_steps == 10
    assert not any(report.diffs.values())
    assert not report.passed  # 10 < MIN_STEPS_BEFORE_FORK
    assert "forked at train 10 L0" in report.summary()


def test_too_many_near_ties_fail(recording):
    doc = recording
    ours = _recorded_as_ours(doc)
    for rows in ours.layers:
        for row in rows:
            if row["levels"] is not None:
                _swap_split(row)
                row["levels_margin"] = 0.0
    report = rr.compare_within_tolerance(doc, ours)
    assert len(report.near_ties) > rr.MAX_NEAR_TIE_SHARE * report.hierarchy_forwards > 0
    assert not any(report.diffs.values()) and not report.passed


def test_following_near_ties_keeps_another_cpus_recording_comparable():
    """Replayed against a recording of another capability, near-tie groupings tip the other way; the
    tolerance replay follows the recording there, and only there, so that the runs stay comparable."""
    other = [folder for cap, folder in rr.available_recordings().items() if folder != PLAN.folder]
    if not other or PLAN.mode != "exact":
        pytest.skip("needs this CPU's own recording and another one")
    torch.set_num_threads(1)
    doc, free = rr.replay("main_full_adaptive_s0", max_steps=60, folder=other[0])
    _, following = rr.replay("main_full_adaptive_s0", max_steps=60, folder=other[0], follow_near_ties=True)
    differing = rr.compare(doc, free)["levels"]
    assert differing and not free.followed
    assert not rr.compare(doc, following)["levels"]
    assert following.followed and following.followed[0] == differing[0]  # the first tie, where the runs part
    report = rr.compare_within_tolerance(doc, following)
    assert report.passed and report.near_ties == following.followed, report.summary()


# --- the plan ----------------------------------------------------------------------------------


def test_the_plan_follows_the_capability(tmp_path):
    for name in rr.RECORDINGS.values():
        (tmp_path / name).mkdir()
    assert rr.replay_plan("AVX512", tmp_path).mode == "exact"
    assert rr.replay_plan("AVX512", tmp_path).folder.name == rr.RECORDINGS["AVX512"]
    avx2 = rr.replay_plan("AVX2", tmp_path)
    assert (avx2.mode, avx2.folder.name) == ("exact", rr.RECORDINGS["AVX2"])
    for other, nearest in (("DEFAULT", "AVX2"), ("AVX2+mixed", "AVX2"), ("AVX512+mixed", "AVX512"), ("SVE256", "AVX2")):
        plan = rr.replay_plan(other, tmp_path)
        assert (plan.mode, plan.recorded_on) == ("tolerance", nearest), other
        assert "tolerance mode" in plan.describe()
    (tmp_path / rr.RECORDINGS["AVX2"]).rmdir()
    plan = rr.replay_plan("AVX2", tmp_path)
    assert (plan.mode, plan.recorded_on) == ("tolerance", "AVX512")
    (tmp_path / rr.RECORDINGS["AVX512"]).rmdir()
    assert rr.replay_plan("AVX2", tmp_path) is None


def test_forcing_torch_alone_is_a_mixed_capability():
    cap = torch.backends.cpu.get_cpu_capability()
    assert rr.dispatch_capability({}) == cap
    assert rr.dispatch_capability({"ATEN_CPU_CAPABILITY": cap.lower()}) == cap + "+mixed"
    full = {"ATEN_CPU_CAPABILITY": cap.lower(), **{v: cap for v in rr.LIBRARY_ISA_VARIABLES}}
    assert rr.dispatch_capability(full) == cap


# --- every recording, bit for bit, under its own kernels ---------------------------------------

FORCED_KERNELS = {
    "AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
}
LOWER_THAN = {"AVX512": ("AVX2",)}  # what a CPU of each capability can also run, kernel for kernel

CHILD = """
import sys, torch
sys.path.insert(0, {here!r})
import reference_replay as rr
torch.set_num_threads(1)
plan = rr.replay_plan()
assert plan.mode == "exact" and plan.recorded_on == {cap!r}, plan.describe()
bad = {{}}
for name in {names!r}:
    doc, ours = rr.replay(name, max_steps={steps!r}, folder=plan.folder)
    diffs = rr.compare(doc, ours)
    if any(diffs.values()):
        bad[name] = {{f: d[:3] for f, d in diffs.items() if d}}
print(plan.describe())
assert not bad, bad
"""


def _other_recordings() -> list[str]:
    if PLAN is None:
        return []
    return [cap for cap in rr.available_recordings() if cap != PLAN.capability]


def _replay_under(cap: str, names: list[str], steps: int | None) -> None:
    base = PLAN.capability.split("+")[0]
    if cap not in LOWER_THAN.get(base, ()) or cap not in FORCED_KERNELS:
        pytest.skip(
            f"this CPU ({PLAN.capability}) cannot run {cap} kernels: that recording is checked within tolerance"
        )
    env = {**os.environ, **FORCED_KERNELS[cap]}
    code = CHILD.format(here=str(HERE), cap=cap, names=names, steps=steps)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("cap", _other_recordings())
def test_another_capabilitys_recording_is_bit_identical_under_its_kernels(cap):
    """Where this CPU can run a lower capability's kernels (torch's dispatch, MKL and oneDNN limited
    together), that recording replays with ``==`` too: both sets are checked exactly on one machine."""
    _replay_under(cap, ["main_full_adaptive_s0", "appendix_control_off_s0", "appendix_no_parent_constraint_s0"], 30)


@pytest.mark.slow
@pytest.mark.parametrize("cap", _other_recordings())
def test_another_capabilitys_whole_runs_are_bit_identical_under_its_kernels(cap):
    _replay_under(cap, rr.trajectory_names(rr.available_recordings()[cap]), None)
