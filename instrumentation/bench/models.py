"""The random Hugging Face models the benchmarks build when no model folder is given (no download)."""

from __future__ import annotations

import torch


def random_causal_lm(family: str, seed: int, n_layer: int, n_head: int, n_kv: int, head_dim: int, vocab: int,
                     positions: int):  # fmt: skip
    """A ``family`` (``llama`` or ``qwen3``) causal LM of that shape from ``seed``, on SDPA: the unpatched
    model's fastest exact path on CPU and GPU."""
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[family]
    config = config_class(
        vocab_size=vocab,
        hidden_size=n_head * head_dim,
        intermediate_size=3 * n_head * head_dim,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=head_dim,
        max_position_embeddings=positions,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return model_class(config)
