"""Banded attention in plain PyTorch: each query block attends only to the keys of its band.

Heads are grouped by (clamped) window. For each bucket the query rows are cut into tiles,
each computed against the key span that covers its rows' bands, masked inside the tile and
soft-maxed over the band only. The math is that of ``dense_masked``; only the all-masked part
of the T x T matrix is skipped. Two kernels implement a bucket:

* ``banded_flash_cpu``: on CPU without attention dropout, PyTorch's fused flash-attention CPU
  operator over a causal prefix and batched band tiles (a few large calls per bucket);
* ``banded_loop``: anywhere (GPU, dropout), a loop of tile matmuls in plain tensor operations.

Forward and backward are one ``torch.autograd.Function`` over all buckets, so gradients are
written once per bucket into the (B, H, T, D) buffers instead of through a full-size gradient
per slice. Head statistics follow method section 11.2 exactly (to float rounding): see the
kernels for how they are obtained without a logarithm per element.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import banded_flash_cpu, banded_loop
from .result import AttentionResult, HeadStats
from .stats import entropy_normaliser
from .tiles import tile_elements
from .windows import bucket_heads, causal_pairs, clamp_window, normalise_windows

NAME = "banded"
KERNELS = ("auto", "flash_cpu", "loop")


def loop_block(window: int, block: int | None) -> int:
    """Query rows per tile of the loop kernel (large tiles: few calls; the waste is about block/W)."""
    if block is not None:
        return max(1, int(block))
    return 128 if window <= 1024 else 256


def flash_block(window: int, block: int | None) -> int:
    """Query rows per band tile of the flash kernel (small tiles: little waste; copies cost D/block)."""
    if block is not None:
        return max(1, int(block))
    return min(128, max(16, window // 8))


@dataclass
class _Bucket:
    window: int
    heads: list[int]
    kernel: str
    block: int


def choose_kernel(q: torch.Tensor, dropout_p: float, kernel: str) -> str:
    if kernel == "auto":
        return "flash_cpu" if banded_flash_cpu.supported(q, dropout_p) else "loop"
    if kernel == "flash_cpu" and not banded_flash_cpu.supported(q, dropout_p):
        return "loop"
    return kernel


def plan(windows: list[int], seq_len: int, kernel: str, block: int | None) -> list[_Bucket]:
    buckets = bucket_heads(windows, key=lambda w: clamp_window(w, seq_len))
    out = []
    for w, heads in buckets:
        blk = flash_block(w, block) if kernel == "flash_cpu" else loop_block(w, block)
        out.append(_Bucket(w, heads, kernel, blk))
    return out


def _head_index(heads: list[int], n_heads: int, device) -> torch.Tensor | None:
    if heads == list(range(n_heads)):
        return None
    return torch.as_tensor(heads, dtype=torch.long, device=device)


def _gather(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """(B, H, T, D) -> contiguous (B, n, T, D) of the bucket's heads."""
    return (x if index is None else x.index_select(1, index)).contiguous()


def _scatter(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor | None) -> None:
    if index is None:
        dst.copy_(src)
    else:
        dst.index_copy_(1, index, src)


class _BandedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, buckets, scale, dropout_p, sink):
        batch, n_heads, seq_len, head_dim = q.shape
        out = torch.empty_like(q)
        states = []
        for bucket in buckets:
            index = _head_index(bucket.heads, n_heads, q.device)
            qb, kb, vb = _gather(q, index), _gather(k, index), _gather(v, index)
            want = sink is not None
            if bucket.kernel == "flash_cpu":
                state, stats, norm = banded_flash_cpu.flash_forward(
                    qb, kb, vb, bucket.window, bucket.block, scale, want, out, index
                )
            else:
                n = batch * len(bucket.heads)
                flat = (x.view(n, seq_len, head_dim) for x in (qb, kb, vb))
                ob, state, stats = banded_loop.loop_forward(*flat, bucket.window, bucket.block, scale, dropout_p, want)
                ob = ob.view(batch, -1, seq_len, head_dim)
                _scatter(out, ob, index)
                if want:
                    norm = torch.linalg.vector_norm(ob.float(), dim=-1).sum(-1).reshape(-1)
            if want:
                sink.append((bucket.heads, stats[0], norm, stats[1]))
            states.append(state)
        ctx.buckets, ctx.states, ctx.shape = buckets, states, q.shape
        return out

    @staticmethod
    def backward(ctx, grad_out):
        batch, n_heads, seq_len, head_dim = ctx.shape
        dq = torch.empty(ctx.shape, dtype=grad_out.dtype, device=grad_out.device)
        dk = torch.empty_like(dq)
        dv = torch.empty_like(dq)
        for bucket, state in zip(ctx.buckets, ctx.states):
            index = _head_index(bucket.heads, n_heads, grad_out.device)
            g = _gather(grad_out, index)
            if bucket.kernel == "flash_cpu":
                grads = banded_flash_cpu.flash_backward(state, g)
            else:
                n = batch * len(bucket.heads)
                grads = banded_loop.loop_backward(state, g.view(n, seq_len, head_dim))
                grads = tuple(x.view(batch, -1, seq_len, head_dim) for x in grads)
            for dst, src in zip((dq, dk, dv), grads):
                _scatter(dst, src, index)
        return dq, dk, dv, None, None, None, None


def banded_work(seq_len: int, buckets: list[_Bucket], n_heads: int) -> float:
    """Realised work: score elements computed over those of full causal attention."""
    total = 0
    for b in buckets:
        if b.kernel == "flash_cpu":
            per_head = banded_flash_cpu.region_elements(seq_len, b.window, b.block)
        else:
            per_head = tile_elements(seq_len, b.window, b.block)
        total += per_head * len(b.heads)
    return total / (n_heads * causal_pairs(seq_len))


def banded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
    need_stats: bool = False,
    scale: float | None = None,
    block: int | None = None,
    kernel: str = "auto",
) -> AttentionResult:
    """Sliding-window attention that computes only the tiles covering each head's band.

    ``block`` fixes the query rows per tile (default: chosen per window); ``kernel`` is one
    of ``auto``, ``flash_cpu`` (CPU without dropout only; otherwise ``loop`` runs), ``loop``.
    """
    if kernel not in KERNELS:
        from aah_viz.errors import ConfigError

        raise ConfigError(f"banded kernel: unknown {kernel!r}; allowed values are {', '.join(KERNELS)}")
    batch, n_heads, seq_len, head_dim = q.shape
    wins = normalise_windows(windows, n_heads)
    scale = head_dim ** -0.5 if scale is None else float(scale)
    p = float(dropout_p) if training else 0.0
    buckets = plan(wins, seq_len, choose_kernel(q, p, kernel), block)
    sink = [] if need_stats else None
    out = _BandedAttention.apply(q, k, v, buckets, scale, p, sink)
    stats = None
    if need_stats:
        stats = HeadStats.zeros(n_heads, q.device)
        denom = float(batch * seq_len)
        for heads, entropy, norm, usage in sink:
            idx = torch.as_tensor(heads, device=q.device)
            stats.entropy.index_add_(0, idx, entropy.view(batch, -1).sum(0) / (denom * entropy_normaliser(seq_len)))
            stats.norm.index_add_(0, idx, norm.view(batch, -1).sum(0) / denom)
            stats.usage.index_add_(0, idx, usage.view(batch, -1).sum(0) / denom)
    return AttentionResult(out=out, stats=stats, realised_work=banded_work(seq_len, buckets, n_heads), backend=NAME)
