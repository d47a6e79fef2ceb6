"""Attention of new queries over cached keys, each query head within its window (cached generation).

A forward whose cache already holds tokens (the decode steps of ``generate``) does not route: every
head keeps the window the prompt's forward executed. The cached keys come as groups of key/value
heads, each holding the last ``L`` positions up to the newest query (all of them for a plain Hugging
Face cache, as many as the group's window can reach for ``WindowedKVCache``), after the first
``first`` positions of the sequence when the group keeps sink tokens (``sink_tokens``, method §10.4:
positions 0 .. k - 1 stay visible to every query). Query head ``h`` reads key/value head
``h // groups``, as the model's ``repeat_kv`` pairs them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

# a key/value group: (key/value head indices, keys (B, n, L, D), values (B, n, L, D), first): the first
# ``first`` columns are positions 0 .. first - 1 (kept sink tokens), the others the last L - first positions
KVGroup = tuple[list[int], torch.Tensor, torch.Tensor, int]


def key_positions(k_len: int, first: int, total: int, device) -> torch.Tensor:
    """The sequence position of each of ``k_len`` kept keys: ``first`` leading ones, then the newest."""
    c = torch.arange(k_len, device=device)
    return torch.where(c < first, c, c + (total - k_len))


@functools.lru_cache(maxsize=256)
def band(
    windows: tuple[int | None, ...], q_len: int, k_len: int, device, sinks: int = 0, first: int = 0, total: int = 0
) -> torch.Tensor | None:
    """(H, q_len, k_len) boolean: query t (of the last ``q_len`` of ``total`` positions) may see kept key l when
    0 <= distance < window (None: full causal attention) or, with ``sinks`` k, when l is one of the first k
    positions at or before t; None when every head sees every key a query may see causally (then only causality
    restricts, which ``q_len`` 1 cannot). Keys are the last ``k_len`` positions, after ``first`` leading ones."""
    total = max(int(total), k_len)
    pos = key_positions(k_len, first, total, device).view(1, -1)
    t = torch.arange(q_len, device=device).view(-1, 1) + (total - q_len)
    dist = t - pos  # query position - key position
    limit = torch.tensor([total + 1 if w is None else int(w) for w in windows], device=device).view(-1, 1, 1)
    inside = dist < limit
    if sinks:
        inside = inside | (pos < int(sinks))
    ok = (dist >= 0) & inside
    return None if q_len == 1 and bool(ok.all()) else ok


@functools.lru_cache(maxsize=256)
def _query_rows(kv_heads: tuple[int, ...], groups: int, device) -> tuple[list[int], torch.Tensor]:
    """The query heads reading ``kv_heads`` (head h reads key/value head h // groups), and as an index."""
    rows = [g * groups + j for g in kv_heads for j in range(groups)]
    return rows, torch.as_tensor(rows, device=device)


def windowed_attention(
    q: torch.Tensor,
    kv: Sequence[KVGroup],
    windows: Sequence[int | None],
    *,
    scale: float,
    allowed: torch.Tensor | None = None,
    sinks: int = 0,
    total: int = 0,
) -> torch.Tensor:
    """(B, H, Tq, D): queries ``q`` (B, H, Tq, D), the newest of ``total`` positions, over the cached groups.

    ``allowed`` (boolean (B or 1, 1 or H, Tq, K), True where the model's mask lets a query see a key,
    over the last K positions) restricts every head further; a query row left without keys (padding)
    attends to all of its group's keys, so that its output stays finite. ``sinks`` k: the first k
    positions stay visible to every query besides its window.
    """
    B, H, Tq, D = q.shape
    n_kv = sum(len(group[0]) for group in kv)
    groups = H // n_kv
    out = torch.empty_like(q)
    for heads, keys, values, first in kv:
        n, L = len(heads), keys.shape[2]
        rows, idx = _query_rows(tuple(heads), groups, q.device)
        qb = q.index_select(1, idx).view(B, n, groups, Tq, D)
        scores = torch.matmul(qb, keys.unsqueeze(2).transpose(-2, -1)) * scale  # (B, n, groups, Tq, L)
        ok = band(tuple(windows[h] for h in rows), Tq, L, q.device, int(sinks), int(first), int(total))
        if ok is not None:
            ok = ok.view(1, n, groups, Tq, L)
        if allowed is not None:
            width = allowed.shape[-1]
            m = (
                allowed[..., width - L :]
                if not first
                else torch.cat([allowed[..., :first], allowed[..., width - (L - first) :]], -1)
            )
            m = m.unsqueeze(2) if m.shape[1] == 1 else m.index_select(1, idx).view(m.shape[0], n, groups, Tq, L)
            ok = m if ok is None else ok & m
        if ok is not None:
            ok = ok | ~ok.any(dim=-1, keepdim=True)
            scores = scores.masked_fill(~ok, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(probs, values.unsqueeze(2))  # (B, n, groups, Tq, D)
        out.index_copy_(1, idx, y.reshape(B, n * groups, Tq, D))
    return out
