"""Head features (method §4.1), pooled group features (§4.2), feature EMA (§4.3)."""

import pytest
import torch

from instrumentation.routing import features
from instrumentation.routing.features import ema_update, head_features, per_head_std, pooled_group_features


def _qkv(seed=0, B=2, H=4, T=5, D=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g) for _ in range(3)]


def test_head_features_are_mean_abs_and_unbiased_std():
    q, k, v = _qkv()
    prev = torch.rand(4, 3)
    f = head_features(q, k, v, prev)
    assert f.shape == (4, 9) and f.dtype == torch.float32
    for h in range(4):
        for j, x in enumerate((q, k, v)):
            e = x[:, h]
            assert torch.allclose(f[h, 2 * j], e.abs().mean())
            assert torch.allclose(f[h, 2 * j + 1], e.std(unbiased=True))
            assert not torch.allclose(f[h, 2 * j], e.mean().abs())  # mean |x|, not |mean x|
    assert torch.equal(f[:, 6:], prev)
    assert torch.all(head_features(q, k, v, None)[:, 6:] == 0)  # first forward


LAYOUTS = {
    "contiguous": lambda t: t,
    "model (B, T, H, D) memory": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),
    "heads outermost": lambda t: t.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3),
    "a token-strided view": lambda t: torch.cat([t, t.flip(2)], dim=2)[:, :, ::2],
    # as the model's q: one third of a (B, T, 3 * H * D) projection, seen as (B, H, T, D)
    "a split of the Q/K/V projection": lambda t: torch.cat([t.transpose(1, 2)] * 3, dim=2)[
        :, :, : t.shape[1]
    ].transpose(1, 2),
}


def _values(g, scale, offset, drift):
    base = torch.randn(3, 12, 257, 16, generator=g) * scale + offset
    return base + drift * torch.linspace(0.0, 1.0, 257).view(1, 1, -1, 1)  # a mean that moves along T


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "scale, offset, drift", [(1.0, 0.0, 0.0), (1e-3, 5.0, 0.0), (30.0, -2.0, 0.0), (1.0, 0.0, 200.0)]
)
@pytest.mark.parametrize("chunk_bytes", [None, 1])
def test_per_head_std_is_torchs_std_bit_for_bit(layout, scale, offset, drift, chunk_bytes, monkeypatch):
    """The fast float64 std gives the same float32 bits as torch's own reduction (which the reference
    calls): in every memory layout, when the mean dwarfs the spread, when the first chunk's mean (the
    shift) is far from the whole mean, and in one chunk or in one token per chunk."""
    if chunk_bytes is not None:
        monkeypatch.setattr(features, "STD_CHUNK_BYTES", chunk_bytes)
    x = LAYOUTS[layout](_values(torch.Generator().manual_seed(7), scale, offset, drift))
    assert torch.equal(per_head_std(x), x.std(dim=(0, 2, 3), correction=1))


@pytest.mark.filterwarnings("ignore:std\\(\\).*degrees of freedom:UserWarning")
def test_per_head_std_leaves_its_input_alone_and_falls_back_where_it_must():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 4, 9, 3, generator=g)
    before = x.clone()
    per_head_std(x)
    assert torch.equal(x, before)
    one_entry = x[:1, :, :1, :1]
    assert torch.equal(per_head_std(one_entry).isnan(), one_entry.std(dim=(0, 2, 3)).isnan())
    doubles = x.double()
    assert torch.equal(per_head_std(doubles), doubles.std(dim=(0, 2, 3)))


def test_pooled_group_features_pool_raw_entries():
    q, k, v = _qkv(1)
    prev = torch.rand(4, 3)
    groups = [[2, 0], [1, 3]]
    F = pooled_group_features(q, k, v, groups, prev)
    per_head = head_features(q, k, v, prev)
    for gi, g in enumerate(groups):
        pooled = q[:, g]
        assert torch.allclose(F[gi, 0], pooled.abs().mean())
        assert torch.allclose(F[gi, 1], pooled.std(unbiased=True))
        assert torch.allclose(F[gi, 6:], prev[g].mean(0))
        assert not torch.allclose(F[gi, 1], per_head[g, 1].mean())  # not the mean of per-head stds


def test_pooled_group_features_are_the_reference_reductions_bit_for_bit():
    """Members gathered in ascending order as x[:, heads], one reduction over all four dims; each
    previous statistic averaged as its own 1-D column (the reference's order, bit for bit)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 16, 6, 8, generator=g).transpose(1, 2) for _ in range(3))  # the model's layout
    prev = torch.rand(6, 3, generator=g)
    groups = [[5, 0, 3], [1, 4, 2]]  # insertion order, as clustering returns them
    F = pooled_group_features(q, k, v, groups, prev)
    for gi, members in enumerate(groups):
        heads = sorted(members)
        expected = []
        for x in (q, k, v):
            expected += [x[:, heads].abs().mean(dim=(0, 1, 2, 3)), x[:, heads].std(dim=(0, 1, 2, 3), correction=1)]
        entropy, norm, usage = (prev[:, c].clone() for c in range(3))
        expected += [entropy[heads].mean(), norm[heads].mean(), usage[heads].mean()]
        assert torch.equal(F[gi], torch.stack(expected))


def test_feature_ema():
    a, b = torch.ones(3, 9), torch.zeros(3, 9)
    assert torch.equal(ema_update(None, a, 0.9), a)
    assert torch.allclose(ema_update(a, b, 0.9), torch.full((3, 9), 0.9))
    assert torch.equal(ema_update(a, b, 0.0), b)  # no-EMA ablation
    assert torch.equal(ema_update(torch.ones(2, 9), b, 0.9), b)  # shape change restarts
    assert torch.equal(ema_update(a, b, 1.5), a)  # alpha clipped to [0, 1]
