"""Head statistics (method section 11.2) from blocks of post-dropout probabilities."""

from __future__ import annotations

import math

import torch

from .result import HeadStats

ENTROPY_EPS = 1e-9


def entropy_normaliser(seq_len: int) -> float:
    return max(1.0, math.log(seq_len))


def row_entropy_sum(probs: torch.Tensor) -> torch.Tensor:
    """Sum over the last two dims of -P ln(P + eps): one value per leading index (float32)."""
    p = probs.float()
    return -(p * torch.log(p + ENTROPY_EPS)).sum(dim=(-2, -1))


def row_norm_sum(out: torch.Tensor) -> torch.Tensor:
    """Sum over rows of the L2 norm of each output row: (N, T, D) -> (N,)."""
    return torch.linalg.vector_norm(out.float(), dim=-1).sum(dim=-1)


class StatsAccumulator:
    """Accumulates per-(batch*bucket-head) sums, then reduces them to per-head means."""

    def __init__(self, n_heads: int, device):
        self.n_heads = n_heads
        self.entropy = torch.zeros(n_heads, dtype=torch.float32, device=device)
        self.norm = torch.zeros(n_heads, dtype=torch.float32, device=device)
        self.usage = torch.zeros(n_heads, dtype=torch.float32, device=device)

    def add(self, heads: list[int], batch: int, entropy_sum, norm_sum, usage_sum, seq_len: int) -> None:
        """Add sums over (t) for folded rows ordered (b, bucket head); divides by B*T."""
        n = len(heads)
        idx = torch.as_tensor(heads, device=self.entropy.device)
        denom = float(batch * seq_len)
        self.entropy.index_add_(
            0, idx, entropy_sum.float().view(batch, n).sum(0) / (denom * entropy_normaliser(seq_len))
        )
        self.norm.index_add_(0, idx, norm_sum.float().view(batch, n).sum(0) / denom)
        self.usage.index_add_(0, idx, usage_sum.float().view(batch, n).sum(0) / denom)

    def result(self) -> HeadStats:
        return HeadStats(entropy=self.entropy, norm=self.norm, usage=self.usage)
