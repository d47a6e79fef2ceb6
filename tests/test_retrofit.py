"""Retrofit: AAH-v3 patched into small randomly initialised Hugging Face models (no download).

Exactness is checked against the unpatched model itself: full attention and all-windows-equal-T
reproduce it; a sliding window reproduces it run on the window's tokens (rotary is relative).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aah_viz.errors import ConfigError  # noqa: E402
from aah_viz.runlog import load_run  # noqa: E402
from instrumentation import RoutingRecorder  # noqa: E402
from instrumentation.recorder import Recording  # noqa: E402
from instrumentation.retrofit import load_adapter, patch_model, read_adapter, save_adapter  # noqa: E402
from instrumentation.retrofit.parity import FAMILIES, random_model  # noqa: E402

VOCAB = 97  # random_model's vocabulary


def tiny_model(family: str, *, n_layer: int = 2, n_head: int = 8, n_kv: int = 2, seed: int = 0):
    """A random model of ``family`` with grouped-query attention (n_kv < n_head), float32, eval mode."""
    return random_model(family, n_layer=n_layer, n_head=n_head, n_kv=n_kv, head_dim=8, seed=seed)


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def ids_of(T: int, batch: int = 2, seed: int = 1):
    return torch.randint(0, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_full_attention_reproduces_the_unpatched_model(family):
    model = tiny_model(family)
    ids = ids_of(48)
    ref = logits(model, ids)
    handle = patch_model(model, "full_attention", windows=(16, 48))
    assert torch.allclose(logits(model, ids), ref, atol=1e-5, rtol=0)
    assert handle.current_windows().tolist() == [[48] * 8] * 2


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backend", ["banded", "dense_masked"])
def test_routing_with_every_window_T_reproduces_the_unpatched_model(family, backend):
    model = tiny_model(family)
    ids = ids_of(32)
    ref = logits(model, ids)
    handle = patch_model(model, "full_adaptive", windows=(32,), attention_backend=backend)
    model.train()  # training forwards run the state machine and keep its decisions
    for step in range(3):
        handle.prepare_step(step)
        with torch.no_grad():
            out = model(ids, use_cache=False).logits
        assert torch.allclose(out, ref, atol=1e-5, rtol=0)
    events = []
    with handle.subscribe(events.append):
        handle.prepare_step(5)
        with torch.no_grad():
            model(ids, use_cache=False)
    assert [e.layer for e in events] == [0, 1]
    assert events[0].updated and events[0].tree is not None  # the full hierarchy ran, not a shortcut


@pytest.mark.parametrize("family", FAMILIES)
def test_sliding_window_equals_the_model_on_the_windows_tokens(family):
    W, T = 8, 24
    model = tiny_model(family, n_layer=1)
    ids = ids_of(T, batch=1)
    patched = tiny_model(family, n_layer=1)
    patch_model(patched, "sliding_window", windows=(W, T), static_window=W)
    out = logits(patched, ids)
    for i in (W - 1, 13, T - 1):
        window_ids = ids[:, i - W + 1 : i + 1]
        assert torch.allclose(out[:, i], logits(model, window_ids)[:, -1], atol=1e-5, rtol=0), i
    # a position with more than W tokens before it differs from full attention
    assert not torch.allclose(out[:, T - 1], logits(model, ids)[:, -1], atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_patched_model_returns_its_attention_probabilities(family):
    """What `aah-viz probe` reads (``output_attentions=True``): with full attention, the unpatched
    model's own eager probabilities; with a sliding window, rows that sum to one inside the window."""
    ids = ids_of(12, batch=1)
    model = tiny_model(family)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        expected = model(ids, use_cache=False, output_attentions=True).attentions
    patch_model(model, "full_attention", windows=(4, 12))
    with torch.no_grad():
        got = model(ids, use_cache=False, output_attentions=True).attentions
    assert len(got) == len(expected) == 2
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    W = 4
    local = tiny_model(family)
    patch_model(local, "sliding_window", windows=(W, 12), static_window=W)
    with torch.no_grad():
        att = local(ids, use_cache=False, output_attentions=True).attentions[0][0]  # (H, T, T)
    assert torch.allclose(att.sum(-1), torch.ones(att.shape[:2]), atol=1e-5)
    i, j = torch.meshgrid(torch.arange(12), torch.arange(12), indexing="ij")
    assert (att[:, (i - j >= W) | (j > i)] == 0).all()


