"""FlashAttention backend: the ``flash_attn`` package's kernel with ``window_size=(W - 1, 0)``.

Per bucket of heads with one window: ``flash_attn_func(q, k, v, dropout_p, causal=True,
window_size=(W - 1, 0))`` (no window when W >= T), in FlashAttention's (B, T, H, D) layout.
Needs CUDA, the ``flash_attn`` package and fp16/bf16 inputs; anything else runs ``banded``
with a warning that names the reason. Head statistics come from the returned log-sum-exp
and a second, dropout-free call with the keys as values; with attention dropout they are
therefore those of the probabilities before dropout (the kernel does not expose its mask). Sink
tokens (``sinks`` > 0, method §10.4) have no place in its ``window_size``: those calls run ``banded``.
"""

from __future__ import annotations

import importlib.util

import torch

from .banded import fallback_to_banded
from .result import AttentionResult, HeadStats
from .stats import entropy_normaliser
from .windows import band_pairs, bucket_heads, causal_pairs, clamp_window, normalise_windows

NAME = "flash"
DTYPES = (torch.float16, torch.bfloat16)


def unavailable_reason(*, device=None, training: bool = False, dropout_p: float = 0.0) -> str | None:
    if importlib.util.find_spec("flash_attn") is None:
        return "the flash_attn package is not installed"
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type != "cuda":
        return f"FlashAttention needs a CUDA device, got {dev.type!r}"
    return None


def flash_attention_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
    need_stats: bool = False,
    scale: float | None = None,
    sinks: int = 0,
) -> AttentionResult:
    batch, n_heads, seq_len, head_dim = q.shape
    wins = normalise_windows(windows, n_heads)
    kwargs = dict(dropout_p=dropout_p, training=training, need_stats=need_stats, scale=scale, sinks=sinks)
    reason = unavailable_reason(device=q.device)
    if reason is None and q.dtype not in DTYPES:
        reason = f"FlashAttention needs float16 or bfloat16 inputs, got {q.dtype}"
    if reason is None and sinks > 0:
        reason = "flash_attn_func's window_size has no sink tokens (sink_tokens > 0)"
    if reason is not None:
        return fallback_to_banded("flash", reason, q, k, v, windows, **kwargs)
    from flash_attn import flash_attn_func

    scale_value = head_dim**-0.5 if scale is None else float(scale)
    p = float(dropout_p) if training else 0.0
    out = torch.empty_like(q)
    stats = HeadStats.zeros(n_heads, q.device) if need_stats else None
    work = 0
    for window, heads in bucket_heads(wins, key=lambda w: clamp_window(w, seq_len)):
        idx = torch.as_tensor(heads, device=q.device)
        qb, kb, vb = (x.index_select(1, idx).transpose(1, 2) for x in (q, k, v))  # (B, T, n, D)
        size = (-1, 0) if window >= seq_len else (window - 1, 0)
        ob, lse, _ = flash_attn_func(
            qb, kb, vb, dropout_p=p, softmax_scale=scale_value, causal=True, window_size=size, return_attn_probs=True
        )
        out.index_copy_(1, idx, ob.transpose(1, 2))
        work += band_pairs(seq_len, window) * len(heads)
        if need_stats:
            with torch.no_grad():
                pk = flash_attn_func(
                    qb, kb, kb, dropout_p=0.0, softmax_scale=scale_value, causal=True, window_size=size
                )
                if p > 0.0:  # stats of the undropped probabilities: recompute the lse without dropout
                    _, lse, _ = flash_attn_func(
                        qb, kb, vb, softmax_scale=scale_value, causal=True, window_size=size, return_attn_probs=True
                    )
                qf = qb.float()
                rows = lse.float() - scale_value * (qf * pk.float()).sum(-1).transpose(1, 2)  # lse: (B, n, T)
                stats.entropy.index_copy_(0, idx, rows.mean(dim=(0, 2)) / entropy_normaliser(seq_len))
                norm = torch.linalg.vector_norm(ob.float(), dim=-1).mean(dim=(0, 1))
                stats.norm.index_copy_(0, idx, norm)
                diag = scale_value * (qf[:, -1] * kb.float()[:, -1]).sum(-1)  # (B, n)
                usage = torch.exp(diag - lse.float()[:, :, -1]).sum(0) / (batch * seq_len)
                stats.usage.index_copy_(0, idx, usage)
    return AttentionResult(out=out, stats=stats, realised_work=work / (n_heads * causal_pairs(seq_len)), backend=NAME)
