"""Bit-exactness with the reference: replay its recorded training trajectories forward by forward.

Each trajectory is a 200-step training run of the reference (2 layers, 8 heads, T = 64) in one of
the 10 paper and appendix routing configurations. Started from the same weights with the same
batches, optimiser and per-step calls, our model must reproduce every loss, executed window,
hierarchy (groups in order), head statistic and level feature exactly (``==``). The data lives
beside the repository (``../shared``); without it these tests skip.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reference_replay import FIELDS, TRAJECTORIES, compare, replay, trajectory_names  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason="reference trajectories (../shared) not present"),
]

NAMES = trajectory_names() if TRAJECTORIES.is_dir() else []
PREFIX_STEPS = 50  # warm-up, the first control updates and the first evaluation (after step 49)


def _assert_identical(name: str, max_steps: int | None) -> None:
    torch.set_num_threads(1)  # the reference was recorded on one thread
    doc, ours = replay(name, max_steps=max_steps)
    expected = [f for f in doc["forwards"] if max_steps is None or f["step"] < max_steps]
    assert len(ours.losses) == len(expected) > 0
    diffs = compare(doc, ours)
    assert all(not diffs[f] for f in FIELDS), {f: d[:5] for f, d in diffs.items() if d}


@pytest.mark.parametrize("name", NAMES)
def test_first_fifty_steps_are_bit_identical(name):
    _assert_identical(name, PREFIX_STEPS)


def test_full_adaptive_is_bit_identical_over_the_whole_run():
    _assert_identical("main_full_adaptive_s0", None)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_whole_run_is_bit_identical(name):
    _assert_identical(name, None)


def test_the_replay_notices_a_difference():
    """The comparison is not vacuous: one changed value in any field is reported where it is."""
    doc, ours = replay("main_full_adaptive_s0", max_steps=12)
    ours.losses[3] += 1e-7
    ours.layers[10][0]["windows"][0] ^= 1
    ours.layers[0][1]["levels"][0].reverse()
    ours.layers[5][0]["head_stats"][0][2] += 1e-9
    ours.layers[0][0]["level_features"][0][0][0] = 0.0
    diffs = compare(doc, ours)
    assert diffs == {
        "loss": ["train 3"],
        "path": [],
        "windows": ["train 10 L0"],
        "levels": ["train 0 L1"],
        "head_stats": ["train 5 L0"],
        "level_features": ["train 0 L0"],
    }