@pytest.mark.parametrize("n_kv", [1, 2, 4, 8])
def test_grouped_query_attention_for_every_key_value_head_count(n_kv):
    model = tiny_model("qwen3", n_kv=n_kv)
    ids = ids_of(32)
    ref = logits(model, ids)
    patch_model(model, "full_adaptive", windows=(32,), attention_backend="dense_masked")
    assert torch.allclose(logits(model, ids), ref, atol=1e-5, rtol=0)


def test_rotary_positions_matter_and_are_kept():
    """The same tokens shifted by one position give other logits, in the patched model as in the base."""
    model = tiny_model("llama")
    ids = ids_of(33)
    patch_model(model, "full_attention", windows=(32,))
    a, b = logits(model, ids[:, :32]), logits(model, ids[:, 1:33])
    assert not torch.allclose(a[:, 1:], b[:, :-1], atol=1e-3)


def test_unpatch_restores_bit_identical_outputs_and_the_state_dict():
    model = tiny_model("qwen3")
    ids = ids_of(32)
    ref = logits(model, ids)
    keys = set(model.state_dict())
    handle = patch_model(model, "full_adaptive", windows=(8, 16, 32))
    assert any(".aah." in k for k in model.state_dict())
    model.train()
    handle.prepare_step(0)
    with torch.no_grad():
        model(ids, use_cache=False)
    assert not torch.allclose(logits(model, ids), ref, atol=1e-3)  # routing narrowed some windows
    handle.unpatch()
    model.eval()
    assert torch.equal(logits(model, ids), ref)
    assert set(model.state_dict()) == keys
    assert not hasattr(model, "aah_routing")
    handle.unpatch()  # idempotent


def test_patching_twice_and_unknown_models_are_refused():
    model = tiny_model("llama")
    patch_model(model, "full_attention", windows=(32,))
    with pytest.raises(ConfigError, match="already patched"):
        patch_model(model, "full_attention", windows=(32,))
    with pytest.raises(ConfigError, match="no attention module"):
        patch_model(torch.nn.Linear(2, 2), "full_attention")


def _adapt(model, handle, ids, steps: int = 4):
    """A few training forwards (routing mutates) with the controller perturbed away from its init."""
    with torch.no_grad():
        for p in handle.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    model.train()
    for step in range(steps):
        handle.prepare_step(step)
        with torch.no_grad():
            model(ids, use_cache=False)
    model.eval()


def test_adapter_round_trip_onto_a_fresh_base_model(tmp_path):
    ids = ids_of(32)
    model = tiny_model("qwen3")
    handle = patch_model(model, "full_adaptive", windows=(8, 16, 32))
    _adapt(model, handle, ids)
    windows = handle.current_windows()
    assert windows.min() < 32  # the adapted routing is not trivially full attention
    expected = logits(model, ids)
    path = save_adapter(handle, tmp_path / "adapter.safetensors", step=4)

    cfg, tensors, plain, extra = read_adapter(path)
    assert cfg.regime == "full_adaptive" and extra == {"step": 4}
    assert all(k.startswith("layers.") for k in tensors)  # nothing of the base model unless asked
    assert sum(t.numel() for k, t in tensors.items() if ".state." not in k) == sum(
        p.numel() for p in handle.parameters()
    )

    fresh = tiny_model("qwen3")  # same seed: the same pretrained weights
    loaded = load_adapter(fresh, path)
    assert torch.equal(loaded.current_windows(), windows)
    assert torch.equal(logits(fresh, ids), expected)
    for a, b in zip(handle.parameters(), loaded.parameters()):
        assert torch.equal(a, b)


