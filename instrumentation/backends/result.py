"""What every attention backend returns: the output, optional head statistics, and its work."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class HeadStats:
    """Per-head statistics of method section 11.2, each a float32 tensor of shape (H,).

    Computed from the attention probabilities after dropout and detached from the graph
    (nothing in the routing path is differentiable, method section 9).
    """

    entropy: Tensor  # mean over (b, t) of -sum_s P ln(P + 1e-9), divided by max(1, ln T)
    norm: Tensor  # mean over (b, t) of the L2 norm of the head output (P V)_t
    usage: Tensor  # mean over (b, t) of P[b, t, T-1] (mass on the last key position)

    def matrix(self) -> Tensor:
        """(H, 3) [entropy, norm, usage], the block the next forward's head features read (§4.1)."""
        return torch.stack([self.entropy.detach().float(), self.norm.detach().float(), self.usage.detach().float()], 1)

    @staticmethod
    def zeros(n_heads: int, device) -> HeadStats:
        z = torch.zeros(n_heads, dtype=torch.float32, device=device)
        return HeadStats(z.clone(), z.clone(), z.clone())


@dataclass
class AttentionResult:
    """Output of one backend call."""

    out: Tensor  # (B, H, T, D)
    stats: HeadStats | None
    realised_work: float  # score elements computed / score elements of full causal attention
    backend: str  # the backend that actually ran
    probs: Tensor | None = None  # (B, H, T, T) probabilities before dropout, when asked for (dense_masked)
