"""The reference learning-rate schedule: linear warm-up (0 at step 0), then cosine to 0."""

from __future__ import annotations

import math

import torch


def lr_multiplier(step: int, warmup: int, total: int) -> float:
    """Linear warm-up (0 at step 0) then cosine to 0 at ``total`` (the reference schedule)."""
    if warmup > 0 and step < warmup:
        return step / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def default_lr_warmup(steps: int) -> int:
    return min(100, max(1, steps // 20))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
