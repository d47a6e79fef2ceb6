"""Retrofit at inference: padding masks, cached generation within each head's window, the bounded cache.

Every exactness check compares the patched model with the unpatched one: given the model's own mask
(full-attention patch), or given an explicit mask this file builds from the padding and each head's
window (the windowed reference). Generation is compared token for token with greedy decoding of that
reference, recomputed over the whole sequence at every step (no cache), where every step's top two
logits lie far apart (so float rounding cannot decide a token).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from instrumentation.retrofit import WindowedKVCache, cache_bytes, patch_model  # noqa: E402
from instrumentation.retrofit.parity import FAMILIES, random_model  # noqa: E402

pytestmark = pytest.mark.torch
VOCAB = 97  # random_model's vocabulary
IMPLEMENTATIONS = ("eager", "sdpa")
CANDIDATES = (3, 5, 8, 40)
MIX = [3, 3, 5, 8, 5, 40, 8, 3]  # one window per query head, the same in every layer
N_KV = 2  # 8 query heads over 2 key/value heads: heads 0-3 share one, heads 4-7 the other
MIN_MARGIN = 1e-3  # top-1 minus top-2 logit of every reference step; errors are below 1e-4
SHARPEN = 20.0  # output head scale: a random model's logits lie within about 0.5, too close for greedy decoding


def model_pair(family: str, impl: str, regime: str = "routed", seed: int = 0):
    """(unpatched, patched copy) of one random model. The copy executes ``MIX`` in every layer: routed
    (``full_adaptive``, frozen on it) or static (``head_windows``); or ``sliding_window`` 5 in every head."""
    ref = random_model(family, n_head=8, n_kv=N_KV, head_dim=8, seed=seed)
    patched = random_model(family, n_head=8, n_kv=N_KV, head_dim=8, seed=seed)
    for m in (ref, patched):
        m.set_attn_implementation(impl)
        with torch.no_grad():
            m.get_output_embeddings().weight.mul_(SHARPEN)
    if regime == "routed":
        execute(patch_model(patched, "full_adaptive", CANDIDATES), MIX)
    elif regime == "head_windows":
        patch_model(patched, "head_windows", CANDIDATES, static_head_windows=[MIX, MIX])
    else:
        patch_model(patched, "sliding_window", CANDIDATES, static_window=5)
    return ref, patched


def execute(handle, per_head):
    """Freeze every layer of ``handle`` on ``per_head`` windows (evaluation forwards keep them)."""
    idx = torch.tensor([list(handle.cfg.windows).index(w) for w in per_head])
    for layer in handle.aah_layers():
        layer.state = layer.state.replace(executed_idx=idx.clone())


def explicit_mask(real: torch.Tensor, windows, impl: str) -> torch.Tensor:
    """The windowed reference's (B, H, T, T) mask: key j <= query i, i - j < the head's window, j a real
    token. A padding query with no key left sees itself (its output is never read)."""
    B, T = real.shape
    i = torch.arange(T).view(-1, 1)
    dist = i - torch.arange(T).view(1, -1)
    w = torch.tensor([T + 1 if x is None else x for x in windows]).view(-1, 1, 1)
    allowed = ((dist >= 0) & (dist < w))[None] & real.bool()[:, None, None, :]
    allowed = allowed | (~allowed.any(-1, keepdim=True) & torch.eye(T, dtype=torch.bool))
    if impl == "sdpa":
        return allowed
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def padded(batch: int, T: int, side: str, seed: int = 1):
    """Random ids (batch, T) and a padding mask with 0 to 6 padding tokens per row on ``side``."""
    ids = torch.randint(0, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))
    real = torch.ones(batch, T, dtype=torch.long)
    for b, n in enumerate([5, 0, 2, 6][:batch]):
        if n:
            real[b, :n] = 0 if side == "left" else 1
            if side == "right":
                real[b, T - n :] = 0
    return ids, real


@torch.no_grad()
def reference_generate(model, prompt: torch.Tensor, windows, impl: str, n: int):
    """Greedy decoding of the windowed reference: the unpatched model over the whole sequence at every
    step, with the explicit mask. Returns (new tokens, per-step logits) and checks the margins."""
    seq, steps = prompt.clone(), []
    for _ in range(n):
        mask = explicit_mask(torch.ones_like(seq), windows, impl)
        logits = model(seq, attention_mask=mask, use_cache=False).logits[:, -1]
        top = logits.topk(2, dim=-1).values
        assert float((top[:, 0] - top[:, 1]).min()) > MIN_MARGIN, "a near tie: choose another seed"
        steps.append(logits)
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    return seq[:, prompt.shape[1] :], torch.stack(steps, 1)


# ----------------------------------------------------------------------------- 1. padding
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_full_attention_patch_applies_padding_as_the_unpatched_model(family, impl, side):
    model = random_model(family, n_head=8, n_kv=N_KV, head_dim=8)
    model.set_attn_implementation(impl)
    ids, real = padded(4, 20, side)
    with torch.no_grad():
        expected = model(ids, attention_mask=real, use_cache=False).logits
        patch_model(model, "full_attention", CANDIDATES)
        got = model(ids, attention_mask=real, use_cache=False).logits
    keep = real.bool()
    assert torch.allclose(got[keep], expected[keep], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("regime", ["routed", "sliding_window", "head_windows"])
def test_windows_and_padding_equal_the_explicit_reference(family, impl, side, regime):
    ref, patched = model_pair(family, impl, regime)
    windows = [5] * 8 if regime == "sliding_window" else MIX
    ids, real = padded(4, 20, side)
    with torch.no_grad():
        expected = ref(ids, attention_mask=explicit_mask(real, windows, impl), use_cache=False).logits
        got = patched(ids, attention_mask=real, use_cache=False).logits
    keep = real.bool()
    assert torch.allclose(got[keep], expected[keep], atol=1e-5, rtol=0)
    # the windows bind: full attention over the same padding gives other logits
    with torch.no_grad():
        full = ref(ids, attention_mask=real, use_cache=False).logits
    assert not torch.allclose(got[keep], full[keep], atol=1e-3)


# ----------------------------------------------------------------------------- 2. cached generation
CACHES = ("none", "dynamic", "windowed")


def _generate(model, ids, real, cache: str, n: int):
    kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    if cache == "none":
        kw["use_cache"] = False
    elif cache == "windowed":
        kw["cache"] = WindowedKVCache()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=real, **kw)
    return out.sequences[:, ids.shape[1] :], torch.stack(out.logits, 1)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_batched_left_padded_generation_equals_the_windowed_reference(family, impl):
    """Two prompts of 14 and 9 tokens, left-padded into one batch: every generated token and its logits
    are those of the windowed reference run on each prompt alone, without a cache, with the model's
    own cache and with ``WindowedKVCache``; routed windows (Llama, Qwen2) or static per-head ones
    (Mistral, Qwen3)."""
    ref, patched = model_pair(family, impl, "routed" if family in ("llama", "qwen2") else "head_windows")
    ids, real = padded(2, 14, "left", seed=3)
    ids[1, :5] = 0  # the padding of row 1 (5 tokens) holds the pad id
    real[1, :5], real[0] = 0, 1
    n = 10
    want = [reference_generate(ref, ids[b : b + 1, int((real[b] == 0).sum()) :], MIX, impl, n) for b in range(2)]
    for cache in CACHES:
        tokens, logits = _generate(patched, ids, real, cache, n)
        for b, (want_tokens, want_logits) in enumerate(want):
            assert tokens[b].tolist() == want_tokens[0].tolist(), (b, cache)
            assert torch.allclose(logits[b], want_logits[0], atol=1e-4, rtol=0), (b, cache)


# ----------------------------------------------------------------------------- 3. the bounded cache
def test_windowed_cache_keeps_per_key_value_head_what_its_largest_window_reaches():
    """After a 30-token prompt and 11 decode steps (41 positions), each key/value head holds the last
    W positions for the largest window W of the 4 query heads it serves; the model's own cache all 41."""
    from transformers import DynamicCache

    from aah_viz.errors import ConfigError

    ref, patched = model_pair("llama", "sdpa")
    ids = torch.randint(0, VOCAB, (2, 30), generator=torch.Generator().manual_seed(5))
    windowed, dynamic = WindowedKVCache(), DynamicCache(config=ref.config)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        patched.generate(ids, cache=windowed, **kw)
        ref.generate(ids, cache=dynamic, **kw)
    seen, layers, head_dim, batch = 30 + 11, 2, 8, 2
    reach = [max(MIX[g * 4 : (g + 1) * 4]) for g in range(N_KV)]  # [8, 40]
    per_position = batch * head_dim * 2 * 4  # keys and values, float32
    assert windowed.get_seq_length() == dynamic.get_seq_length() == seen
    assert cache_bytes(windowed) == layers * sum(min(r, seen) for r in reach) * per_position
    assert cache_bytes(dynamic) == layers * N_KV * seen * per_position
    # an unpatched attention cannot write into it
    with pytest.raises(ConfigError, match="patched"), torch.no_grad():
        ref.generate(ids, cache=WindowedKVCache(), **kw)


