"""Sink tokens (``sink_tokens = k``): the first k positions stay visible to every query besides its window.

Every backend is checked against an explicit mask written here (key j <= query t, and t - j < W or j < k),
forward, backward and head statistics; the coverage figures against a brute-force count of that mask;
the model, the recorder's ACR, the retrofit and cached decoding with ``WindowedKVCache`` against the
same mask.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aah_viz import coverage  # noqa: E402
from aah_viz.errors import ConfigError  # noqa: E402
from instrumentation.backends.banded import banded_attention  # noqa: E402
from instrumentation.backends.dense_masked import dense_masked_attention  # noqa: E402
from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402

pytestmark = pytest.mark.torch
TOL = 1e-5


def explicit_mask(T: int, window: int, sinks: int) -> torch.Tensor:
    """(T, T) boolean, written out pair by pair: query t sees key j <= t with t - j < W or j < k."""
    m = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        for j in range(t + 1):
            m[t, j] = (t - j < window) or (j < sinks)
    return m


def reference(q, k, v, windows, sinks):
    """Softmax attention under the explicit masks, and the method §11.2 statistics of its probabilities."""
    T = q.shape[2]
    allowed = torch.stack([explicit_mask(T, w, sinks) for w in windows])
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    out = probs @ v
    p = probs.detach()
    entropy = -(p * torch.log(p + 1e-9)).sum(-1).mean(dim=(0, 2)) / max(1.0, math.log(T))
    norm = torch.linalg.vector_norm(out.detach(), dim=-1).mean(dim=(0, 2))
    usage = p[..., -1].mean(dim=(0, 2))
    return out, (entropy, norm, usage)


def _qkv(shape, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(True) for _ in range(3)]


def _close(a, b, what):
    err = (a.detach().float() - b.detach().float()).abs().max().item()
    assert err <= TOL, f"{what}: max abs difference {err:.2e} > {TOL}"


BACKEND_CASES = [
    ("dense_masked", {}),
    ("banded", {"kernel": "flash_cpu", "block": 5}),
    ("banded", {"kernel": "flash_cpu"}),
    ("banded", {"kernel": "loop", "block": 4}),
]
# T, per-head windows (some below k, one at T, one above), sinks (one more than T - W for some heads)
SHAPES = [(37, [3, 5, 40, 8, 1, 37], 4), (50, [8, 16, 2, 2, 49, 3], 1), (21, [2, 19, 7, 21, 3, 3], 30)]


def _backend(name):
    return dense_masked_attention if name == "dense_masked" else banded_attention


@pytest.mark.parametrize("name, kw", BACKEND_CASES)
@pytest.mark.parametrize("T, windows, sinks", SHAPES)
def test_backends_equal_the_explicit_mask_forward_backward_and_stats(name, kw, T, windows, sinks):
    q, k, v = _qkv((2, len(windows), T, 8), seed=T)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    want, want_stats = reference(q, k, v, windows, sinks)
    want_grads = torch.autograd.grad(want, (q, k, v), grad_out)
    res = _backend(name)(q, k, v, windows, need_stats=True, sinks=sinks, **kw)
    grads = torch.autograd.grad(res.out, (q, k, v), grad_out)
    _close(res.out, want, "output")
    for got, exp, what in zip(grads, want_grads, ("dq", "dk", "dv")):
        _close(got, exp, what)
    for got, exp, what in zip((res.stats.entropy, res.stats.norm, res.stats.usage), want_stats, ("H", "norm", "usage")):
        _close(got, exp, what)


def test_the_sinks_bind():
    """Without the sink keys the output differs: the test above would fail for a backend that ignored them."""
    q, k, v = _qkv((1, 2, 40, 8), seed=3)
    with torch.no_grad():
        banded = banded_attention(q, k, v, [4, 6], sinks=2).out
        plain = banded_attention(q, k, v, [4, 6]).out
        want, _ = reference(q, k, v, [4, 6], 2)
    assert not torch.allclose(banded[:, :, 6:], plain[:, :, 6:], atol=1e-3)
    assert torch.equal(banded[:, :, :4], plain[:, :, :4])  # rows whose band already holds the sinks
    _close(banded, want, "output")


def test_loop_kernel_with_dropout_and_sinks_backward_is_the_gradient_of_its_forward():
    q, k, v = _qkv((1, 2, 11, 3), seed=9, dtype=torch.float64)

    def seeded(q, k, v):  # the same dropout masks (band tiles, then the sink block) on every call
        torch.manual_seed(7)
        return banded_attention(q, k, v, [3, 11], dropout_p=0.25, training=True, block=4, sinks=2).out

    assert torch.autograd.gradcheck(seeded, (q, k, v), eps=1e-6, atol=1e-5, fast_mode=True)


def test_sinks_zero_is_the_method_exactly():
    q, k, v = _qkv((2, 3, 33, 8), seed=4)
    for name, kw in BACKEND_CASES:
        a = _backend(name)(q, k, v, [3, 9, 40], need_stats=True, **kw)
        b = _backend(name)(q, k, v, [3, 9, 40], need_stats=True, sinks=0, **kw)
        assert torch.equal(a.out, b.out) and torch.equal(a.stats.entropy, b.stats.entropy)
        assert a.realised_work == b.realised_work


def test_flash_backend_with_sinks_runs_banded_with_a_reason():
    from instrumentation.backends.flash import flash_attention_backend

    q, k, v = _qkv((1, 2, 20, 8), seed=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = flash_attention_backend(q, k, v, [3, 9], sinks=2)
    assert res.backend == "banded" and any("falling back" in str(w.message) for w in caught)
    _close(res.out, reference(q, k, v, [3, 9], 2)[0], "output")


def test_flex_mask_predicate_is_the_explicit_mask():
    from instrumentation.backends.flex import band_predicate

    T, windows, sinks = 30, [1, 4, 30], 3
    pred = band_predicate(torch.tensor(windows), sinks)
    t = torch.arange(T).view(-1, 1)
    j = torch.arange(T).view(1, -1)
    for h, w in enumerate(windows):
        assert torch.equal(pred(0, h, t, j), explicit_mask(T, w, sinks))


@pytest.mark.slow
def test_flex_inference_on_cpu_with_sinks_equals_the_explicit_mask():
    """Compiles FlexAttention for CPU (minutes on a small machine); CPU flex has no backward."""
    from instrumentation.backends.flex import flex_attention_backend

    q, k, v = (x.detach() for x in _qkv((2, 3, 200, 16), seed=14))
    with torch.no_grad():
        res = flex_attention_backend(q, k, v, [7, 64, 300], sinks=4)
    if res.backend != "flex":
        pytest.skip("FlexAttention could not compile here")
    _close(res.out, reference(q, k, v, [7, 64, 300], 4)[0], "flex output")


# ----------------------------------------------------------------------------- what it costs
@pytest.mark.parametrize("T", [1, 7, 40])
@pytest.mark.parametrize("sinks", [0, 1, 4, 50])
def test_coverage_counts_the_sink_pairs_of_the_explicit_mask(T, sinks):
    windows = [1, 2, 5, 7, 39, 40, 64]
    masks = [explicit_mask(T, min(w, T), sinks) for w in windows]
    pairs = np.array([int(m.sum()) for m in masks])
    assert coverage.band_pairs(T, windows, sinks).tolist() == pairs.tolist()
    assert coverage.causal_coverage(windows, T, sinks) == pytest.approx(pairs.sum() / (len(windows) * T * (T + 1) / 2))
    # ACR: each head's rectangle is T x (the most keys any of its queries sees), W_min applied to the window first
    w_min = 4
    widest = [int(explicit_mask(T, min(max(w, w_min), T), sinks).sum(-1).max()) for w in windows]
    assert coverage.acr(windows, T, w_min, sinks) == pytest.approx(sum(widest) / (len(windows) * T))
    from instrumentation.backends.windows import band_pairs

    assert [band_pairs(T, w, sinks) for w in windows] == pairs.tolist()


@pytest.mark.parametrize("kernel", ["flash_cpu", "loop"])
def test_realised_work_adds_the_sink_block_it_computes(kernel):
    """The sink part computes a (T - W) x min(k, T - W) block per head besides the band's tiles."""
    T, windows, sinks = 64, [4, 8, 64, 60], 6
    q, k, v = (x.detach() for x in _qkv((1, 4, T, 8), seed=6))
    with_sinks = banded_attention(q, k, v, windows, sinks=sinks, kernel=kernel).realised_work
    without = banded_attention(q, k, v, windows, kernel=kernel).realised_work
    block = sum((T - w) * min(sinks, T - w) for w in windows if w < T)
    assert with_sinks - without == pytest.approx(block / (len(windows) * T * (T + 1) / 2))
    assert with_sinks >= coverage.causal_coverage(windows, T, sinks)


