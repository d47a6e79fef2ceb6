"""The reference backend (method section 10.1): full T x T scores per head, band-masked.

It computes every score of the T x T matrix whatever the window, so its realised work is
T^2 / (T(T+1)/2) ~ 2 times full causal attention. It is kept as the parity reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import MASK_CACHE
from .result import AttentionResult, HeadStats
from .stats import bucket_head_stats
from .windows import bucket_heads, normalise_windows

NAME = "dense_masked"


def fold_heads(x: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """(B, H, T, D) -> (B * |heads|, T, D), rows ordered (b, head)."""
    b, _, t, d = x.shape
    if len(heads) == x.shape[1]:
        part = x
    else:
        part = x.index_select(1, torch.as_tensor(heads, device=x.device))
    return part.reshape(b * len(heads), t, d)


def assemble_heads(parts: list[torch.Tensor], buckets: list[list[int]], batch: int) -> torch.Tensor:
    """Inverse of the bucket fold: per-bucket (B*n, T, X) blocks -> (B, H, T, X) in head order."""
    order = [h for heads in buckets for h in heads]
    pieces = [p.view(batch, len(heads), *p.shape[1:]) for p, heads in zip(parts, buckets)]
    stacked = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
    if order == list(range(len(order))):
        return stacked
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.as_tensor(order)] = torch.arange(len(order))
    return stacked.index_select(1, inverse.to(stacked.device))


def restrict(band: torch.Tensor, mask: torch.Tensor, heads: list[int], batch: int, n_heads: int) -> torch.Tensor:
    """(B * |heads|, T, T) band AND ``mask`` (broadcastable to (B, H, T, T)) for one bucket of heads; a row
    left empty allows every key (finite softmax for padding queries)."""
    m = mask.expand(batch, n_heads if mask.shape[1] != 1 else 1, *mask.shape[2:])
    if m.shape[1] != 1:
        m = m.index_select(1, torch.as_tensor(heads, device=m.device))
    m = m.expand(batch, len(heads), *m.shape[2:]).reshape(batch * len(heads), *m.shape[2:])
    allowed = band & m
    return allowed | ~allowed.any(dim=-1, keepdim=True)


def dense_masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
    need_stats: bool = False,
    scale: float | None = None,
    need_probs: bool = False,
    mask: torch.Tensor | None = None,
    sinks: int = 0,
) -> AttentionResult:
    """Band-masked attention over the full score matrix, heads bucketed by window.

    ``need_probs`` also returns the (B, H, T, T) attention probabilities (before dropout), the
    attention maps of ``AAHTransformer(..., return_attentions=True)``. ``mask`` (boolean, broadcastable
    to (B, H, T, T), True where a query may see a key: a padding mask) further restricts every head's
    band; a query row it leaves without any key attends to all keys instead of producing NaN (its
    output is a padding position's, which no other position reads). ``sinks`` k keeps the first k
    positions visible to every query besides its window (method §10.4).
    """
    batch, n_heads, seq_len, head_dim = q.shape
    wins = normalise_windows(windows, n_heads)
    scale = head_dim**-0.5 if scale is None else float(scale)
    buckets = bucket_heads(wins)
    stats = HeadStats.zeros(n_heads, q.device) if need_stats else None
    parts, prob_parts = [], []
    for window, heads in buckets:
        qb, kb, vb = (fold_heads(x, heads) for x in (q, k, v))
        allowed = MASK_CACHE.get(seq_len, window, q.device, sinks)
        if mask is not None:
            allowed = restrict(allowed, mask, heads, batch, n_heads)
        scores = torch.matmul(qb, kb.transpose(-2, -1)) * scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if need_probs:
            prob_parts.append(probs)
        if training and dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p, training=True)
        out = torch.matmul(probs, vb)
        parts.append(out)
        if stats is not None:
            with torch.no_grad():
                n = len(heads)
                parts_stats = bucket_head_stats(probs.view(batch, n, seq_len, seq_len), out.view(batch, n, seq_len, -1))
                idx = torch.as_tensor(heads, device=q.device)
                for into, value in zip((stats.entropy, stats.norm, stats.usage), parts_stats):
                    into.index_copy_(0, idx, value)
    order = [h for _, h in buckets]
    out = assemble_heads(parts, order, batch)
    work = (seq_len * seq_len) / (seq_len * (seq_len + 1) / 2)
    probs = assemble_heads(prob_parts, order, batch) if need_probs else None
    return AttentionResult(out=out, stats=stats, realised_work=work, backend=NAME, probs=probs)
