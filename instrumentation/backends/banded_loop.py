"""The portable banded kernel: a loop over query-block tiles in plain tensor operations.

Works on any device and dtype, with attention dropout and head statistics. For one bucket:
q, k, v of shape (N, T, D), one window for all N rows. Query block i attends the key span
covering its rows' bands; the tile probabilities are kept for the backward (or recomputed
from the row log-sum-exp with ``recompute=True``).

Head statistics use -sum P' ln P' = lse * sum P' - sum P' s + ln(1 - p) * sum P' (P' the
probabilities after dropout, s the scaled scores), one product-sum per tile instead of a
logarithm per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .tiles import Tile, band_tiles, mask_tile_


@dataclass
class LoopState:
    tiles: list[Tile]
    qs: torch.Tensor  # scaled queries
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    scale: float
    dropout_p: float
    fill: float
    lse: torch.Tensor | None = None
    probs: list = field(default_factory=list)
    drops: list = field(default_factory=list)


def loop_forward(q, k, v, window: int, block: int, scale: float, dropout_p: float, want_stats: bool, recompute=False):
    """Returns (out, state, stats) with stats = (entropy_sum, usage) per row of N, or None."""
    n, seq_len, _ = q.shape
    tiles = band_tiles(seq_len, window, block)
    qs = q * scale
    out = torch.empty_like(q)
    fill = torch.finfo(q.dtype).min  # finite, so that P * s is 0 (not nan) where P is 0
    keep_scale = 1.0 / (1.0 - dropout_p) if dropout_p > 0.0 else 1.0
    need_lse = recompute or want_stats
    state = LoopState(tiles, qs, k, v, out, scale, dropout_p, fill)
    lse_dtype = torch.promote_types(q.dtype, torch.float32)  # double inputs keep a double log-sum-exp
    lse = torch.empty(n, seq_len, dtype=lse_dtype, device=q.device) if need_lse else None
    entropy = torch.zeros(n, dtype=torch.float32, device=q.device) if want_stats else None
    usage = None
    for tile in tiles:
        rows, keys = slice(tile.q0, tile.q1), slice(tile.k0, tile.q1)
        scores = torch.bmm(qs[:, rows], k[:, keys].transpose(1, 2))
        mask_tile_(scores, tile, fill)
        probs = torch.softmax(scores, dim=-1)
        if need_lse:
            # the row maximum has probability >= 1/cols, so its log is well conditioned
            row_lse = scores.amax(-1).to(lse_dtype) - torch.log(probs.amax(-1).to(lse_dtype))
            lse[:, rows] = row_lse
        if dropout_p > 0.0:
            drop = torch.empty(probs.shape, dtype=torch.bool, device=q.device).bernoulli_(dropout_p)
            dropped = probs.masked_fill(drop, 0.0).mul_(keep_scale)
            state.drops.append(drop)
        else:
            dropped = probs
        torch.bmm(dropped, v[:, keys], out=out[:, rows])
        if want_stats:
            dot = (dropped * scores).sum(-1).float()
            if dropout_p > 0.0:
                mass = dropped.sum(-1).float()
                row = (row_lse + math.log(1.0 - dropout_p)) * mass - dot
            else:
                row = row_lse - dot
            entropy += row.sum(-1)
            if tile.q1 == seq_len:
                usage = dropped[:, -1, -1].float()
        del scores
        if not recompute:
            state.probs.append(probs)
    state.lse = lse if recompute else None
    return out, state, ((entropy, usage) if want_stats else None)


def loop_backward(state: LoopState, grad_out: torch.Tensor):
    """Returns (dq, dk, dv) for one bucket."""
    qs, k, v = state.qs, state.k, state.v
    p = state.dropout_p
    keep_scale = 1.0 / (1.0 - p) if p > 0.0 else 1.0
    grad_out = grad_out.contiguous()
    # sum_s P_ts dP_ts = dO_t . O_t (with dropout too, O being the dropped P times V)
    delta = (grad_out * state.out).sum(-1, keepdim=True)
    dq = torch.empty_like(qs)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for i, tile in enumerate(state.tiles):
        rows, keys = slice(tile.q0, tile.q1), slice(tile.k0, tile.q1)
        if state.lse is None:
            probs = state.probs[i]
        else:
            probs = torch.bmm(qs[:, rows], k[:, keys].transpose(1, 2))
            mask_tile_(probs, tile, state.fill)
            probs.sub_(state.lse[:, rows].unsqueeze(-1).to(probs.dtype)).exp_()
        g = grad_out[:, rows]
        if p > 0.0:
            drop = state.drops[i]
            dropped = probs.masked_fill(drop, 0.0).mul_(keep_scale)
        else:
            dropped = probs
        dv[:, keys] += torch.bmm(dropped.transpose(1, 2), g)
        dprobs = torch.bmm(g, v[:, keys].transpose(1, 2))
        if p > 0.0:
            dprobs.masked_fill_(drop, 0.0).mul_(keep_scale)
        dscores = dprobs.sub_(delta[:, rows]).mul_(probs)
        torch.bmm(dscores, k[:, keys], out=dq[:, rows])
        dk[:, keys] += torch.bmm(dscores.transpose(1, 2), qs[:, rows])
    dq.mul_(state.scale)
    return dq, dk, dv
