"""The opt-in trainable controller (``controller_training``; not the reference, method §9, §15.1).

``soft_mixture`` weights the outputs of all K candidate windows by the controller's softmax;
``straight_through`` executes the chosen window and passes the softmax's gradient through. The
controller inputs are the level-0 rows cached by the last routing update (``RoutingState``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from instrumentation.routing.controller import RoutingNetworks, score_level
from instrumentation.routing.state import RoutingState


def mixture_weights(state: RoutingState, nets: RoutingNetworks, cfg, executed: torch.Tensor, device) -> torch.Tensor:
    """(H, K) differentiable window weights from the cached level-0 controller inputs."""
    scores = score_level(
        nets,
        state.score_inputs.to(device),
        state.score_parent,
        cfg.controller_pairwise_mode,
        allow_pairwise=state.score_pairwise,
        float32=cfg.controller_float32,
    )
    lab = torch.as_tensor(state.score_labels, dtype=torch.long, device=device)
    logits = scores.logits.index_select(0, lab)  # (H, K)
    if cfg.parent_constraint and state.score_parent_final is not None:
        cap = state.score_parent_final.to(device).index_select(0, lab)
        ar = torch.arange(logits.shape[1], device=device)
        # a head may not exceed its parent's choice; keep its executed index always allowed
        allowed = (ar[None, :] <= cap[:, None]) | (ar[None, :] == executed.to(device)[:, None])
        logits = logits.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(logits, dim=-1)
    if cfg.controller_training == "straight_through":
        hard = F.one_hot(executed.to(device), logits.shape[1]).to(p.dtype)
        return hard + p - p.detach()
    return p


def mixture_attention(backend, q, k, v, state: RoutingState, nets: RoutingNetworks, cfg, executed, scale=None):
    """Output (B, H, T, D) mixed over all windows, and the executed windows' (H, 3) statistics."""
    n_heads = q.shape[1]
    outs, stats = [], []
    for w in cfg.windows:
        res = backend(q, k, v, [w] * n_heads, dropout_p=cfg.dropout, training=True, need_stats=True, scale=scale)
        outs.append(res.out)
        stats.append(res.stats.matrix())
    weights = mixture_weights(state, nets, cfg, executed, q.device)  # (H, K)
    stacked = torch.stack(outs)  # (K, B, H, T, D)
    y = torch.einsum("hk,kbhtd->bhtd", weights.to(stacked.dtype), stacked)
    per_window = torch.stack(stats)  # (K, H, 3)
    chosen = per_window.permute(1, 0, 2)[torch.arange(n_heads, device=q.device), executed.to(q.device)]
    return y, chosen