# ----------------------------------------------------------------------------- the model
def test_config_rejects_negative_sinks():
    for bad in (-1, 2.5, "4"):
        with pytest.raises(ConfigError, match="sink_tokens"):
            AAHConfig.from_preset("tiny", sink_tokens=bad)


@pytest.mark.parametrize(
    "regime, extra",
    [("sliding_window", {"static_window": 8}), ("fixed_window", {"fixed_window": 16}), ("full_adaptive", {})],
)
def test_model_attention_maps_follow_the_explicit_mask(regime, extra):
    """Every windowing regime keeps the first k positions: the maps are zero exactly outside the mask."""
    torch.manual_seed(2)  # a routing that windows every layer at this size
    cfg = AAHConfig.from_preset("tiny", regime=regime, sink_tokens=3, warmup_steps=0, **extra)
    model = AAHTransformer(cfg)
    x = torch.randint(0, 256, (2, cfg.block_size))
    with torch.no_grad():
        for step in range(6):  # routing updates (the static regimes have none)
            model.prepare_step(step)
            model(x)
        out = model.eval()(x, return_attentions=True)
    T = cfg.block_size
    for layer, maps in enumerate(out.attentions):
        wins = model.current_windows()[layer].tolist()
        assert min(wins) < T  # something windows
        for h, w in enumerate(wins):
            allowed = explicit_mask(T, w, 3)
            assert bool((maps[:, h][:, ~allowed] == 0).all())
            assert bool((maps[:, h][:, allowed] > 0).all())