def test_full_attention_heads_keep_every_position():
    model = random_model("qwen3", n_head=8, n_kv=N_KV, head_dim=8)
    patch_model(model, "full_attention", CANDIDATES)
    ids = torch.randint(0, VOCAB, (1, 20), generator=torch.Generator().manual_seed(6))
    cache = WindowedKVCache()
    with torch.no_grad():
        model.generate(ids, cache=cache, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert cache_bytes(cache) == 2 * N_KV * (20 + 4) * 8 * 2 * 4


def test_bench_generate_reports_paired_decode_speed_and_cache_bytes(capsys):
    import json
    import statistics

    from aah_viz.cli import main

    args = ["bench", "generate", "--prompt-len", "64", "--new-tokens", "8", "--layers", "2", "--head-dim", "8"]
    assert main(args + ["--pairs", "2", "--threads", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    name = "decode_tokens_per_s_windowed_vs_unpatched"
    raw = doc["raw_s"][name][doc["clock"]]
    ratios = sorted(a / b for a, b in zip(raw["unpatched"], raw["windowed"]))  # tokens/s ratio = time ratio inverted
    assert doc["ratios"][name]["median"] == pytest.approx(sum(ratios) / 2, rel=1e-3)
    assert doc["decode_tokens_per_s"]["windowed"] == pytest.approx(7 / statistics.median(raw["windowed"]))
    # 8 query heads at T = 64 execute 5 x 8, 16, 32, 64; 4 key/value heads keep 8, 8, 16 and 64 positions
    seen, per_position = 64 + 7, 2 * 8 * 2 * 4  # positions; layers x head dim x (keys, values) x float32
    kv = doc["kv_cache"]
    assert kv["positions_seen"] == seen and kv["kv_head_windows"] == [8, 8, 16, 64]
    assert kv["bytes"]["windowed"] == (8 + 8 + 16 + 64) * per_position
    assert kv["bytes"]["unpatched"] == 4 * seen * per_position
    assert kv["ratio"] == pytest.approx(kv["kv_head_share"]) and kv["ratio"] == pytest.approx(96 / (4 * seen))
    assert kv["window_share"] == pytest.approx((5 * 8 + 16 + 32 + 64) / (8 * seen))