def test_adapter_errors_are_one_clear_line(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        read_adapter(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        read_adapter(tmp_path / "missing.safetensors")
    handle = patch_model(tiny_model("llama", n_layer=2), "full_adaptive", windows=(16, 32))
    path = save_adapter(handle, tmp_path / "a.safetensors")
    with pytest.raises(ConfigError, match="does not match"):
        load_adapter(tiny_model("llama", n_layer=3), path)


def test_train_parameters_select_what_adaptation_trains():
    model = tiny_model("qwen3")
    handle = patch_model(model, "full_adaptive", windows=(16, 32))
    aah = {id(p) for p in handle.parameters()}
    assert {id(p) for p in handle.train_parameters("aah")} == aah
    head = {id(p) for p in model.get_output_embeddings().parameters()}
    assert {id(p) for p in handle.train_parameters("aah+head")} == aah | head
    assert len(handle.train_parameters("all")) == len(list(model.parameters()))
    with pytest.raises(ConfigError, match="allowed values"):
        handle.train_parameters("everything")


def test_soft_mixture_adaptation_moves_only_the_aah_parameters():
    model = tiny_model("qwen3")
    handle = patch_model(model, "full_adaptive", windows=(8, 16, 32), controller_training="soft_mixture")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = handle.train_parameters("aah")
    opt = torch.optim.SGD(params, lr=0.5)
    ids = ids_of(33)
    model.train()
    for step in range(3):
        handle.prepare_step(step)
        loss = model(ids[:, :-1], labels=ids[:, :-1], use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(".aah." in n for n in moved)


def test_the_recorder_records_a_patched_model(tmp_path):
    model = tiny_model("qwen3")
    handle = patch_model(model, "full_adaptive", windows=(8, 16, 32))
    ids = ids_of(32)
    model.train()
    seen = []
    with RoutingRecorder(model, Recording(tmp_path / "run", "full")) as rec:
        for step in range(7):
            handle.prepare_step(step)
            with torch.no_grad():
                model(ids, use_cache=False)
            seen.append(handle.current_windows().clone())
            rec.step(step, loss=1.0)
    run = load_run(tmp_path / "run")
    assert run.manifest["config"]["bias"] is False  # Qwen3's MLP linears have no bias
    heads = run.table("heads")
    assert set(heads["step"]) == set(range(7))
    for step in (0, 6):
        rows = heads[heads["step"] == step].sort_values(["layer", "head"])
        assert rows["window"].tolist() == seen[step].reshape(-1).tolist()
    assert len(run.table("tree")) > 0


def test_the_config_records_the_models_own_mlp_bias():
    model = tiny_model("llama")
    assert patch_model(model, "full_attention", windows=(32,)).cfg.bias is False
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=8,
        mlp_bias=True,
    )
    biased = transformers.LlamaForCausalLM(config)
    assert patch_model(biased, "full_attention", windows=(32,)).cfg.bias is True


def test_windows_beyond_the_models_positions_or_own_window_are_clamped_with_a_message():
    model = tiny_model("llama")
    model.config.max_position_embeddings = 64
    with pytest.warns(UserWarning, match="windows 512, 1024, 2048, 4096 exceed the model's 64 positions"):
        handle = patch_model(model, "full_adaptive")  # the paper's windows by default
    assert handle.cfg.windows == (64,) and handle.cfg.block_size == 64
    handle.unpatch()
    with pytest.warns(UserWarning, match="clamped to 64"):
        handle = patch_model(model, "full_adaptive", windows=(16, 32, 128))
    assert handle.cfg.windows == (16, 32, 64)
    handle.unpatch()
    with pytest.raises(ConfigError, match="block_size 128 exceeds the model's 64 positions"):
        patch_model(model, "full_adaptive", windows=(16, 32), block_size=128)
    mistral = tiny_model("mistral")
    mistral.config.sliding_window = 24  # its mask keeps every query within 24 tokens
    with pytest.warns(UserWarning, match="exceed the model's own sliding window of 24 tokens"):
        handle = patch_model(mistral, "full_adaptive", windows=(8, 16, 32))
    assert handle.cfg.windows == (8, 16, 24)


def test_feature_normalization_reaches_a_patched_model_as_a_config_key():
    """patch_model's overrides carry the option: the patched layers cluster standardised features."""
    model = tiny_model("llama", n_layer=1)
    handle = patch_model(model, "full_adaptive", windows=(8, 16, 32), feature_normalization="zscore")
    assert handle.cfg.to_dict()["feature_normalization"] == "zscore"
    seen = []
    handle.subscribe(lambda e: seen.append(e))
    with torch.no_grad():
        model(ids_of(32), use_cache=False)
    clustered = [e.head_features for e in seen if e.updated and e.head_features is not None]
    assert clustered
    for features in clustered:  # standardised across the heads: every feature centred
        assert torch.allclose(features.mean(dim=0), torch.zeros(9), atol=1e-5)
