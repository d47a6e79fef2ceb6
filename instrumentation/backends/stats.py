"""Head statistics (method section 11.2) from blocks of post-dropout probabilities."""

from __future__ import annotations

import math

import torch

ENTROPY_EPS = 1e-9


def entropy_normaliser(seq_len: int) -> float:
    return max(1.0, math.log(seq_len))


def bucket_head_stats(probs: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy, output norm and last-key usage of each head of one bucket, in the reference's order.

    ``probs`` is (B, n, T, T) after dropout, ``out`` (B, n, T, D). Each statistic is reduced per
    query row first (the entropy over keys, the norm over the head dimension), then averaged over
    batch and queries together, then the entropy is divided by max(1, ln T): the reference's
    summation order, so that the features the routing reads are bit-identical to its own.
    """
    p = probs.float()
    seq_len = p.shape[-1]
    entropy = -(p * torch.log(p + ENTROPY_EPS)).sum(dim=-1).mean(dim=(0, 2)) / entropy_normaliser(seq_len)
    norm = torch.linalg.vector_norm(out.float(), dim=-1).mean(dim=(0, 2))
    usage = p[..., seq_len - 1].mean(dim=(0, 2))
    return entropy, norm, usage