def test_model_backends_agree_with_sinks_in_a_training_step():
    """banded and dense_masked give the same loss and gradients for a full_adaptive model with sinks."""
    grads, losses = [], []
    for backend in ("dense_masked", "banded"):
        torch.manual_seed(0)
        cfg = AAHConfig.from_preset("tiny", sink_tokens=2, warmup_steps=0, attention_backend=backend)
        model = AAHTransformer(cfg)
        x = torch.randint(0, 256, (2, cfg.block_size + 1), generator=torch.Generator().manual_seed(1))
        model.prepare_step(0)
        loss = model(x[:, :-1], targets=x[:, 1:]).loss
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert (grads[0] - grads[1]).abs().max().item() < 1e-5


def test_recorded_acr_counts_the_sinks(tmp_path):
    from aah_viz.runlog import load_run, validate_run
    from instrumentation.recorder import Recording, RoutingRecorder

    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", regime="full_adaptive", sink_tokens=5, warmup_steps=1)
    model = AAHTransformer(cfg)
    gen = torch.Generator().manual_seed(0)
    with RoutingRecorder(model, Recording(tmp_path / "run", "full", flush_every=2)) as rec:
        for step in range(4):
            model.prepare_step(step)
            x = torch.randint(0, 256, (2, cfg.block_size + 1), generator=gen)
            loss = model(x[:, :-1], targets=x[:, 1:]).loss
            loss.backward()
            rec.step(step, loss=loss, lr=1e-3, tokens=x.numel())
    assert validate_run(tmp_path / "run") == []
    run = load_run(tmp_path / "run")
    heads, scalars = run.table("heads"), run.table("scalars")
    T = cfg.block_size
    per_layer = scalars[scalars["layer"].notna()]
    for (step, layer), grp in heads.groupby(["step", "layer"]):
        wins = grp["window"].to_numpy()
        pairs = sum(int(explicit_mask(T, int(w), 5).sum()) for w in wins)
        widest = sum(int(explicit_mask(T, max(int(w), cfg.w_min), 5).sum(-1).max()) for w in wins)
        row = per_layer[(per_layer["step"] == step) & (per_layer["layer"] == layer)].set_index("name")["value"]
        assert row["acr_causal"] == pytest.approx(pairs / (len(wins) * T * (T + 1) / 2), rel=1e-12)
        assert row["acr"] == pytest.approx(widest / (len(wins) * T), rel=1e-12)
    assert (heads["window"] < T).any()


# ----------------------------------------------------------------------------- the retrofit and cached decoding
RETRO_WINDOWS = [3, 3, 5, 8, 5, 40, 8, 3]  # one window per query head; heads 0-3 and 4-7 share a key/value head
RETRO_CANDIDATES = (3, 5, 8, 40)
SHARPEN = 20.0  # a random model's logits lie close together: scale the head so that greedy decoding is robust


