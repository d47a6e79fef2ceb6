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

import warnings
from dataclasses import dataclass

import torch

from . import banded_flash_cpu, banded_loop, banded_sinks
from .result import AttentionResult, HeadStats
from .stats import entropy_normaliser
from .tiles import tile_elements
from .windows import bucket_heads, causal_pairs, clamp_window, normalise_windows, sink_visible

NAME = "banded"
KERNELS = ("auto", "flash_cpu", "loop")


def loop_block(window: int, block: int | None) -> int:
    """Query rows per tile of the loop kernel: large tiles mean few calls, but about block / (block + W)
    of each tile lies outside the band."""
    if block is not None:
        return max(1, int(block))
    return min(256, max(32, window // 2))


def flash_block(window: int, block: int | None) -> int:
    """Query rows per band tile of the flash kernel: small tiles waste little, but every key's
    gradient is summed over (block + W - 1) / block tiles."""
    if block is not None:
        return max(1, int(block))
    return min(128, max(16, window // 4))


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


def _permutation(buckets: list[_Bucket], n_heads: int, device):
    """Head order with each bucket's heads adjacent: (order, inverse) index tensors, or None if identity."""
    order = [h for bucket in buckets for h in bucket.heads]
    if order == list(range(n_heads)):
        return None
    inverse = [0] * n_heads
    for position, head in enumerate(order):
        inverse[head] = position
    return torch.as_tensor(order, device=device), torch.as_tensor(inverse, device=device)


def _in_bucket_order(x: torch.Tensor, perm) -> torch.Tensor:
    return (x if perm is None else x.index_select(1, perm[0])).contiguous()


def _bucket_slices(buckets: list[_Bucket]):
    start = 0
    for bucket in buckets:
        yield bucket, slice(start, start + len(bucket.heads))
        start += len(bucket.heads)


class _BandedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, buckets, scale, dropout_p, collect, sinks=0):
        batch, n_heads, seq_len, head_dim = q.shape
        perm = _permutation(buckets, n_heads, q.device)
        qp, kp, vp = (_in_bucket_order(x, perm) for x in (q, k, v))
        out = torch.empty_like(qp)
        want = collect is not None
        states, parts = [], []
        for bucket, heads in _bucket_slices(buckets):
            qb, kb, vb = (x[:, heads].contiguous() for x in (qp, kp, vp))
            n = batch * len(bucket.heads)
            merge = sinks > 0 and sink_visible(seq_len, bucket.window, sinks) > 0
            kernel_stats = want and not merge  # with sinks the statistics are those of the merged rows
            if bucket.kernel == "flash_cpu":
                state, stats, norm = banded_flash_cpu.flash_forward(
                    qb, kb, vb, bucket.window, bucket.block, scale, kernel_stats, out[:, heads]
                )
                band_out, band_lse = state.out.view(n, seq_len, head_dim), state.lse.view(n, seq_len)
            else:
                flat = [x.view(n, seq_len, head_dim) for x in (qb, kb, vb)]
                ob, state, stats = banded_loop.loop_forward(
                    *flat, bucket.window, bucket.block, scale, dropout_p, kernel_stats, recompute=merge
                )
                out[:, heads] = ob.view(batch, -1, seq_len, head_dim)
                norm = torch.linalg.vector_norm(ob.float(), dim=-1).sum(-1) if kernel_stats else None
                band_out, band_lse = ob, state.lse
            part = None
            if merge:
                flat = [x.view(n, seq_len, head_dim) for x in (qb, kb, vb)]
                whole, lse, part = banded_sinks.sink_forward(
                    *flat, bucket.window, sinks, scale, band_out, band_lse, dropout_p
                )
                out[:, heads] = whole.view(batch, -1, seq_len, head_dim)
                if bucket.kernel == "flash_cpu":
                    state.out, state.lse = whole.view_as(state.out), lse.view_as(state.lse)
                else:
                    state.out, state.lse = whole, lse
                if want:
                    with torch.no_grad():
                        pk = _band_times_keys(flat[0], flat[1], bucket, scale)
                        entropy, norm, usage = banded_sinks.sink_stats(
                            flat[0], flat[1], whole, lse, pk, band_lse, part, scale
                        )
                    stats = (entropy, usage)
            if want:
                collect.append((bucket.heads, stats[0], norm, stats[1]))
            states.append(state)
            parts.append(None if part is None else (part, *flat))
        ctx.buckets, ctx.states, ctx.perm, ctx.parts = buckets, states, perm, parts
        return out if perm is None else out.index_select(1, perm[1])

    @staticmethod
    def backward(ctx, grad_out):
        batch, n_heads, seq_len, head_dim = grad_out.shape
        perm = ctx.perm
        gp = _in_bucket_order(grad_out, perm)
        dq = torch.empty_like(gp)
        dk = torch.zeros_like(gp)
        dv = torch.zeros_like(gp)
        for (bucket, heads), state, part in zip(_bucket_slices(ctx.buckets), ctx.states, ctx.parts):
            g = gp[:, heads].contiguous()
            n = batch * len(bucket.heads)
            if bucket.kernel == "flash_cpu":
                banded_flash_cpu.flash_backward(state, g, dq[:, heads], dk[:, heads], dv[:, heads])
            else:
                grads = banded_loop.loop_backward(state, g.view(n, seq_len, head_dim))
                for dst, src in zip((dq, dk, dv), grads):
                    dst[:, heads] = src.view(batch, -1, seq_len, head_dim)
            if part is not None:
                part, qf, kf, vf = part
                whole = state.out.reshape(n, seq_len, head_dim)
                sq, sk, sv = banded_sinks.sink_backward(part, qf, kf, vf, whole, g.view(n, seq_len, head_dim))
                dq[:, heads, part.first :] += sq.view(batch, -1, *sq.shape[1:]).to(dq.dtype)
                dk[:, heads, : part.n] += sk.view(batch, -1, *sk.shape[1:]).to(dk.dtype)
                dv[:, heads, : part.n] += sv.view(batch, -1, *sv.shape[1:]).to(dv.dtype)
        if perm is not None:
            dq, dk, dv = (x.index_select(1, perm[1]) for x in (dq, dk, dv))
        return dq, dk, dv, None, None, None, None, None


def _band_times_keys(q, k, bucket: _Bucket, scale: float) -> torch.Tensor:
    """P_b K per row (N, T, D): the band's probabilities (no dropout) times the keys, for the statistics."""
    if bucket.kernel == "flash_cpu":
        b = q.view(1, *q.shape)
        kk = k.view(1, *k.shape)
        pk = torch.empty_like(b)
        banded_flash_cpu.flash_forward(b, kk, kk, bucket.window, bucket.block, scale, False, pk)
        return pk.view_as(q)
    return banded_loop.loop_forward(q, k, k, bucket.window, bucket.block, scale, 0.0, False)[0]


def banded_work(seq_len: int, buckets: list[_Bucket], n_heads: int, sinks: int = 0) -> float:
    """Realised work: score elements computed (the sink blocks included) over those of full causal attention."""
    total = 0
    for b in buckets:
        if b.kernel == "flash_cpu":
            per_head = banded_flash_cpu.region_elements(seq_len, b.window, b.block)
        else:
            per_head = tile_elements(seq_len, b.window, b.block)
        total += (per_head + banded_sinks.sink_elements(seq_len, b.window, sinks)) * len(b.heads)
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
    sinks: int = 0,
) -> AttentionResult:
    """Sliding-window attention that computes only the tiles covering each head's band.

    ``block`` fixes the query rows per tile (default: chosen per window); ``kernel`` is one
    of ``auto``, ``flash_cpu`` (CPU without dropout only; otherwise ``loop`` runs), ``loop``.
    ``sinks`` k keeps the first k positions visible to every query besides its band (method §10.4;
    ``banded_sinks`` merges them into each bucket's rows).
    """
    if kernel not in KERNELS:
        from aah_viz.errors import ConfigError

        raise ConfigError(f"banded kernel: unknown {kernel!r}; allowed values are {', '.join(KERNELS)}")
    batch, n_heads, seq_len, head_dim = q.shape
    wins = normalise_windows(windows, n_heads)
    scale = head_dim**-0.5 if scale is None else float(scale)
    p = float(dropout_p) if training else 0.0
    buckets = plan(wins, seq_len, choose_kernel(q, p, kernel), block)
    collect = [] if need_stats else None
    sinks = max(0, int(sinks))
    out = _BandedAttention.apply(q, k, v, buckets, scale, p, collect, sinks)
    stats = None
    if need_stats:
        stats = HeadStats.zeros(n_heads, q.device)
        denom = float(batch * seq_len)
        for heads, entropy, norm, usage in collect:
            idx = torch.as_tensor(heads, device=q.device)
            stats.entropy.index_add_(0, idx, entropy.view(batch, -1).sum(0) / (denom * entropy_normaliser(seq_len)))
            stats.norm.index_add_(0, idx, norm.view(batch, -1).sum(0) / denom)
            stats.usage.index_add_(0, idx, usage.view(batch, -1).sum(0) / denom)
    return AttentionResult(
        out=out, stats=stats, realised_work=banded_work(seq_len, buckets, n_heads, sinks), backend=NAME
    )


def fallback_to_banded(backend: str, reason: str, q, k, v, windows, **kwargs) -> AttentionResult:
    """Run ``banded`` in place of a backend that cannot run this call, with a warning naming why."""
    warnings.warn(
        f"attention backend {backend!r} cannot run this call ({reason}); falling back to 'banded'",
        RuntimeWarning,
        stacklevel=2,
    )
    return banded_attention(q, k, v, windows, **kwargs)
