"""Sink tokens in a banded bucket: the first k positions, seen by every query besides its window (method §10.4).

A bucket's band kernel gives every row t its output O_b and log-sum-exp l_b over the band. A row t >= W
also sees the sink keys left of its band, j < min(k, t - W + 1), with scores s_j and log-sum-exp l_s.
The row's softmax over both has l = logaddexp(l_b, l_s) and output

    O = O_b exp(l_b - l) + sum_j exp(s_j - l) v_j.

The backward hands the band kernel this O and l: its probabilities exp(s - l) are then those of the whole
row and dO . O the whole row's delta (as split-key flash attention does), so its band gradients are
exact; the sink keys' part is added here. With attention dropout the sink probabilities get their own
Bernoulli mask (dropout is elementwise, so O_b's dropped probabilities scale by exp(l_b - l) alike).
The sink part is a dense (T - W) x n block with n = min(k, T - W) <= k: a few columns per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .windows import sink_visible


@dataclass
class SinkPart:
    """What the backward needs of one bucket's sink part: rows [first, T) against keys [0, n)."""

    first: int
    n: int
    probs: (
        torch.Tensor
    )  # (N, T - first, n) float32 (float64 for double inputs), probabilities of the whole row (before dropout)
    drop: torch.Tensor | None
    dropout_p: float
    scale: float


def sink_forward(q, k, v, window: int, sinks: int, scale: float, out_b, lse_b, dropout_p: float = 0.0):
    """Merge the sink keys into a bucket's band result.

    ``q, k, v``: (N, T, D); ``out_b`` (N, T, D) the band output (after dropout), ``lse_b`` (N, T) float32 the
    band's row log-sum-exp. Returns ``(out, lse, part)``: the whole rows' output and log-sum-exp and the
    ``SinkPart`` (None, and the inputs unchanged, when no row has a sink key left of its band).
    """
    _, seq_len, _ = q.shape
    n = sink_visible(seq_len, window, sinks)
    if n == 0:
        return out_b, lse_b, None
    first = min(window, seq_len)
    acc = _accumulator(q)
    scores = torch.matmul(q[:, first:].to(acc), k[:, :n].to(acc).transpose(1, 2)) * scale  # (N, R, n)
    row = torch.arange(seq_len - first, device=q.device).view(-1, 1)
    scores = scores.masked_fill(torch.arange(n, device=q.device).view(1, -1) > row, float("-inf"))
    lse = lse_b.to(acc, copy=True)
    band_lse = lse_b[:, first:]
    lse[:, first:] = torch.logaddexp(band_lse, torch.logsumexp(scores, dim=-1))
    whole = lse[:, first:]
    probs = torch.exp(scores - whole.unsqueeze(-1))
    drop = None
    dropped = probs
    if dropout_p > 0.0:
        drop = torch.empty(probs.shape, dtype=torch.bool, device=q.device).bernoulli_(dropout_p)
        dropped = probs.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - dropout_p))
    out = out_b.clone()
    band_weight = torch.exp(band_lse - whole).unsqueeze(-1)
    out[:, first:] = (out_b[:, first:].to(acc) * band_weight + torch.matmul(dropped, v[:, :n].to(acc))).to(out.dtype)
    return out, lse, SinkPart(first, n, probs, drop, dropout_p, scale)


def sink_backward(part: SinkPart, q, k, v, out, grad_out):
    """The sink keys' share of the gradients: (dq rows [first, T), dk keys [0, n), dv keys [0, n)).

    ``out`` is the whole rows' output (``sink_forward``'s), ``grad_out`` its gradient, both (N, T, D).
    """
    first, n = part.first, part.n
    acc = part.probs.dtype
    g = grad_out[:, first:].to(acc)
    delta = (g * out[:, first:].to(acc)).sum(-1, keepdim=True)
    probs = part.probs
    dprobs = torch.matmul(g, v[:, :n].to(acc).transpose(1, 2))
    dropped = probs
    if part.drop is not None:
        keep = 1.0 / (1.0 - part.dropout_p)
        dropped = probs.masked_fill(part.drop, 0.0).mul_(keep)
        dprobs = dprobs.masked_fill_(part.drop, 0.0).mul_(keep)
    dv = torch.matmul(dropped.transpose(1, 2), g)
    dscores = dprobs.sub_(delta).mul_(probs)
    dq = torch.matmul(dscores, k[:, :n].to(acc)) * part.scale
    dk = torch.matmul(dscores.transpose(1, 2), q[:, first:].to(acc)) * part.scale
    return dq, dk, dv


def sink_stats(q, k, out, lse, pk_band, lse_b, part: SinkPart | None, scale: float):
    """Per row of N: (entropy summed over the rows, output-norm sum, last-row usage), method §11.2.

    ``pk_band`` (N, T, D) is P_b K, the band's probabilities (before dropout) times the keys, so that the band's
    sum P s = exp(l_b - l) scale q . (P_b K); the sink part adds its own sum P s. The entropy is then
    l - sum P s per row (the statistics of the probabilities before dropout).
    """
    qf = q.float()
    band_dot = scale * (qf * pk_band.float()).sum(-1) * torch.exp(lse_b - lse)  # (N, T)
    if part is not None:
        rows = q[:, part.first :].float()
        sink_scores = torch.matmul(rows, k[:, : part.n].float().transpose(1, 2)) * scale
        band_dot[:, part.first :] += (part.probs * sink_scores.masked_fill(part.probs == 0, 0.0)).sum(-1)
    entropy = (lse - band_dot).sum(-1).float()
    norm = torch.linalg.vector_norm(out.float(), dim=-1).sum(-1)
    usage = torch.exp(scale * (qf[:, -1] * k[:, -1].float()).sum(-1) - lse[:, -1]).float()
    return entropy, norm, usage


def _accumulator(x: torch.Tensor) -> torch.dtype:
    """float32 for half and single precision inputs, float64 for double."""
    return torch.promote_types(x.dtype, torch.float32)


def sink_elements(seq_len: int, window: int, sinks: int) -> int:
    """Score elements the sink part computes for one head: the (T - W) x n block."""
    n = sink_visible(seq_len, window, sinks)
    return 0 if n == 0 else (seq_len - min(window, seq_len)) * n
