"""Window selection (method §8.1, §8.3-§8.5): top-down argmax with the parent constraint, the
resolution EMA, the post-warm-up ramp and the lab's window-ablation overrides.

Indices are positions in the ascending candidate list. Every argmax breaks ties to the first
index explicitly (§15.24), so results never depend on the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_PRIME_LAYER = 1_000_003
_PRIME_STEP = 97_409
_MODULUS = 2**31 - 1


def first_argmax(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim, lowest index on ties."""
    k = logits.shape[-1]
    best = logits.max(dim=-1, keepdim=True).values
    ar = torch.arange(k, device=logits.device).expand_as(logits)
    return torch.where(logits == best, ar, torch.full_like(ar, k)).min(dim=-1).values


def oracle_alternating(n: int, n_windows: int, device=None) -> torch.Tensor:
    """Diagnostic override of §8.1: groups alternate index 1, 2, 1, 2, ... clipped to K - 1."""
    vals = torch.tensor([1 + (i % 2) for i in range(n)], dtype=torch.long, device=device)
    return vals.clamp(max=max(0, n_windows - 1))


def select_top_down(
    level_logits: Sequence[torch.Tensor],
    parent_maps: Sequence[Sequence[int]],
    parent_constraint: bool = True,
    choice_mode: str = "learned",
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor | None]]:
    """Top-down selection (§8.1).

    Returns per level the raw argmax, the final index (min(raw, parent's final) under the
    constraint) and the parent's final index (None at the top).
    """
    n_levels = len(level_logits)
    raw: list[torch.Tensor] = [None] * n_levels  # type: ignore[list-item]
    final: list[torch.Tensor] = [None] * n_levels  # type: ignore[list-item]
    parent_final: list[torch.Tensor | None] = [None] * n_levels
    for lvl in range(n_levels - 1, -1, -1):
        logits = level_logits[lvl]
        r = first_argmax(logits)
        if choice_mode == "oracle_alternating":
            r = oracle_alternating(r.shape[0], logits.shape[-1], r.device)
        raw[lvl] = r
        if lvl == n_levels - 1:
            final[lvl] = r
            continue
        idx = torch.as_tensor(list(parent_maps[lvl]), dtype=torch.long, device=r.device)
        p = final[lvl + 1].index_select(0, idx)
        parent_final[lvl] = p
        final[lvl] = torch.minimum(r, p) if parent_constraint else r
    return raw, final, parent_final


def heads_from_groups(group_idx: torch.Tensor, labels: Sequence[int]) -> torch.Tensor:
    """Per-head index from the level-0 group indices and the head -> group labels (§8.1 step 3)."""
    lab = torch.as_tensor(list(labels), dtype=torch.long, device=group_idx.device)
    return group_idx.index_select(0, lab)


def full_window_index(windows: Sequence[int], seq_len: int) -> int:
    """Index of T among the candidates, else 0 (the smallest window; §8.2 W2, §15.13)."""
    return list(windows).index(seq_len) if seq_len in windows else 0


def resolution_ema(
    state: torch.Tensor | None, current: torch.Tensor, alpha: float, n_windows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Resolution EMA of §8.3: returns (new state r, executed index).

    r := alpha * r + (1 - alpha) * current (alpha weights the *old* value; first use copies);
    executed = round(r) (half to even) clipped to [0, K - 1].
    """
    cur = current.to(torch.float32)
    if state is None or state.shape != cur.shape:
        r = cur.clone()
    else:
        r = float(alpha) * state.to(cur.device, torch.float32) + (1.0 - float(alpha)) * cur
    executed = torch.round(r).clamp(0, n_windows - 1).to(torch.long)
    return r, executed


def ramp(index: torch.Tensor, full_index: int, step: int, warmup_steps: int, ramp_steps: int) -> torch.Tensor:
    """Post-warm-up ramp of §8.4: blend from the full window's index to the chosen one."""
    progress = min(1.0, max(0.0, (step - warmup_steps + 1) / float(ramp_steps)))
    if progress >= 1.0:
        return index
    blended = progress * index.to(torch.float32) + (1.0 - progress) * float(full_index)
    return torch.round(blended).to(torch.long)


def ablation_generator(seed: int, layer_index: int, step: int | None) -> torch.Generator:
    """The fresh CPU generator of §8.5: (seed + 1000003 * layer + 97409 * step) mod (2^31 - 1)."""
    s = (int(seed) + _PRIME_LAYER * int(layer_index) + _PRIME_STEP * int(step or 0)) % _MODULUS
    return torch.Generator(device="cpu").manual_seed(s)


def window_ablation(
    index: torch.Tensor,
    mode: str,
    *,
    windows: Sequence[int],
    fixed_window: int,
    seed: int,
    layer_index: int,
    step: int | None,
) -> torch.Tensor:
    """Lab-branch overrides of §8.5, applied after the EMA/ramp on every forward (CPU index tensor)."""
    if mode == "adaptive":
        return index
    if mode == "fixed_window":
        return torch.full_like(index, list(windows).index(int(fixed_window)))
    gen = ablation_generator(seed, layer_index, step)
    if mode == "shuffle_post_select":
        perm = torch.randperm(index.shape[0], generator=gen)
        return index.index_select(0, perm.to(index.device))
    if mode == "random_uniform":
        return torch.randint(0, len(windows), (index.shape[0],), generator=gen).to(index.device)
    raise ValueError(f"unknown window_ablation_mode {mode!r}")
