"""Parity of patched and unpatched random models on a device (for ``scripts/gpu_check.sh``).

The tests check the same on CPU (tests/test_retrofit.py); this runs it where an accelerator is.
"""

from __future__ import annotations

import torch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def random_model(family: str, *, n_layer: int = 2, n_head: int = 8, n_kv: int = 2, head_dim: int = 16, seed: int = 0):
    """A small random causal LM of ``family`` with grouped-query attention, built from a config (no download)."""
    import transformers

    common = dict(
        vocab_size=97,
        hidden_size=n_head * head_dim,
        intermediate_size=2 * n_head * head_dim,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        max_position_embeddings=4096,
    )
    config = {
        "llama": lambda: transformers.LlamaConfig(**common),
        "mistral": lambda: transformers.MistralConfig(sliding_window=None, **common),
        "qwen2": lambda: transformers.Qwen2Config(use_sliding_window=False, **common),
        "qwen3": lambda: transformers.Qwen3Config(head_dim=head_dim, **common),
    }[family]()
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).float().eval()


@torch.no_grad()
def parity(
    device: str = "cuda", seq_len: int = 256, backends=("banded", "dense_masked", "flex", "flash")
) -> list[dict]:
    """Max abs logit error, patched vs unpatched, per family: full_attention, and every window T per backend."""
    from instrumentation.retrofit import patch_model

    out = []
    for family in FAMILIES:
        model = random_model(family).to(device)
        ids = torch.randint(0, 97, (2, seq_len), generator=torch.Generator().manual_seed(1)).to(device)
        ref = model(ids, use_cache=False).logits
        cases = [("full_attention", {})] + [("full_adaptive", {"attention_backend": b}) for b in backends]
        for regime, overrides in cases:
            handle = patch_model(model, regime, (seq_len,), **overrides)
            got = model(ids, use_cache=False).logits
            handle.unpatch()
            err = (got - ref).abs().max().item()
            out.append(dict(family=family, regime=regime, **overrides, max_abs_error=err, ok=err <= 1e-4))
    return out
