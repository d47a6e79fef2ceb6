"""The attention mask a Hugging Face model hands its attention modules, as keys each query may see.

The model builds the mask from the user's padding mask (and any 4D mask the user passes): a float
mask for the eager implementation (0 where a query sees a key, the dtype's minimum elsewhere), a
boolean one for SDPA (True where it sees), a 2D padding mask or none at all when nothing but
causality restricts. ``allowed_keys`` turns any of them into one boolean form, so the patched
attention applies it together with each head's window, as the unpatched attention applies it alone.
"""

from __future__ import annotations

import torch

from aah_viz.errors import ConfigError


def allowed_keys(attention_mask, q_len: int) -> torch.Tensor | None:
    """Boolean (B or 1, 1 or H, q_len, K), True where a query may see a key, over the last K positions
    (the mask's width); None when the mask restricts nothing inside causality (the queries are the last
    ``q_len`` positions).

    Raises ``ConfigError`` for what cannot be expressed as keys seen or not (a flex ``BlockMask``,
    additive biases other than 0 and the dtype's minimum).
    """
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise ConfigError(
            f"the patched attention cannot read a {type(attention_mask).__name__} attention mask; load the model "
            "with attn_implementation='eager' or 'sdpa'"
        )
    m = attention_mask
    if m.dim() == 2:  # (B, K) padding mask (flash-attention implementations)
        m = m[:, None, None, :].bool().expand(-1, -1, q_len, -1)
    elif m.dim() != 4:
        raise ConfigError(f"attention mask of shape {tuple(m.shape)}: expected 2 or 4 dimensions")
    elif m.dtype != torch.bool:
        low = torch.finfo(m.dtype).min / 2 if m.dtype.is_floating_point else 0
        blocked = m <= low
        if not torch.all(blocked | (m == 0)):
            raise ConfigError(
                "the attention mask holds additive biases (values other than 0 and -inf); the patched attention "
                "applies masks, not biases"
            )
        m = ~blocked
    m = m[..., -q_len:, :]
    k_len = m.shape[-1]
    causal = torch.ones(q_len, k_len, dtype=torch.bool, device=m.device).tril(k_len - q_len)
    if not torch.any(causal & ~m):
        return None
    return m
