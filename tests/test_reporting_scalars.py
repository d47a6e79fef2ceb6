"""The ``aah/`` scalars of routing rows, worked by hand on a two-layer, two-head step; the heatmap's PNG."""

from __future__ import annotations

import io

import numpy as np
import pytest

from aah_viz.reporting.heatmap import png_bytes, window_heatmap
from aah_viz.reporting.scalars import RoutingRows, routing_scalars, step_scalars

T = 64
PAIRS = T * (T + 1) / 2  # 2080 causal pairs
BAND16 = 16 * 17 / 2 + (T - 16) * 16  # 904 pairs inside a 16-token window


def rows(**kw) -> RoutingRows:
    base = dict(
        steps=np.array([7]),
        candidates=(16, 64),
        windows=np.array([[[16, 64], [16, 16]]]),
        seq_len=np.array([T]),
        groups=np.array([[[[0, 1], [0, 0]], [[0, 0], [-1, -1]]]]),  # (S, L, depth, H)
        layer_work=np.array([[2.0, np.nan]]),
        controller_grad_norm=np.array([0.0]),
        group_change_rate=np.array([[0.5, np.nan]]),
        level0_forced=np.array([[1.0, 0.0]]),
    )
    return RoutingRows(**{**base, **kw})


def test_every_scalar_of_a_hand_worked_step():
    got = step_scalars(rows(), per_layer=True)
    assert got == pytest.approx(
        {
            "aah/acr": ((16 + 64) / 128 + (16 + 16) / 128) / 2,
            "aah/causal_coverage": ((BAND16 + PAIRS) / (2 * PAIRS) + BAND16 / PAIRS) / 2,
            "aah/realised_work": 2.0,  # the layer without a value left out
            "aah/controller_grad_norm": 0.0,  # a zero is a value, not a missing one
            "aah/window_share/w16": 0.75,
            "aah/window_share/w64": 0.25,
            "aah/groups/l0": 1.5,  # two groups in layer 0, one in layer 1
            "aah/groups/l1": 1.0,  # only layer 0 has a level 1
            "aah/group_change_rate": 0.5,
            "aah/forced_share": 0.5,
            "aah/mean_window/layer00": 40.0,
            "aah/mean_window/layer01": 16.0,
        }
    )
    assert not any(k.startswith("aah/mean_window/") for k in step_scalars(rows()))


def test_a_level_that_merges_nothing_is_not_a_level_of_its_own():
    """Levels are nested: layer 0's level 1 repeats its two level-0 groups, layer 1's merges its two into
    one. Only layer 1 has a level 1; a hierarchy that merged nothing anywhere has no groups/l1 at all."""
    groups = np.array([[[[0, 1], [0, 1]], [[0, 1], [0, 0]]]])  # (S, L, depth, H)
    got = step_scalars(rows(groups=groups))
    assert got["aah/groups/l0"] == 2.0 and got["aah/groups/l1"] == 1.0
    flat = np.array([[[[0, 1], [0, 1]], [[0, 1], [0, 1]]]])
    assert "aah/groups/l1" not in step_scalars(rows(groups=flat))


def test_given_values_win_and_missing_parts_are_left_out():
    got = step_scalars(rows(acr=np.array([0.3]), groups=None, level0_forced=None, group_change_rate=None))
    assert got["aah/acr"] == 0.3
    assert not {"aah/groups/l0", "aah/forced_share", "aah/group_change_rate"} & set(got)
    only = RoutingRows(steps=np.array([0, 1]), acr=np.array([np.nan, 0.5]))
    assert routing_scalars(only)["aah/acr"][1] == 0.5
    assert step_scalars(RoutingRows(steps=np.array([0]), acr=np.array([np.nan]))) == {}


def test_steps_are_independent_rows():
    two = rows(
        steps=np.array([1, 2]),
        windows=np.array([[[16, 64], [16, 16]], [[64, 64], [64, 64]]]),
        seq_len=np.array([T, T]),
        groups=None,
        layer_work=None,
        controller_grad_norm=None,
        group_change_rate=None,
        level0_forced=None,
    )
    series = routing_scalars(two)
    assert series["aah/window_share/w64"].tolist() == [0.25, 1.0]
    assert series["aah/acr"][1] == 1.0


def test_the_heatmap_png_decodes_to_the_image_with_one_colour_per_window():
    from PIL import Image

    windows = np.array([[16, 32, 64], [64, 16, 16]])
    rgb = window_heatmap(windows, (16, 32, 64), cell=4)
    assert rgb.shape == (8, 12, 3) and rgb.dtype == np.uint8
    decoded = np.asarray(Image.open(io.BytesIO(png_bytes(rgb))).convert("RGB"))
    assert (decoded == rgb).all()
    cells = rgb[::4, ::4].reshape(-1, 3)
    flat = windows.reshape(-1)
    for i in range(flat.size):
        for j in range(flat.size):
            assert (flat[i] == flat[j]) == bool((cells[i] == cells[j]).all())
