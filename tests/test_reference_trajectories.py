"""Faithfulness to the reference: replay its recorded training trajectories forward by forward.

Each trajectory is a 200-step training run of the reference (2 layers, 8 heads, T = 64) in one of
the 10 paper and appendix routing configurations. Started from the same weights with the same
batches, optimiser and per-step calls, our model must reproduce every loss, executed window,
hierarchy (groups in order), head statistic and level feature. Against the recording made on this
very machine (every field of its fingerprint equal) that means ``==``; against every other
recording it means within the stated tolerances, decisions equal except near ties
(``reference_replay.replay_plan``). The header of the test session says which mode ran and why.
The data lives beside the repository (``../shared``); without it these tests skip.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import machine_fingerprint as fp  # noqa: E402
import reference_replay as rr  # noqa: E402

PLAN = rr.replay_plan()
FOREIGN = rr.foreign_plans(PLAN)
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(PLAN is None, reason="reference trajectories (../shared) not present"),
]

NAMES = rr.trajectory_names(PLAN.folder) if PLAN else []
PREFIX_STEPS = 50  # warm-up, the first control updates and the first evaluation (after step 49)


def _assert_replays(plan: rr.ReplayPlan, name: str, max_steps: int | None) -> None:
    torch.set_num_threads(fp.REPLAY_THREADS)  # the reference was recorded on one thread
    doc, ours = rr.replay(name, plan.folder, max_steps=max_steps, follow_near_ties=plan.mode == "tolerance")
    expected = [f for f in doc["forwards"] if max_steps is None or f["step"] < max_steps]
    assert len(ours.losses) == len(expected) > 0
    if plan.mode == "exact":
        diffs = rr.compare(doc, ours)
        assert all(not diffs[f] for f in rr.FIELDS), (plan.describe(), {f: d[:5] for f, d in diffs.items() if d})
        return
    report = rr.compare_within_tolerance(doc, ours)
    rr.REPORTS.append(f"{plan.folder.name}/{name} ({max_steps or 'all'} steps): {report.summary()}")
    assert report.passed, (plan.describe(), report.summary(), {f: d[:5] for f, d in report.diffs.items() if d})


@pytest.mark.parametrize("name", NAMES)
def test_first_fifty_steps_replay(name):
    _assert_replays(PLAN, name, PREFIX_STEPS)


def test_full_adaptive_replays_over_the_whole_run():
    _assert_replays(PLAN, "main_full_adaptive_s0", None)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_whole_run_replays(name):
    _assert_replays(PLAN, name, None)


# --- every other machine's recording, within tolerance ------------------------------------------

FOREIGN_CASES = [(plan, name) for plan in FOREIGN for name in rr.trajectory_names(plan.folder)]


def _case_id(case) -> str:
    return f"{case[0].folder.name}-{case[1]}"


@pytest.mark.parametrize("case", FOREIGN_CASES, ids=[_case_id(c) for c in FOREIGN_CASES])
def test_another_machines_recording_replays_within_tolerance(case):
    """No machine fails because it is not the one that recorded: every recording made elsewhere
    replays here in tolerance mode (first fifty steps; the whole runs are slow-marked)."""
    plan, name = case
    _assert_replays(plan, name, PREFIX_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("case", FOREIGN_CASES, ids=[_case_id(c) for c in FOREIGN_CASES])
def test_another_machines_whole_runs_replay_within_tolerance(case):
    plan, name = case
    _assert_replays(plan, name, None)


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


def test_following_near_ties_keeps_another_machines_recording_comparable():
    """Replayed against a recording of another machine, near-tie groupings tip the other way; the
    tolerance replay follows the recording there, and only there, so that the runs stay comparable."""
    torch.set_num_threads(fp.REPLAY_THREADS)
    for plan in FOREIGN:
        doc, free = rr.replay("main_full_adaptive_s0", plan.folder, max_steps=60)
        if rr.compare(doc, free)["levels"]:
            break
    else:
        pytest.skip("no recording of another machine whose groupings tip the other way here in 60 steps")
    _, following = rr.replay("main_full_adaptive_s0", plan.folder, max_steps=60, follow_near_ties=True)
    differing = rr.compare(doc, free)["levels"]
    assert differing and not free.followed
    assert not rr.compare(doc, following)["levels"]
    assert following.followed and following.followed[0] == differing[0]  # the first tie, where the runs part
    report = rr.compare_within_tolerance(doc, following)
    assert report.passed and report.near_ties == following.followed, report.summary()


# --- the plan ------------------------------------------------------------------------------------

FULL = {
    "machine": "x86_64",
    "cpu_vendor": "GenuineIntel",
    "cpu_model": "Some CPU",
    "isa_flags": ["avx", "avx2", "avx512f", "fma"],
    "torch": "2.13.0+cpu",
    "torch_capability": "AVX512",
    "mkl": "2024.2",
    "onednn": "3.12.0",
    "threads": 1,
    "kernel_env": {},
}


def _recording(root, name: str, fingerprint: dict | None) -> None:
    (root / name).mkdir()
    if fingerprint is not None:
        (root / name / "fingerprint.json").write_text(json.dumps(fingerprint))


def test_exact_only_where_every_fingerprint_field_is_equal(tmp_path):
    _recording(tmp_path, "trajectories-here", FULL)
    _recording(tmp_path, "trajectories-avx2", {**FULL, "cpu_model": "Other", "torch_capability": "AVX2"})
    _recording(tmp_path, "trajectories-unknown", None)
    plan = rr.replay_plan(FULL, tmp_path)
    assert (plan.mode, plan.folder.name) == ("exact", "trajectories-here")
    assert "bit for bit" in plan.describe() and "every fingerprint field equal" in plan.describe()
    assert sorted(p.folder.name for p in rr.foreign_plans(plan, tmp_path)) == [
        "trajectories-avx2",
        "trajectories-unknown",
    ]
    assert {p.mode for p in rr.foreign_plans(plan, tmp_path)} == {"tolerance"}

    # the same instruction set on another CPU model, or other library versions, or limited kernels:
    # never exact; the nearest recording (same capability first) within tolerance, saying why
    for field, value in (
        ("cpu_model", "Intel(R) Xeon(R) Processor"),
        ("isa_flags", FULL["isa_flags"] + ["amx_tile"]),
        ("mkl", "2025.0"),
        ("kernel_env", {"ATEN_CPU_CAPABILITY": "avx2"}),
    ):
        foreign = {**FULL, field: value}
        plan = rr.replay_plan(foreign, tmp_path)
        assert (plan.mode, plan.folder.name) == ("tolerance", "trajectories-here"), field
        assert "tolerance mode" in plan.describe() and f"{field} " in plan.describe(), plan.describe()
    # the other machine is exact against its own recording, and its nearest is that one's capability
    plan = rr.replay_plan({**FULL, "cpu_model": "Other", "torch_capability": "AVX2"}, tmp_path)
    assert (plan.mode, plan.folder.name) == ("exact", "trajectories-avx2")
    plan = rr.replay_plan({**FULL, "cpu_model": "Third", "torch_capability": "AVX2"}, tmp_path)
    assert (plan.mode, plan.folder.name) == ("tolerance", "trajectories-avx2")
    assert plan.why() == "not recorded on this machine: cpu_model Third here, Other there"


def test_a_recording_without_a_full_fingerprint_is_never_exact(tmp_path):
    partial = {k: v for k, v in FULL.items() if k != "onednn"}
    _recording(tmp_path, "trajectories", partial)
    plan = rr.replay_plan(FULL, tmp_path)
    assert plan.mode == "tolerance" and "onednn 3.12.0 here, ? there" in plan.why()
    assert rr.replay_plan(FULL, tmp_path / "absent") is None


def test_the_stored_fingerprint_comes_before_the_known_machines(tmp_path):
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"recordings": {"trajectories": {"fingerprint": {"torch_capability": "AVX2"}}}}))
    (tmp_path / "trajectories").mkdir()
    assert rr.recording_fingerprint(tmp_path / "trajectories", known) == {"torch_capability": "AVX2"}
    (tmp_path / "trajectories" / "fingerprint.json").write_text(json.dumps(FULL))
    assert rr.recording_fingerprint(tmp_path / "trajectories", known) == FULL
    case_file = tmp_path / "clustering.json"
    case_file.write_text("{}")
    assert rr.recording_fingerprint(case_file, known) is None
    (tmp_path / "clustering.json.fingerprint.json").write_text(json.dumps(FULL))
    assert rr.recording_fingerprint(case_file, known) == FULL


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse sse2 avx smep smap f16c fma avx2 avx512f amx_tile avx_vnni

processor\t: 1
vendor_id\t: SomethingElse
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes sha2 crc32 atomics fphp asimdhp asimddp sve sve2 bf16 i8mm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 1
"""


