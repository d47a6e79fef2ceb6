"""Head features (method §4): per-head 9-D vectors, pooled group features, the feature EMA.

All features are float32 and detached. Per-head moments are computed in one vectorised pass over
(B, H, T, D); the previous forward's entropy / norm / usage (§11.2) fill the last three columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FEATURE_DIM = 9


def _prev_columns(prev_stats: torch.Tensor | None, n_rows_heads: int, device) -> torch.Tensor:
    """(H, 3) previous-forward [entropy, norm, usage], zeros when there is none (§4.1)."""
    if prev_stats is None:
        return torch.zeros((n_rows_heads, 3), dtype=torch.float32, device=device)
    return prev_stats.detach().to(device=device, dtype=torch.float32)


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
            x = x.detach().float()  # reduce over (B, T, D) in place: no per-head copy, no Python loop
            cols.append(x.abs().mean(dim=(0, 2, 3)))
            cols.append(x.std(dim=(0, 2, 3), correction=1))
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


def ema_update(ema: torch.Tensor | None, current: torch.Tensor, alpha: float) -> torch.Tensor:
    """Feature EMA of §4.3: alpha weights the old value; first use (or a shape change) copies."""
    current = current.detach().float()
    if ema is None or ema.shape != current.shape:
        return current.clone()
    a = min(1.0, max(0.0, float(alpha)))
    return a * ema.to(current.device) + (1.0 - a) * current