def _retrofit_pair(impl: str, sinks: int, regime: str = "head_windows"):
    pytest.importorskip("transformers")
    from instrumentation.retrofit import patch_model
    from instrumentation.retrofit.parity import random_model

    ref, patched = (random_model("llama", n_head=8, n_kv=2, head_dim=8, seed=0) for _ in range(2))
    for m in (ref, patched):
        m.set_attn_implementation(impl)
        with torch.no_grad():
            m.get_output_embeddings().weight.mul_(SHARPEN)
    if regime == "head_windows":
        handle = patch_model(
            patched, "head_windows", RETRO_CANDIDATES, static_head_windows=[RETRO_WINDOWS] * 2, sink_tokens=sinks
        )
    else:
        handle = patch_model(patched, "sliding_window", RETRO_CANDIDATES, static_window=5, sink_tokens=sinks)
    assert handle.cfg.sink_tokens == sinks
    return ref, patched


def _model_mask(T: int, windows, sinks: int, impl: str) -> torch.Tensor:
    allowed = torch.stack([explicit_mask(T, w, sinks) for w in windows])[None]  # (1, H, T, T)
    if impl == "sdpa":
        return allowed
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("impl, regime", [("eager", "head_windows"), ("sdpa", "sliding_window")])
def test_retrofit_with_sinks_equals_the_unpatched_model_under_the_explicit_mask(impl, regime):
    ref, patched = _retrofit_pair(impl, 4, regime)
    windows = RETRO_WINDOWS if regime == "head_windows" else [5] * 8
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref(ids, attention_mask=_model_mask(30, windows, 4, impl), use_cache=False).logits
        got = patched(ids, use_cache=False).logits
        without = ref(ids, attention_mask=_model_mask(30, windows, 0, impl), use_cache=False).logits
    assert torch.allclose(got, want, atol=1e-4, rtol=0)
    assert not torch.allclose(got, without, atol=1e-3)  # the sinks bind


@torch.no_grad()
def _reference_tokens(ref, prompt, sinks: int, n: int):
    """Greedy decoding of the unpatched model under the explicit mask, recomputed over the whole sequence."""
    seq, steps = prompt.clone(), []
    for _ in range(n):
        mask = _model_mask(seq.shape[1], RETRO_WINDOWS, sinks, "sdpa")
        logits = ref(seq, attention_mask=mask, use_cache=False).logits[:, -1]
        top = logits.topk(2, dim=-1).values
        assert float((top[:, 0] - top[:, 1]).min()) > 1e-3, "a near tie: choose another seed"
        steps.append(logits)
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    return seq[:, prompt.shape[1] :], torch.stack(steps, 1)


@pytest.mark.parametrize("prompt_len, sinks", [(30, 2), (3, 5)])
def test_cached_generation_with_sinks_equals_the_reference(prompt_len, sinks):
    """Every generated token and its logits: without a cache, with the model's own cache and with
    ``WindowedKVCache``, which keeps per key/value head the first k positions and what its largest window
    reaches. A 3-token prompt with k = 5 makes the cache take its sink positions from the decoded tokens."""
    from transformers import DynamicCache

    from instrumentation.retrofit import WindowedKVCache, cache_bytes

    ref, patched = _retrofit_pair("sdpa", sinks)
    ids = torch.randint(0, 97, (2, prompt_len), generator=torch.Generator().manual_seed(5))
    n = 12
    want_tokens, want_logits = _reference_tokens(ref, ids, sinks, n)
    for cache in ("none", "dynamic", "windowed"):
        kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
        if cache == "none":
            kw["use_cache"] = False
        else:
            kw["cache"] = WindowedKVCache() if cache == "windowed" else DynamicCache(config=ref.config)
        with torch.no_grad():
            out = patched.generate(ids, **kw)
        assert out.sequences[:, prompt_len:].tolist() == want_tokens.tolist(), cache
        assert torch.allclose(torch.stack(out.logits, 1), want_logits, atol=1e-4, rtol=0), cache
        if cache == "windowed":
            seen, per_position = prompt_len + n - 1, 2 * 8 * 2 * 4  # batch x head dim x (keys, values) x float32
            reach = [max(RETRO_WINDOWS[g * 4 : (g + 1) * 4]) for g in range(2)]  # [8, 40]
            kept = sum(min(sinks, seen) + min(r, seen - min(sinks, seen)) for r in reach)
            assert kw["cache"].get_seq_length() == seen
            assert cache_bytes(kw["cache"]) == 2 * kept * per_position


