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

from instrumentation.retrofit import patch_model  # noqa: E402
from instrumentation.retrofit.parity import FAMILIES, random_model  # noqa: E402

pytestmark = pytest.mark.torch
VOCAB = 97  # random_model's vocabulary
IMPLEMENTATIONS = ("eager", "sdpa")
CANDIDATES = (3, 5, 8, 40)
MIX = [3, 3, 5, 8, 5, 40, 8, 3]  # one window per query head, the same in every layer
N_KV = 2  # 8 query heads over 2 key/value heads: heads 0-3 share one, heads 4-7 the other
MIN_MARGIN = 1e-3  # top-1 minus top-2 logit of every reference step; errors are below 1e-4
SHARPEN = 20.0  # output head scale: a random model's logits lie within about 0.5, too close for greedy decoding


def model_pair(family: str, impl: str, seed: int = 0):
    """(unpatched, patched copy) of one random model; the copy executes ``MIX`` in every layer, frozen."""
    ref = random_model(family, n_head=8, n_kv=N_KV, head_dim=8, seed=seed)
    patched = random_model(family, n_head=8, n_kv=N_KV, head_dim=8, seed=seed)
    for m in (ref, patched):
        m.set_attn_implementation(impl)
        with torch.no_grad():
            m.get_output_embeddings().weight.mul_(SHARPEN)
    handle = patch_model(patched, "full_adaptive", CANDIDATES)
    execute(handle, MIX)
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
@pytest.mark.parametrize("regime", ["routed", "sliding_window"])
def test_windows_and_padding_equal_the_explicit_reference(family, impl, side, regime):
    ref, patched = model_pair(family, impl)
    windows = MIX
    if regime == "sliding_window":
        patched.aah_routing.unpatch()
        patch_model(patched, "sliding_window", CANDIDATES, static_window=5)
        windows = [5] * 8
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