def test_the_fingerprint_reads_x86_and_arm_cpus():
    x86 = fp.cpuinfo_fields(X86_CPUINFO)
    assert x86 == {
        "cpu_vendor": "GenuineIntel",
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "isa_flags": ["amx_tile", "avx", "avx2", "avx512f", "avx_vnni", "f16c", "fma"],  # not smep/smap
    }
    arm = fp.cpuinfo_fields(ARM_CPUINFO)
    assert arm["cpu_vendor"] == "0x41"
    assert arm["cpu_model"] == "cpu architecture 8 cpu variant 0x0 cpu part 0xd4f cpu revision 1"
    assert arm["isa_flags"] == ["asimd", "asimddp", "asimdhp", "bf16", "fphp", "i8mm", "sve", "sve2"]


def test_the_fingerprint_names_the_kernel_limits_and_the_libraries():
    here = fp.this_machine(environ={})
    assert set(here) == set(fp.FIELDS)
    assert here["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert here["torch"] == torch.__version__
    limited = fp.this_machine(environ={"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    assert limited["kernel_env"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert not fp.matches(limited, here) and fp.matches(here, here)
    shown = torch.__config__.show()
    versions = fp.library_versions(shown)
    assert ("Math Kernel Library" in shown) == (versions["mkl"] != "none")
    assert fp.library_versions("no libraries") == {"mkl": "none", "onednn": "none"}
