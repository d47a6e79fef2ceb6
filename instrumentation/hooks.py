"""Event plumbing of the attention layers: subscriptions and the routing event of one forward.

An event is built only when a layer has subscribers, so a model without them pays nothing. Its
index tensors are moved to the model's device once per distinct decision and reused, so the
hot path never forces a host-device copy per forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from instrumentation.events import RoutingEvent, Subscriber
from instrumentation.routing.step import RouteDecision


class SubscriptionHandle:
    """Returned by ``subscribe``; ``remove()`` detaches (idempotent). Also a context manager."""

    def __init__(self, removers: list[Callable[[], None]]):
        self._removers = removers

    def remove(self) -> None:
        while self._removers:
            self._removers.pop()()

    def __enter__(self) -> SubscriptionHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class Hookable:
    """Subscriber list shared by the attention modules."""

    def _init_hooks(self) -> None:
        self._subscribers: dict[int, Subscriber] = {}
        self._next_handle = 0
        self._event_idx_cache: tuple | None = None

    def subscribe(self, fn: Subscriber) -> SubscriptionHandle:
        """Call ``fn(RoutingEvent)`` after every forward of this layer until the handle is removed."""
        key = self._next_handle
        self._next_handle += 1
        self._subscribers[key] = fn

        def remove() -> None:
            self._subscribers.pop(key, None)

        return SubscriptionHandle([remove])

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    def _emit(self, event: RoutingEvent) -> None:
        for fn in list(self._subscribers.values()):
            fn(event)

    def _device_idx(
        self, executed: torch.Tensor, windows: tuple[int, ...], device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Executed indices and windows on ``device``, cached while the decision stays the same."""
        key = (tuple(executed.tolist()), str(device))
        cached = self._event_idx_cache
        if cached is None or cached[0] != key:
            idx = executed.to(device, non_blocking=True)
            wins = torch.as_tensor(windows, dtype=torch.long).to(device, non_blocking=True).index_select(0, idx)
            cached = (key, idx, wins)
            self._event_idx_cache = cached
        return cached[1], cached[2]


def group_ratios(members: list[list[int]], executed: torch.Tensor, cfg, seq_len: int) -> list[float]:
    """Mean accounting window / T per level-0 group (method §11.4).

    The reference indexes the per-head window vector by each head's *window index* instead of its
    head index (§15.6); that is reproduced unless ``cfg.fix_group_ratios`` is set.
    """
    idx = executed.tolist()
    w = [min(seq_len, max(cfg.w_min, cfg.windows[i])) for i in idx]
    out = []
    for heads in members:
        vals = [w[h] for h in heads] if cfg.fix_group_ratios else [w[idx[h]] for h in heads if idx[h] < len(w)]
        out.append(sum(vals) / (len(vals) * seq_len) if vals else 0.0)
    return out


def routing_event(
    layer: Hookable,
    decision: RouteDecision,
    *,
    step: int | None,
    training: bool,
    device,
    backend: str,
    work: float | None,
    fallback_reason: str | None,
) -> RoutingEvent:
    """The typed event of one AAH forward, from the decision and what execution reported."""
    cfg = layer.cfg
    T_ = layer.last_seq_len
    executed = decision.executed
    idx_d, win_d = layer._device_idx(executed, tuple(cfg.windows), device)
    ratios = None
    if decision.tree is not None and decision.applied:
        ratios = group_ratios(decision.tree[0].members, executed, cfg, T_)
    return RoutingEvent(
        layer=layer.layer_index,
        step=step,
        path_mode=decision.path_mode,
        updated=decision.updated,
        applied=decision.applied,
        in_warmup=decision.in_warmup,
        training=training,
        window_idx=idx_d,
        windows=win_d,
        seq_len=T_,
        candidate_windows=tuple(cfg.windows),
        raw_head_idx=decision.raw_head_idx,
        tree=decision.tree,
        head_features=decision.head_features,
        group_change_rate=decision.group_change_rate,
        resolution_delta=decision.resolution_delta,
        backend=backend,
        realised_work=work,
        pre_execution_idx=decision.idx,
        group_counts=decision.group_counts,
        froze_topology=decision.froze_topology,
        shadow_idx=decision.shadow_idx,
        group_ratios=ratios,
        fallback_reason=fallback_reason,
    )
