"""Attention of new queries over cached keys, each query head within its window (cached generation).

A forward whose cache already holds tokens (the decode steps of ``generate``) does not route: every
head keeps the window the prompt's forward executed. The cached keys come as groups of key/value
heads, each holding the last ``L`` positions up to the newest query (all of them for a plain Hugging
Face cache, as many as the group's window can reach for ``WindowedKVCache``). Query head ``h`` reads
key/value head ``h // groups``, as the model's ``repeat_kv`` pairs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# a key/value group: (key/value head indices, keys (B, n, L, D), values (B, n, L, D)), the last L positions
KVGroup = tuple[list[int], torch.Tensor, torch.Tensor]


def band(windows: Sequence[int | None], q_len: int, k_len: int, device) -> torch.Tensor:
    """(H, q_len, k_len) boolean: query t (of the last ``q_len`` positions) may see key l (of the last
    ``k_len``) when 0 <= distance < window; None is full causal attention."""
    t = torch.arange(q_len, device=device).view(-1, 1) + (k_len - q_len)
    dist = t - torch.arange(k_len, device=device).view(1, -1)  # query position - key position
    limit = torch.tensor([k_len + 1 if w is None else int(w) for w in windows], device=device).view(-1, 1, 1)
    return (dist >= 0) & (dist < limit)


def windowed_attention(
    q: torch.Tensor,
    kv: Sequence[KVGroup],
    windows: Sequence[int | None],
    *,
    scale: float,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, H, Tq, D): queries ``q`` (B, H, Tq, D), the newest positions, over the cached key/value groups.

    ``allowed`` (boolean (B or 1, 1 or H, Tq, K), True where the model's mask lets a query see a key, over
    the last K positions) restricts every head further; a query row left without keys (padding)
    attends to all of its group's keys, so that its output stays finite.
    """
    B, H, Tq, D = q.shape
    n_kv = sum(len(heads) for heads, _, _ in kv)
    groups = H // n_kv
    out = torch.empty_like(q)
    for heads, keys, values in kv:
        n, L = len(heads), keys.shape[2]
        rows = [g * groups + j for g in heads for j in range(groups)]
        idx = torch.as_tensor(rows, device=q.device)
        qb = q.index_select(1, idx).view(B, n, groups, Tq, D)
        scores = torch.matmul(qb, keys.unsqueeze(2).transpose(-2, -1)) * scale  # (B, n, groups, Tq, L)
        ok = band([windows[h] for h in rows], Tq, L, q.device).view(1, n, groups, Tq, L)
        if allowed is not None:
            m = allowed[..., -L:]
            m = m.unsqueeze(2) if m.shape[1] == 1 else m.index_select(1, idx).view(m.shape[0], n, groups, Tq, L)
            ok = ok & m
        ok = ok | ~ok.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~ok, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(probs, values.unsqueeze(2))  # (B, n, groups, Tq, D)
        out.index_copy_(1, idx, y.reshape(B, n * groups, Tq, D))
    return out
