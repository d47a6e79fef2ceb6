"""Attention execution backends: parity with the dense reference, masks, stats, fallbacks."""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from aah_viz.errors import ConfigError  # noqa: E402
from instrumentation.backends import BACKENDS, causal_coverage, get_backend  # noqa: E402
from instrumentation.backends.banded import banded_attention  # noqa: E402
from instrumentation.backends.dense_masked import dense_masked_attention  # noqa: E402
from instrumentation.backends.masks import BandMaskCache, band_mask  # noqa: E402

pytestmark = pytest.mark.torch
TOL = 1e-5
KERNELS = ("flash_cpu", "loop")


def _qkv(shape, seed, dtype=torch.float32, grad=True):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(grad) for _ in range(3)]


def _random_windows(n_heads, seq_len, seed):
    gen = torch.Generator().manual_seed(seed)
    choices = [1, 2, 3, 5, 8, 16, 33, seq_len - 1, seq_len, seq_len + 7, 4 * seq_len]
    picks = torch.randint(len(choices), (n_heads,), generator=gen).tolist()
    wins = [max(1, choices[i]) for i in picks]
    wins[0] = seq_len + 3  # always one head at or above T
    return wins


def _run(fn, q, k, v, wins, grad_out, **kw):
    res = fn(q, k, v, wins, need_stats=True, **kw)
    grads = torch.autograd.grad(res.out, (q, k, v), grad_out)
    return res, grads


def _assert_close(a, b, what):
    err = (a.detach().float() - b.detach().float()).abs().max().item()
    assert err <= TOL, f"{what}: max abs difference {err:.2e} > {TOL}"