# ----------------------------------------------------------------------------- the profile
def test_profile_reports_each_heads_needed_window_with_and_without_sinks(tmp_path, tiny_causal_lm):
    """``aah-viz profile --sink-tokens 1,3``: per head the smallest window whose band, with the first k
    positions kept, holds 95% (90%) of the head's attention, counted here query by query from the model's
    own attention maps under the explicit mask."""
    import json

    transformers = pytest.importorskip("transformers")
    from aah_viz.cli import main
    from aah_viz.runlog import load_run
    from instrumentation.data import cut_blocks

    tiny_causal_lm(tmp_path / "llama", attn="eager")
    text = "Time flies like an arrow; fruit flies like a banana. " * 30
    (tmp_path / "t.txt").write_text(text)
    args = ["profile", str(tmp_path / "llama"), "--data", str(tmp_path / "t.txt"), "--out", str(tmp_path / "p")]
    assert main(args + ["--windows", "4,8,16,32", "--batches", "2", "--sink-tokens", "3,1"]) == 0
    events = load_run(tmp_path / "p").events("profile")
    (detail,) = [json.loads(d) for d in events["detail"]]
    assert detail["sink_tokens"] == [1, 3]
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "llama", attn_implementation="eager").eval()
    blocks = cut_blocks(np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64), 32)[:2]
    with torch.no_grad():
        att = model(torch.from_numpy(blocks[:, :-1]), output_attentions=True).attentions
    T = 32
    for sinks in (0, 1, 3):
        # kept[h, W - 1]: mean over (batch, query) of the mass the mask with window W and k sinks keeps
        kept = torch.stack(
            [
                torch.stack([(a * explicit_mask(T, w, sinks)).sum(-1).mean(dim=(0, 2)) for w in range(1, T + 1)], -1)
                for a in att
            ]  # fmt: skip
        ).double()
        for share in (95, 90):
            brute = ((kept < share / 100 - 1e-6).sum(-1) + 1).tolist()
            got = (
                detail[f"needed_{share}"] if sinks == 0 else detail["needed_with_sinks"][str(sinks)][f"needed_{share}"]
            )
            assert got == brute, (sinks, share)
    # keeping the first positions never needs a longer window, and here it needs a shorter one somewhere
    with_sinks = np.asarray(detail["needed_with_sinks"]["3"]["needed_95"])
    assert (with_sinks <= np.asarray(detail["needed_95"])).all()


# ----------------------------------------------------------------------------- the benches
def test_bench_generate_with_sinks_counts_the_kept_first_positions(capsys):
    """8 query heads at T = 64 execute 5 x 8, 16, 32, 64; their 4 key/value heads keep 8, 8, 16 and 64
    positions, and with 4 sink tokens each windowed one also the first 4 (the full one keeps all anyway)."""
    import json

    pytest.importorskip("transformers")
    from aah_viz.cli import main

    args = ["bench", "generate", "--prompt-len", "64", "--new-tokens", "8", "--layers", "2", "--head-dim", "8"]
    assert main(args + ["--pairs", "2", "--threads", "1", "--sink-tokens", "4", "--json"]) == 0
    kv = json.loads(capsys.readouterr().out)["kv_cache"]
    seen, per_position = 64 + 7, 2 * 8 * 2 * 4  # layers x head dim x (keys, values) x float32
    kept = [4 + 8, 4 + 8, 4 + 16, min(seen, 4 + 64)]  # 64 + 4 sinks = 68 of 71 positions, none twice
    assert kv["sink_tokens"] == 4 and kv["bytes"]["windowed"] == sum(kept) * per_position
    assert kv["ratio"] == pytest.approx(sum(kept) / (4 * seen)) and kv["ratio"] == pytest.approx(kv["kv_head_share"])
    assert kv["kv_head_share_without_sinks"] == pytest.approx((8 + 8 + 16 + 64) / (4 * seen))


@pytest.mark.slow
def test_bench_retrofit_with_sinks_runs_the_routed_variants_with_them(capsys):
    import json

    pytest.importorskip("transformers")
    from aah_viz.cli import main

    cmd = ["bench", "retrofit", "--seq-len", "64", "--head-dim", "8", "--layers", "2", "--pairs", "2"]
    assert main(cmd + ["--sink-tokens", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["sink_tokens"] == 4 and doc["ratios"]["paper_mix_vs_unpatched"]["n_pairs"] == 2
    pairs = sum(int(explicit_mask(64, w, 4).sum()) for w in doc["paper_mix"])
    assert doc["paper_mix_causal_coverage"] == pytest.approx(pairs / (len(doc["paper_mix"]) * 64 * 65 / 2))
    assert main(cmd + ["--sink-tokens", "-1"]) == 2
    assert "aah-viz: error:" in capsys.readouterr().err
