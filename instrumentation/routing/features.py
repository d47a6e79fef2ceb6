"""Head features (method §4): per-head 9-D vectors, pooled group features, the feature EMA.

All features are float32 and detached. Per-head moments are computed in vectorised passes over
(B, H, T, D); the previous forward's entropy / norm / usage (§11.2) fill the last three columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

FEATURE_DIM = 9


def _prev_columns(prev_stats: torch.Tensor | None, n_rows_heads: int, device) -> torch.Tensor:
    """(H, 3) previous-forward [entropy, norm, usage], zeros when there is none (§4.1)."""
    if prev_stats is None:
        return torch.zeros((n_rows_heads, 3), dtype=torch.float32, device=device)
    return prev_stats.detach().to(device=device, dtype=torch.float32)


STD_CHUNK_BYTES = 1 << 21  # float64 working set per chunk: small enough to stay in cache, no fresh pages


def per_head_std(x: torch.Tensor) -> torch.Tensor:
    """(H,) unbiased std of a (B, H, T, D) tensor over (B, T, D): the float32 ``x.std(dim=(0, 2, 3))``
    gives, at a fraction of its cost on the CPU.

    Torch's CPU std of float32 accumulates a Welford recurrence in float64, one division per element.
    Here each chunk of tokens is copied once to float64, in ``x``'s own memory order and small enough
    to stay in cache, and summed per head after subtracting a shift ``c`` (the first chunk's mean):
    ``var = (sum (x - c)^2 - n d^2) / (n - 1)`` with ``d = sum (x - c) / n``. As ``c`` lies near the
    mean, ``n d^2`` is small against the sum of squares and nothing cancels: the float64 variance is
    accurate to about 1e-16 relative, like torch's, far inside one float32 step. So after the one
    rounding to float32 the bits agree unless a value lies within that distance of a rounding boundary
    (tested against torch's std; all reference trajectories replay bit for bit). Other devices,
    dtypes and shapes use torch's own reduction.
    """
    n_heads = x.shape[1] if x.dim() == 4 else 0
    if x.device.type != "cpu" or x.dtype != torch.float32 or n_heads == 0 or x.numel() < 2 * n_heads:
        return x.std(dim=(0, 2, 3), correction=1)
    order = sorted(range(4), key=lambda d: (-x.stride(d), d))  # memory order: each copy streams
    at = order.index(1)
    B, _, T, D = x.shape
    chunk = max(1, STD_CHUNK_BYTES // (8 * B * n_heads * D))
    buf = torch.empty(B * n_heads * min(chunk, T) * D, dtype=torch.float64)

    def per_head(rows: torch.Tensor) -> torch.Tensor:  # (outer, H x inner) -> (H,)
        return rows.sum(0).view(n_heads, -1).sum(1)

    shift = None
    sums = torch.zeros(n_heads, dtype=torch.float64)
    squares = torch.zeros(n_heads, dtype=torch.float64)
    for t0 in range(0, T, chunk):
        part = x[:, :, t0 : t0 + chunk].permute(order)
        inner = math.prod(part.shape[at + 1 :])  # entries per head after the head dim, in memory order
        rows = buf[: part.numel()].view(part.shape).copy_(part).view(-1, n_heads * inner)
        if shift is None:
            shift = per_head(rows) / (rows.numel() // n_heads)
        rows.sub_(shift.repeat_interleave(inner))
        sums += per_head(rows)
        squares += per_head(rows.mul_(rows))
    n = x.numel() // n_heads
    d = sums / n
    return ((squares - n * d * d) / (n - 1)).sqrt_().to(torch.float32)


def head_features(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prev_stats: torch.Tensor | None = None
) -> torch.Tensor:
    """(H, 9) = [mean|q|, std q, mean|k|, std k, mean|v|, std v, e, n, u] per head (§4.1).

    ``mean|x|`` is the mean absolute activation over the head's B*T*D entries and ``std`` the
    unbiased standard deviation over the same entries. ``prev_stats`` is (H, 3) or None.
    """
    with torch.no_grad():
        n_heads = q.shape[1]
        cols = []
        for x in (q, k, v):
            x = x.detach().float()
            # mean |x| keeps torch's float32 reduction: its order of summation fixes its bits
            cols.append(x.abs().mean(dim=(0, 2, 3)))
            cols.append(per_head_std(x))
        base = torch.stack(cols, dim=1)
        return torch.cat([base, _prev_columns(prev_stats, n_heads, base.device)], dim=1)


def pooled_group_features(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    groups: Sequence[Sequence[int]],
    prev_stats: torch.Tensor | None = None,
) -> torch.Tensor:
    """(G, 9) pooled Q/K/V group features (§4.2), groups in group-id order.

    The first six columns pool the raw activations of all member heads (so the std is the std of
    the pooled entries, not a mean of per-head stds); the last three average the members' previous
    entropy / norm / usage. No EMA. The reductions follow the reference's order exactly (members
    gathered in ascending order as ``x[:, heads]``, one reduction over all four dims; each previous
    statistic averaged as its own 1-D column), so the features are bit-identical to its own.
    """
    with torch.no_grad():
        n_heads = q.shape[1]
        prev = _prev_columns(prev_stats, n_heads, q.device)
        columns = [prev[:, c].contiguous() for c in range(prev.shape[1])]
        tensors = [x.detach().float() for x in (q, k, v)]
        rows = []
        for members in groups:
            idx = torch.as_tensor(sorted(members), dtype=torch.long).to(q.device, non_blocking=True)
            cols = []
            for x in tensors:
                pooled = x[:, idx]
                cols.append(pooled.abs().mean(dim=(0, 1, 2, 3)))
                cols.append(pooled.std(dim=(0, 1, 2, 3), correction=1))
            cols += [col[idx].mean() for col in columns]
            rows.append(torch.stack(cols))
        if not rows:
            return torch.zeros((0, FEATURE_DIM), dtype=torch.float32, device=q.device)
        return torch.stack(rows)


ZSCORE_STD_FLOOR = 1e-6  # a feature that (almost) does not vary across the heads carries no direction


def normalize_features(features: torch.Tensor, mode: str = "none") -> torch.Tensor:
    """The head features the adaptive build clusters (``feature_normalization``, issue 26).

    ``none`` (the paper): as they are. ``zscore``: each of the 9 features standardised across the
    layer's heads (mean 0, population std 1; a feature with std below ``ZSCORE_STD_FLOOR`` becomes 0),
    so cosine similarity compares how heads differ from the layer's typical head instead of the
    shared, always positive magnitudes that make every pair of raw rows nearly parallel.
    """
    if mode == "none":
        return features
    if mode != "zscore":
        raise ValueError(f"unknown feature_normalization {mode!r}; allowed: none, zscore")
    x = features.detach().float()
    std = x.std(dim=0, correction=0, keepdim=True)
    centred = x - x.mean(dim=0, keepdim=True)
    return torch.where(std >= ZSCORE_STD_FLOOR, centred / std.clamp_min(ZSCORE_STD_FLOOR), torch.zeros_like(x))


def ema_update(ema: torch.Tensor | None, current: torch.Tensor, alpha: float) -> torch.Tensor:
    """Feature EMA of §4.3: alpha weights the old value; first use (or a shape change) copies."""
    current = current.detach().float()
    if ema is None or ema.shape != current.shape:
        return current.clone()
    a = min(1.0, max(0.0, float(alpha)))
    return a * ema.to(current.device) + (1.0 - a) * current