def _reference_attention(q, k, v, allowed):
    """Plain masked softmax attention from a boolean (T, T) mask, for checking the dense path."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1) @ v


# ------------------------------------------------------------------------ masks


def test_band_mask_example_8_rows_are_trailing_causal_bands():
    mask = band_mask(8, 3)
    for query in range(8):
        allowed = [key for key in range(8) if mask[query, key]]
        assert allowed == list(range(max(0, query - 2), query + 1))


def test_band_mask_window_at_or_above_length_is_lower_triangular():
    lower = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    assert torch.equal(band_mask(6, 6), lower)
    assert torch.equal(band_mask(6, 100), lower)
    assert torch.equal(band_mask(6, 0), torch.eye(6, dtype=torch.bool))  # W clamped to 1


def test_mask_cache_is_lru_keyed_by_length_window_and_device():
    cache = BandMaskCache(capacity=2)
    a = cache.get(8, 3, "cpu")
    assert cache.get(8, 3, "cpu") is a and cache.hits == 1
    cache.get(8, 4, "cpu")
    cache.get(8, 3, "cpu")  # refreshes (8, 3)
    cache.get(9, 3, "cpu")  # evicts (8, 4), the least recently used
    assert len(cache) == 2
    misses = cache.misses
    cache.get(8, 3, "cpu")
    assert cache.misses == misses
    cache.get(8, 4, "cpu")
    assert cache.misses == misses + 1
    assert cache.build_seconds >= 0.0


def test_dense_masked_matches_plain_masked_attention_per_head():
    q, k, v = _qkv((2, 3, 11, 4), seed=1, grad=False)
    wins = [3, 11, 1]
    out = dense_masked_attention(q, k, v, wins).out
    for h, w in enumerate(wins):
        ref = _reference_attention(q[:, h], k[:, h], v[:, h], band_mask(11, w))
        _assert_close(out[:, h], ref, f"head {h}")


@pytest.mark.parametrize("kernel", KERNELS)
def test_banded_output_ignores_keys_outside_the_band(kernel):
    seq_len, window = 40, 6
    q, k, v = _qkv((1, 1, seq_len, 8), seed=2, grad=False)
    base = banded_attention(q, k, v, [window], kernel=kernel, block=16).out
    query = 30
    k2, v2 = k.clone(), v.clone()
    k2[:, :, : query - window + 1] += 5.0  # keys left of the band of `query`
    v2[:, :, query + 1 :] -= 3.0  # keys after `query`
    moved = banded_attention(q, k2, v2, [window], kernel=kernel, block=16).out
    _assert_close(moved[:, :, query], base[:, :, query], "row outside-band perturbation")
    k3 = k.clone()
    k3[:, :, query - window + 1] += 5.0  # the oldest key inside the band
    changed = banded_attention(q, k3, v, [window], kernel=kernel, block=16).out
    assert (changed[:, :, query] - base[:, :, query]).abs().max() > 1e-3


# ------------------------------------------------------------------------ parity


PARITY_CASES = [
    # (B, H, T, D), block (None = the backend's choice)
    ((2, 5, 37, 8), None),
    ((1, 7, 130, 16), 32),
    ((3, 4, 67, 32), 16),
    ((1, 6, 200, 64), 64),
    ((2, 3, 1, 8), None),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shape,block", PARITY_CASES)
def test_banded_matches_dense_outputs_gradients_and_stats(kernel, shape, block):
    seed = sum(shape)
    q, k, v = _qkv(shape, seed)
    wins = _random_windows(shape[1], shape[2], seed)
    grad_out = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1))
    ref, ref_grads = _run(dense_masked_attention, q, k, v, wins, grad_out)
    got, got_grads = _run(banded_attention, q, k, v, wins, grad_out, kernel=kernel, block=block)
    assert got.backend == "banded"
    _assert_close(got.out, ref.out, "output")
    for name, a, b in zip("qkv", got_grads, ref_grads):
        _assert_close(a, b, f"d{name}")
    for field in ("entropy", "norm", "usage"):
        a, b = getattr(got.stats, field), getattr(ref.stats, field)
        assert a.shape == (shape[1],) and a.dtype == torch.float32
        _assert_close(a, b, field)


@pytest.mark.parametrize("call_bytes", [1, 10000, 200000])
def test_flash_cpu_split_into_small_calls_matches_dense(monkeypatch, call_bytes):
    """The fused CPU kernel splits a bucket into calls of about CALL_BYTES (one tile per call, several
    tiles per call, several heads per call); every split gives the dense outputs, gradients and stats."""
    from instrumentation.backends import banded_flash_cpu

    monkeypatch.setattr(banded_flash_cpu, "CALL_BYTES", call_bytes)
    shape = (2, 3, 150, 8)
    q, k, v = _qkv(shape, 11)
    wins = [5, 40, 150]
    grad_out = torch.randn(shape, generator=torch.Generator().manual_seed(12))
    ref, ref_grads = _run(dense_masked_attention, q, k, v, wins, grad_out)
    got, got_grads = _run(banded_attention, q, k, v, wins, grad_out, kernel="flash_cpu", block=16)
    _assert_close(got.out, ref.out, "output")
    for name, a, b in zip("qkv", got_grads, ref_grads):
        _assert_close(a, b, f"d{name}")
    for field in ("entropy", "norm", "usage"):
        _assert_close(getattr(got.stats, field), getattr(ref.stats, field), field)


def test_banded_accepts_a_window_tensor_and_a_custom_scale():
    q, k, v = _qkv((1, 3, 20, 8), seed=5, grad=False)
    wins = torch.tensor([4, 20, 2])
    ref = dense_masked_attention(q, k, v, wins, scale=0.3)
    for kernel in KERNELS:
        got = banded_attention(q, k, v, wins, scale=0.3, kernel=kernel)
        _assert_close(got.out, ref.out, f"{kernel} with scale 0.3")


def test_wrong_number_of_windows_is_a_config_error():
    q, k, v = _qkv((1, 3, 8, 4), seed=6, grad=False)
    for fn in (dense_masked_attention, banded_attention):
        with pytest.raises(ConfigError, match="3 heads"):
            fn(q, k, v, [4, 4])


def test_stats_follow_the_method_definitions():
    q, k, v = _qkv((2, 2, 9, 4), seed=7, grad=False)
    wins = [3, 9]
    res = dense_masked_attention(q, k, v, wins, need_stats=True)
    for h, w in enumerate(wins):
        scores = (q[:, h] @ k[:, h].transpose(-2, -1)) / 2.0
        probs = torch.softmax(scores.masked_fill(~band_mask(9, w), float("-inf")), -1)
        entropy = (-(probs * torch.log(probs + 1e-9)).sum(-1)).mean() / max(1.0, math.log(9))
        norm = torch.linalg.vector_norm(probs @ v[:, h], dim=-1).mean()
        usage = probs[:, :, -1].mean()
        assert res.stats.entropy[h].item() == pytest.approx(entropy.item(), abs=1e-6)
        assert res.stats.norm[h].item() == pytest.approx(norm.item(), abs=1e-6)
        assert res.stats.usage[h].item() == pytest.approx(usage.item(), abs=1e-7)
        # only the last query sees the last key
        assert res.stats.usage[h].item() == pytest.approx(probs[:, -1, -1].mean().item() / 9, abs=1e-7)


def test_dense_masked_stats_are_the_reference_reductions_bit_for_bit():
    """Per bucket: reduce each query row (entropy over keys, norm over the head dimension), then the
    mean over batch and queries together, then divide the entropy by max(1, ln T): bit for bit."""
    B, H, T, D = 3, 5, 24, 8
    q, k, v = (x.transpose(1, 2) for x in _qkv((B, T, H, D), seed=11, grad=False))  # the model's layout
    wins = [6, 24, 6, 12, 6]
    res = dense_masked_attention(q, k, v, wins, need_stats=True)
    for w, heads in ((6, [0, 2, 4]), (24, [1]), (12, [3])):
        n = len(heads)
        qb, kb, vb = (x[:, heads].reshape(B * n, T, D) for x in (q, k, v))
        scores = (qb @ kb.transpose(-2, -1)) * D**-0.5
        p = torch.softmax(scores.masked_fill(~band_mask(T, w), float("-inf")), -1)
        y = (p @ vb).view(B, n, T, D)
        p = p.view(B, n, T, T)
        entropy = -(p * torch.log(p + 1e-9)).sum(-1).mean(dim=(0, 2)) / max(1.0, math.log(T))
        norm = torch.linalg.vector_norm(y, dim=-1).mean(dim=(0, 2))
        usage = p[..., T - 1].mean(dim=(0, 2))
        assert torch.equal(res.stats.entropy[heads], entropy)
        assert torch.equal(res.stats.norm[heads], norm)
        assert torch.equal(res.stats.usage[heads], usage)


# ------------------------------------------------------------------------ dropout


def test_banded_dropout_matches_dense_semantics_for_the_same_mask():
    """With one tile per bucket the loop kernel draws one (N, T, T) mask: rebuild it and compare."""
    shape, p, w = (2, 3, 12, 4), 0.3, 5
    q, k, v = _qkv(shape, seed=8, grad=False)
    torch.manual_seed(123)
    got = banded_attention(q, k, v, [w] * 3, dropout_p=p, training=True, need_stats=True, kernel="loop", block=64)
    torch.manual_seed(123)
    drop = torch.empty((6, 12, 12), dtype=torch.bool).bernoulli_(p).view(2, 3, 12, 12)
    scores = (q @ k.transpose(-2, -1)) / 2.0
    probs = torch.softmax(scores.masked_fill(~band_mask(12, w), float("-inf")), -1)
    dropped = probs.masked_fill(drop, 0.0) / (1 - p)
    _assert_close(got.out, dropped @ v, "dropout output")
    entropy = (-(dropped * torch.log(dropped + 1e-9)).sum(-1)).mean(dim=(0, 2)) / math.log(12)
    _assert_close(got.stats.entropy, entropy, "post-dropout entropy")
    _assert_close(got.stats.usage, dropped[:, :, :, -1].mean(dim=(0, 2)), "post-dropout usage")
    _assert_close(got.stats.norm, torch.linalg.vector_norm(dropped @ v, dim=-1).mean(dim=(0, 2)), "norm")


def test_banded_dropout_backward_is_the_gradient_of_its_forward():
    q, k, v = _qkv((1, 2, 10, 3), seed=9, dtype=torch.float64)

    def seeded(q, k, v):  # the same dropout mask on every call
        torch.manual_seed(7)
        return banded_attention(q, k, v, [4, 10], dropout_p=0.25, training=True, block=4).out

    assert torch.autograd.gradcheck(seeded, (q, k, v), eps=1e-6, atol=1e-5)


def test_dropout_is_off_outside_training():
    q, k, v = _qkv((1, 2, 16, 4), seed=10, grad=False)
    plain = banded_attention(q, k, v, [5, 16]).out
    evaluated = banded_attention(q, k, v, [5, 16], dropout_p=0.5, training=False).out
    assert torch.equal(plain, evaluated)
    trained = banded_attention(q, k, v, [5, 16], dropout_p=0.5, training=True).out
    assert not torch.allclose(plain, trained)


# ------------------------------------------------------------------------ work and coverage


def test_realised_work_counts_computed_score_elements():
    q, k, v = _qkv((1, 4, 256, 8), seed=11, grad=False)
    dense = dense_masked_attention(q, k, v, [16, 16, 256, 256])
    assert dense.realised_work == pytest.approx(2 * 256 / 257)
    full = banded_attention(q, k, v, [256] * 4, kernel="flash_cpu")
    assert full.realised_work == pytest.approx(1.0)
    wins = [16, 16, 256, 256]
    for kernel in KERNELS:
        banded = banded_attention(q, k, v, wins, kernel=kernel)
        assert causal_coverage(wins, 256) <= banded.realised_work < dense.realised_work


def test_causal_coverage_matches_a_count_of_allowed_pairs():
    seq_len, wins = 50, [1, 7, 50, 64, 20]
    counted = sum(int(band_mask(seq_len, w).sum()) for w in wins)
    assert causal_coverage(wins, seq_len) == pytest.approx(counted / (len(wins) * seq_len * (seq_len + 1) / 2))
    paper = [512] * 10 + [1024] * 2 + [2048] * 2 + [4096] * 2
    assert causal_coverage(paper, 4096) == pytest.approx(0.42, abs=0.005)


# ------------------------------------------------------------------------ registry and fallbacks


def test_get_backend_rejects_unknown_names_listing_the_allowed_ones():
    with pytest.raises(ConfigError) as err:
        get_backend("sparse")
    for name in BACKENDS:
        assert name in str(err.value)


def test_dense_and_banded_resolve_without_fallback():
    for name in ("dense_masked", "banded"):
        fn, resolved, reason = get_backend(name, device="cpu", training=True, dropout_p=0.1)
        assert resolved == name and reason is None and callable(fn)


def test_flash_without_the_package_falls_back_to_banded_with_a_reason():
    pytest.importorskip("importlib")
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    with pytest.warns(RuntimeWarning, match="flash_attn"):
        fn, resolved, reason = get_backend("flash", device="cpu")
    assert resolved == "banded" and "flash_attn" in reason
    q, k, v = _qkv((1, 2, 9, 4), seed=12, grad=False)
    _assert_close(fn(q, k, v, [3, 9]).out, dense_masked_attention(q, k, v, [3, 9]).out, "fallback output")


def test_flex_training_on_cpu_falls_back_to_banded():
    with pytest.warns(RuntimeWarning, match="no CPU backward"):
        fn, resolved, reason = get_backend("flex", device="cpu", training=True)
    assert resolved == "banded" and reason.startswith("flex:")
    with pytest.warns(RuntimeWarning, match="dropout"):
        _, resolved, reason = get_backend("flex", device="cpu", training=True, dropout_p=0.1)
    assert resolved == "banded" and "dropout" in reason


def test_flash_backend_called_directly_on_cpu_runs_banded():
    from instrumentation.backends.flash import flash_attention_backend

    q, k, v = _qkv((1, 2, 9, 4), seed=13, grad=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = flash_attention_backend(q, k, v, [3, 9])
    assert res.backend == "banded" and any("falling back" in str(w.message) for w in caught)


@pytest.mark.slow
def test_flex_inference_on_cpu_matches_dense():
    """Compiles FlexAttention for CPU (minutes on a small machine)."""
    from instrumentation.backends.flex import flex_attention_backend

    q, k, v = _qkv((2, 4, 200, 16), seed=14, grad=False)
    wins = [64, 200, 7, 1000]
    with torch.no_grad():
        res = flex_attention_backend(q, k, v, wins)
    ref = dense_masked_attention(q, k, v, wins)
    if res.backend != "flex":
        pytest.skip("FlexAttention could not compile here")
    _assert_close(res.out, ref.out, "flex output")


def test_one_acr_and_coverage_formula():
    """The backends and benches use the formulas of aah_viz.coverage, not copies of them."""
    from aah_viz import coverage
    from instrumentation import backends

    assert backends.acr is coverage.acr and backends.causal_coverage is coverage.causal_coverage
