"""Attention modules: the plain causal baseline and ``AAHAttention``, the per-layer AAH-v3 state
machine of method §8.2 (paths F, C1-C5, W1-W2, then resolution EMA, ramp, window override).

``AAHAttention`` composes the pure routing functions of ``instrumentation.routing`` and owns the
routing state (``RoutingState``). The state lives on the host (small CPU tensors and lists) except
the previous forward's head statistics, which stay on the model's device until the next routing
update reads them, so cached forwards never synchronise with an accelerator.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from instrumentation.backends.dense_masked import dense_masked_attention
from instrumentation.backends.masks import MASK_CACHE
from instrumentation.config import AAHConfig
from instrumentation.events import ClusterFacts, RoutingEvent, Subscriber, TreeLevel
from instrumentation.routing.clustering import labels_from_groups
from instrumentation.routing.controller import level_inputs, make_networks, score_level, single_level_inputs
from instrumentation.routing.features import ema_update, head_features, pooled_group_features, stats_matrix
from instrumentation.routing.hierarchy import (
    Hierarchy,
    build_hierarchy,
    fixed_deterministic_partition,
    fixed_random_partition,
    grow_upper_levels,
    hierarchy_from_topology,
    passthrough_hierarchy,
)
from instrumentation.routing.selection import (
    first_argmax,
    full_window_index,
    heads_from_groups,
    oracle_alternating,
    ramp,
    resolution_ema,
    select_top_down,
    window_ablation,
)


# ----------------------------------------------------------------------------- hooks
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


class _Hookable:
    """Subscriber list shared by both attention modules."""

    def _init_hooks(self) -> None:
        self._subscribers: dict[int, Subscriber] = {}
        self._next_handle = 0

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


def _full_causal(
    q, k, v, *, dropout_p: float, training: bool, window: int | None, need_probs: bool, scale: float | None = None
):
    """Plain causal (optionally banded) attention for the baseline modules."""
    B, H, T, D = q.shape
    if need_probs:
        res = dense_masked_attention(
            q, k, v, [window or T] * H, dropout_p=dropout_p, training=training, scale=scale, need_probs=True
        )
        return res.out, res.probs
    p = dropout_p if training else 0.0
    if window is None or window >= T:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=scale), None
    allowed = MASK_CACHE.get(T, window, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p, scale=scale), None


# ----------------------------------------------------------------------------- plain attention
class CausalSelfAttention(nn.Module, _Hookable):
    """The pure-baseline attention (method §2.3, §2.7): no AAH state.

    ``window`` None is full causal attention; an int is a fixed causal band (the sliding-window and
    local/global baselines). With subscribers it emits a minimal event (no tree, nothing updated).
    ``project=False`` leaves out the projections: ``attend(q, k, v)`` is then the whole layer
    (used to put this attention inside another model, ``instrumentation.retrofit``).
    """

    def __init__(self, cfg: AAHConfig, layer_index: int, window: int | None = None, project: bool = True):
        super().__init__()
        self.cfg = cfg
        self.layer_index = layer_index
        self.n_head = cfg.n_head
        self.window = window
        if project:
            self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
            self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
            self.resid_dropout = nn.Dropout(cfg.dropout)
        self.step: int | None = None
        self.last_seq_len: int | None = None
        self._init_hooks()

    def set_step(self, step: int | None) -> None:
        self.step = step

    def set_control(self, flag: bool) -> None:  # nothing to control
        pass

    def executed_windows(self, seq_len: int | None = None) -> list[int]:
        T = seq_len or self.last_seq_len or self.cfg.block_size
        return [T if self.window is None else self.window] * self.n_head

    def forward(self, x: torch.Tensor, need_probs: bool = False):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y, probs = self.attend(q, k, v, need_probs=need_probs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), probs

    def attend(self, q, k, v, *, need_probs: bool = False, scale: float | None = None):
        """Attention of per-head ``q, k, v`` (B, H, T, D): ``(y (B, H, T, D), probs or None)``."""
        T = q.shape[2]
        y, probs = _full_causal(
            q,
            k,
            v,
            dropout_p=self.cfg.dropout,
            training=self.training,
            window=self.window,
            need_probs=need_probs,
            scale=scale,
        )
        self.last_seq_len = T
        if self._subscribers:
            wins = self.executed_windows(T)
            cand = tuple(self.cfg.windows) if self.cfg.enabled else (wins[0],)
            idx = torch.zeros(self.n_head, dtype=torch.long, device=q.device)
            self._emit(
                RoutingEvent(
                    layer=self.layer_index,
                    step=self.step,
                    path_mode="full_attention_fastpath" if self.window is None else "static_window",
                    updated=False,
                    applied=True,
                    in_warmup=False,
                    training=self.training,
                    window_idx=idx,
                    windows=torch.full((self.n_head,), wins[0], dtype=torch.long, device=q.device),
                    seq_len=T,
                    candidate_windows=cand,
                    backend="sdpa",
                )
            )
        return y, probs


# ----------------------------------------------------------------------------- routing state
@dataclass
class RoutingState:
    """Everything AAH-v3 remembers between forwards of one layer (method §8.2)."""

    prev_stats: torch.Tensor | None = None  # (H, 3) [entropy, norm, usage] of the previous forward (device)
    ema: torch.Tensor | None = None  # (H, 9) smoothed head features
    cached_idx: torch.Tensor | None = None  # (H,) per-head indices of the last control update (pre-EMA)
    cached_labels: list[int] | None = None  # level-0 group id per head
    cached_group_counts: list[int] | None = None
    last_control_step: int | None = None
    topology: list[list[list[int]]] | None = None  # freeze_learned_topology
    fixed_groups: list[list[int]] | None = None  # fixed_random / fixed_deterministic
    pooled_cache: torch.Tensor | None = None  # warm-up path: pooled group features ...
    pooled_cache_step: int | None = None  # ... and the step they were computed at
    res_ema: torch.Tensor | None = None  # (H,) float resolution EMA
    executed_idx: torch.Tensor | None = None  # (H,) indices executed by the last forward
    control_enabled: bool = True
    # Level-0 scoring inputs of the last update, for the opt-in trainable controller.
    score_inputs: torch.Tensor | None = None  # (n0, in_dim)
    score_parent: list[int] | None = None  # level-0 -> level-1 map (None when level 0 is the top)
    score_parent_final: torch.Tensor | None = None  # (n0,) parent's final index (None at the top)
    score_labels: list[int] | None = None  # head -> level-0 row
    score_pairwise: bool = True

    def clear_control_caches(self) -> None:
        """What ``set_control(False)`` clears (method §8.6); EMA, stats, topology and fixed groups stay."""
        self.cached_idx = None
        self.cached_labels = None
        self.cached_group_counts = None
        self.last_control_step = None
        self.pooled_cache = None
        self.pooled_cache_step = None
        self.res_ema = None

    _TENSORS = (
        "prev_stats",
        "ema",
        "cached_idx",
        "pooled_cache",
        "res_ema",
        "executed_idx",
        "score_inputs",
        "score_parent_final",
    )

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self.__dataclass_fields__:
            v = getattr(self, f)
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu().clone()
            elif isinstance(v, list):
                v = copy.deepcopy(v)
            out[f] = v
        return out

    @classmethod
    def from_plain(cls, d: dict[str, Any], device=None) -> RoutingState:
        st = cls()
        for f in st.__dataclass_fields__:
            if f not in d:
                continue
            v = d[f]
            if isinstance(v, torch.Tensor):
                v = v.clone()
                if f == "prev_stats" and device is not None:
                    v = v.to(device)
            setattr(st, f, v)
        return st


@dataclass
class _Route:
    """What one pass of the state machine decided (for execution and the event)."""

    idx: torch.Tensor  # (H,) per-head index before post-processing
    path_mode: str
    updated: bool
    applied: bool
    in_warmup: bool
    tree: list[TreeLevel] | None = None
    raw_head_idx: torch.Tensor | None = None
    head_features: torch.Tensor | None = None
    group_change_rate: float | None = None
    resolution_delta: float | None = None
    extra: dict = field(default_factory=dict)


def groups_from_labels(labels: list[int]) -> list[list[int]]:
    n_groups = max(labels) + 1 if labels else 0
    groups: list[list[int]] = [[] for _ in range(n_groups)]
    for h, g in enumerate(labels):
        groups[g].append(h)
    return [g for g in groups if g]


def _facts(level, fallback_origin: str) -> ClusterFacts:
    res = level.facts
    if res is None:
        return ClusterFacts(origin=fallback_origin)
    return ClusterFacts(
        origin=res.origin,
        forced_split=res.forced_bipartition,
        merged=res.merged_count,
        groups_before_merge=res.groups_before_merge,
        anchor_similarity=res.anchor_similarity,
        sim_mean=res.sim_mean,
        sim_std=res.sim_std,
        sim_min=res.sim_min,
        sim_max=res.sim_max,
    )


# ----------------------------------------------------------------------------- AAH attention
class AAHAttention(nn.Module, _Hookable):
    """One AAH-v3 attention layer: Q/K/V, routing (method §4-§8), banded execution (§10), stats (§11.2).

    ``project=False`` leaves out the Q/K/V and output projections: ``attend(q, k, v)`` then routes
    and executes per-head tensors another model computed (``instrumentation.retrofit``).
    """

    def __init__(self, cfg: AAHConfig, layer_index: int, project: bool = True):
        super().__init__()
        self.cfg = cfg
        self.layer_index = layer_index
        self.n_head = cfg.n_head
        self.windows = tuple(cfg.windows)
        if project:
            self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
            self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
            self.resid_dropout = nn.Dropout(cfg.dropout)
        nets = make_networks(
            input_mode=cfg.controller_input_mode,
            n_windows=len(self.windows),
            control_dim=cfg.control_dim,
            arch=cfg.controller_arch,
            logit_scale=cfg.controller_logit_scale,
            pairwise_mode=cfg.controller_pairwise_mode,
            joint_hidden_dim=cfg.joint_hidden_dim,
            joint_output_scale=cfg.joint_output_scale,
            pairwise_bias_scale=cfg.pairwise_bias_scale,
            rng_reference_dim=cfg.controller_rng_reference_dim,
        )
        self.controller = nets.controller
        self.joint_scorer = nets.joint
        self.sibling_bias = nets.sibling_bias
        self._nets = nets
        for i, p in enumerate(self.routing_parameters()):  # weight drift is measured against these
            self.register_buffer(f"_routing_init_{i}", p.detach().clone(), persistent=False)
        self.step: int | None = None
        self.state = RoutingState(control_enabled=cfg.apply_window_control)
        self.eval_mutates_routing = cfg.eval_mutates_routing
        self.last_seq_len: int | None = None
        self.last_route: _Route | None = None
        self.timings: dict[str, float] = {}
        self._backends: dict[tuple, tuple] = {}
        self._event_idx_cache: tuple | None = None
        self._froze_now = False
        # Optional reduction of routing inputs across data-parallel ranks (see set_feature_reducer).
        self.feature_reducer: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._init_hooks()

    # ------------------------------------------------------------- public controls
    def routing_parameters(self) -> list[nn.Parameter]:
        """Controller, joint scorer and sibling-bias parameters, in a fixed order."""
        mods = [m for m in (self.controller, self.joint_scorer, self.sibling_bias) if m is not None]
        return [p for m in mods for p in m.parameters()]

    def _device(self) -> torch.device:
        return next(self.controller.parameters()).device

    def routing_initial_parameters(self) -> list[torch.Tensor]:
        return [getattr(self, f"_routing_init_{i}") for i in range(len(self.routing_parameters()))]

    def set_step(self, step: int | None) -> None:
        self.step = None if step is None else int(step)

    def set_control(self, flag: bool) -> None:
        """Method §8.6: False clears the control caches; True only sets the flag."""
        if not flag:
            self.state.clear_control_caches()
        self.state.control_enabled = bool(flag)

    def reset_routing_state(self) -> None:
        self.state = RoutingState(control_enabled=self.cfg.apply_window_control)

    def executed_windows(self, seq_len: int | None = None) -> list[int]:
        """Windows (tokens) executed by the last forward; the warm-up choice before any forward."""
        T = seq_len or self.last_seq_len or self.cfg.block_size
        if not (self.cfg.apply_window_control or self.cfg.build_hierarchy):
            return [T] * self.n_head  # the fast path always runs full causal attention
        if self.state.executed_idx is not None:
            return [self.windows[i] for i in self.state.executed_idx.tolist()]
        return [self.windows[full_window_index(self.windows, T)]] * self.n_head

    # ------------------------------------------------------------- checkpointed state
    def get_extra_state(self) -> dict:
        if not self.cfg.persist_routing_state:
            return {}
        return {"routing_state": self.state.to_plain(), "step": self.step}

    def set_extra_state(self, state: dict) -> None:
        if not self.cfg.persist_routing_state or not state:
            return
        self.state = RoutingState.from_plain(state.get("routing_state", {}), device=self._device())
        self.step = state.get("step", self.step)

    # ------------------------------------------------------------- forward
    def _mutates(self) -> bool:
        return self.training or self.eval_mutates_routing

    def _backend(self, device, training: bool):
        key = (device.type, training)
        if key not in self._backends:
            from instrumentation.backends import get_backend

            self._backends[key] = get_backend(
                self.cfg.attention_backend, device=device, training=training, dropout_p=self.cfg.dropout
            )
        return self._backends[key]

    def forward(self, x: torch.Tensor, need_probs: bool = False):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y, probs = self.attend(q, k, v, need_probs=need_probs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), probs

    def attend(self, q, k, v, *, need_probs: bool = False, scale: float | None = None):
        """Route and execute per-head ``q, k, v`` (B, H, T, D): ``(y (B, H, T, D), probs or None)``.

        ``scale`` multiplies the scores (default ``D^-1/2``).
        """
        T = q.shape[2]
        H = self.n_head
        self.last_seq_len = T
        cfg = self.cfg
        t0 = time.perf_counter()

        if not (cfg.apply_window_control or cfg.build_hierarchy):  # F: full-attention fast path
            y, probs = _full_causal(
                q, k, v, dropout_p=cfg.dropout, training=self.training, window=None, need_probs=need_probs, scale=scale
            )
            full = full_window_index(self.windows, T)
            executed = torch.full((H,), full, dtype=torch.long)
            route = _Route(
                executed,
                "full_attention_fastpath",
                False,
                False,
                self.step is not None and self.step < cfg.warmup_steps,
            )
            if self._mutates():
                self.state.executed_idx = executed
            return self._finish(y, probs, route, executed, T, backend="sdpa", work=None)

        mutate = self._mutates()
        if not mutate and self.state.executed_idx is not None:
            # Evaluation forward that leaves routing untouched: execute the current windows.
            executed = self.state.executed_idx
            applied = self.last_route.applied if self.last_route is not None else True
            route = _Route(
                executed, "frozen_eval", False, applied, self.step is not None and self.step < cfg.warmup_steps
            )
        else:
            saved = None
            if not mutate:  # nothing decided yet: decide on a scratch copy, then forget it
                saved = self.state
                self.state = copy.deepcopy(saved)
            with torch.no_grad():
                route = self._route(q, k, v, T)
                executed = self._post_process(route.idx, route.in_warmup)
            if saved is not None:
                self.state = saved
            else:
                self.state.executed_idx = executed
        self.timings["control_ms"] = (time.perf_counter() - t0) * 1e3
        y, probs, stats, backend, work = self._execute(
            q, k, v, executed, route, need_probs, need_stats=mutate, scale=scale
        )
        if mutate and stats is not None:
            self.state.prev_stats = stats
        return self._finish(y, probs, route, executed, T, backend=backend, work=work)

    def _finish(self, y, probs, route: _Route, executed: torch.Tensor, T: int, *, backend: str, work):
        self.last_route = route
        if self._subscribers:
            self._emit(self._event(route, executed, T, y.device, backend, work))
        return y, probs

    # ------------------------------------------------------------- execution (§10)
    def _execute(self, q, k, v, executed: torch.Tensor, route: _Route, need_probs: bool, need_stats: bool, scale=None):
        cfg = self.cfg
        wins = [self.windows[i] for i in executed.tolist()]
        trainable = (
            self.training
            and cfg.controller_training != "none"
            and route.applied
            and not route.in_warmup
            and self.state.score_inputs is not None
        )
        if trainable:
            y, stats = self._mixture(q, k, v, executed, scale)
            probs = None
            if need_probs:
                probs = dense_masked_attention(q, k, v, wins, scale=scale, need_probs=True).probs
            return y, probs, stats, f"{cfg.attention_backend}+{cfg.controller_training}", None
        if need_probs:
            res = dense_masked_attention(
                q,
                k,
                v,
                wins,
                dropout_p=cfg.dropout,
                training=self.training,
                need_stats=need_stats,
                scale=scale,
                need_probs=True,
            )
            stats = None if res.stats is None else stats_matrix(res.stats.entropy, res.stats.norm, res.stats.usage)
            return res.out, res.probs, stats, res.backend, res.realised_work
        fn, name, reason = self._backend(q.device, self.training)
        if reason is not None:
            route.extra["fallback_reason"] = reason
        res = fn(q, k, v, wins, dropout_p=cfg.dropout, training=self.training, need_stats=need_stats, scale=scale)
        stats = None
        if res.stats is not None:
            stats = stats_matrix(res.stats.entropy, res.stats.norm, res.stats.usage)
        return res.out, None, stats, res.backend, res.realised_work

    def _mixture_weights(self, executed: torch.Tensor, device) -> torch.Tensor:
        """(H, K) differentiable window weights from the cached level-0 controller inputs."""
        st = self.state
        scores = score_level(
            self._nets,
            st.score_inputs.to(device),
            st.score_parent,
            self.cfg.controller_pairwise_mode,
            allow_pairwise=st.score_pairwise,
            float32=self.cfg.controller_float32,
        )
        lab = torch.as_tensor(st.score_labels, dtype=torch.long, device=device)
        logits = scores.logits.index_select(0, lab)  # (H, K)
        if self.cfg.parent_constraint and st.score_parent_final is not None:
            cap = st.score_parent_final.to(device).index_select(0, lab)
            ar = torch.arange(logits.shape[1], device=device)
            # a head may not exceed its parent's choice; keep its executed index always allowed
            allowed = (ar[None, :] <= cap[:, None]) | (ar[None, :] == executed.to(device)[:, None])
            logits = logits.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(logits, dim=-1)
        if self.cfg.controller_training == "straight_through":
            hard = F.one_hot(executed.to(device), logits.shape[1]).to(p.dtype)
            return hard + p - p.detach()
        return p

    def _mixture(self, q, k, v, executed: torch.Tensor, scale=None):
        """Soft mixture / straight-through over all K windows (opt-in trainable controller)."""
        H = self.n_head
        fn, _, _ = self._backend(q.device, True)
        outs, stats = [], []
        for w in self.windows:
            res = fn(q, k, v, [w] * H, dropout_p=self.cfg.dropout, training=True, need_stats=True, scale=scale)
            outs.append(res.out)
            stats.append(stats_matrix(res.stats.entropy, res.stats.norm, res.stats.usage))
        weights = self._mixture_weights(executed, q.device)  # (H, K)
        stacked = torch.stack(outs)  # (K, B, H, T, D)
        y = torch.einsum("hk,kbhtd->bhtd", weights.to(stacked.dtype), stacked)
        st = torch.stack(stats)  # (K, H, 3)
        ex = executed.to(q.device)
        chosen = st.permute(1, 0, 2)[torch.arange(H, device=q.device), ex]  # (H, 3)
        return y, chosen

    # ------------------------------------------------------------- post-processing (§8.2 end)
    def _post_process(self, idx: torch.Tensor, in_warmup: bool) -> torch.Tensor:
        cfg, st = self.cfg, self.state
        out = idx.clone()
        if st.control_enabled and not in_warmup and cfg.resolution_ema_alpha > 0:
            st.res_ema, out = resolution_ema(st.res_ema, out, cfg.resolution_ema_alpha, len(self.windows))
        if st.control_enabled and not in_warmup and cfg.post_warmup_ramp_steps > 0 and self.step is not None:
            full = full_window_index(self.windows, self.last_seq_len or cfg.block_size)
            out = ramp(out, full, self.step, cfg.warmup_steps, cfg.post_warmup_ramp_steps)
        return window_ablation(
            out,
            cfg.window_ablation_mode,
            windows=self.windows,
            fixed_window=cfg.fixed_window,
            seed=cfg.window_ablation_seed,
            layer_index=self.layer_index,
            step=self.step,
        )

    # ------------------------------------------------------------- the state machine (§8.2)
    def _upper_kwargs(self) -> dict:
        c = self.cfg
        return dict(
            super_threshold=c.super_threshold,
            max_depth=c.max_depth,
            upper_metric=c.upper_cluster_metric,
            normdiff_scale=c.cosine_normdiff_scale,
            min_group_size=c.min_group_size,
            group_feature_mode=c.group_feature_mode,
            upper_l2_threshold=c.upper_l2_threshold,
        )

    def _adaptive_build(self, q, k, v) -> tuple[Hierarchy, torch.Tensor, float]:
        """Per-head features -> EMA -> full hierarchy with churn against the cached labels (§5.8).

        The group change rate is 0.0 on the first clustering (no previous labels), as in the
        reference; a re-clustering also drops the warm-up path's pooled-feature cache.
        """
        c, st = self.cfg, self.state
        feats = self._head_features(q, k, v)
        st.ema = ema_update(st.ema, feats, c.ema_alpha)
        hier = build_hierarchy(
            st.ema,
            sim_threshold=c.sim_threshold,
            prev_labels=st.cached_labels,
            churn_penalty=c.churn_penalty,
            churn_clamp=c.churn_clamp,
            **self._upper_kwargs(),
        )
        change = 0.0
        if st.cached_labels is not None:
            new = labels_from_groups(hier.levels[0].groups, self.n_head)
            change = sum(a != b for a, b in zip(new, st.cached_labels)) / self.n_head
        st.pooled_cache = None
        st.pooled_cache_step = None
        return hier, st.ema, change

    def _reduced(self, feats: torch.Tensor) -> torch.Tensor:
        return feats if self.feature_reducer is None else self.feature_reducer(feats)

    def _head_features(self, q, k, v) -> torch.Tensor:
        return self._reduced(head_features(q, k, v, self.state.prev_stats)).cpu()

    def _pooled(self, q, k, v, groups) -> torch.Tensor:
        return self._reduced(pooled_group_features(q, k, v, groups, self.state.prev_stats)).cpu()

    def _level0_source(self, q, k, v) -> tuple[Hierarchy, str, torch.Tensor | None, float | None, str]:
        """Step C2 of §8.2: the first matching level-0 source; returns hierarchy, path, features, change, origin."""
        c, st = self.cfg, self.state
        mode = c.hierarchy_ablation_mode
        if mode in ("fixed_random", "fixed_deterministic"):
            if st.fixed_groups is None:
                st.fixed_groups = (
                    fixed_random_partition(self.n_head, c.fixed_hierarchy_seed)
                    if mode == "fixed_random"
                    else fixed_deterministic_partition(self.n_head)
                )
            hier = passthrough_hierarchy(
                st.fixed_groups, self._pooled(q, k, v, st.fixed_groups), c.max_depth, c.group_feature_mode
            )
            return hier, f"grouped_control_{mode}_update", None, 0.0, "fixed"
        if mode == "freeze_learned_topology" and st.topology is not None:
            hier = hierarchy_from_topology(st.topology, self._pooled(q, k, v, st.topology[0]), c.group_feature_mode)
            return hier, "grouped_control_frozen_learned_topology_update", None, 0.0, "frozen"
        if mode == "freeze_after_warmup" and st.cached_labels is not None:
            groups = groups_from_labels(st.cached_labels)
            hier = passthrough_hierarchy(groups, self._pooled(q, k, v, groups), c.max_depth, c.group_feature_mode)
            return hier, "grouped_control_frozen_update", None, 0.0, "frozen"
        if c.reuse_group_hierarchy and st.cached_labels is not None:
            groups = groups_from_labels(st.cached_labels)
            hier = grow_upper_levels(groups, self._pooled(q, k, v, groups), **self._upper_kwargs())
            return hier, "grouped_control_reuse_update", None, 0.0, "frozen"
        hier, feats, change = self._adaptive_build(q, k, v)
        if mode == "freeze_learned_topology" and st.topology is None:
            st.topology = hier.topology()
            self._froze_now = True
        return hier, "grouped_control_update", feats, change, ""

    def _decide(self, hier: Hierarchy, want_tree: bool, level0_origin: str, remember_scoring: bool):
        """§8.1 on a hierarchy: inputs, scores, top-down argmax; returns per-head index, raw head index, tree."""
        c = self.cfg
        levels = hier.levels
        pmaps = hier.parent_maps()
        feats = [lvl.features for lvl in levels]
        sizes = [[len(g) for g in lvl.groups] for lvl in levels]
        inputs = level_inputs(feats, sizes, pmaps, c.controller_input_mode)
        dev = self._device()
        top = len(levels) - 1
        scored = []
        for lvl, x in enumerate(inputs):
            parent = pmaps[lvl] if lvl < top else None
            scored.append(
                score_level(self._nets, x.to(dev), parent, c.controller_pairwise_mode, float32=c.controller_float32)
            )
        # one host transfer for all levels' logits
        flat = torch.cat([torch.cat([s.base_logits, s.logits], dim=0) for s in scored]).detach().float().cpu()
        base_l, fin_l, off = [], [], 0
        for s in scored:
            n = s.logits.shape[0]
            base_l.append(flat[off : off + n])
            fin_l.append(flat[off + n : off + 2 * n])
            off += 2 * n
        raw, final, parent_final = select_top_down(fin_l, pmaps, c.parent_constraint, c.controller_choice_mode)
        labels = labels_from_groups(levels[0].groups, self.n_head)
        head_idx = heads_from_groups(final[0], labels)
        raw_head = heads_from_groups(raw[0], labels)
        if remember_scoring:
            st = self.state
            st.score_inputs = inputs[0].detach().cpu()
            st.score_parent = pmaps[0] if top > 0 else None
            st.score_parent_final = parent_final[0]
            st.score_labels = labels
            st.score_pairwise = True
        tree = None
        if want_tree:
            tree = []
            for lvl, level in enumerate(levels):
                origin = level0_origin if lvl == 0 else ("passthrough" if level0_origin == "fixed" else level0_origin)
                if level0_origin == "" or level.facts is not None:
                    facts = _facts(level, origin or "natural")
                else:
                    facts = ClusterFacts(origin=origin)
                tree.append(
                    TreeLevel(
                        level=lvl,
                        groups=[list(g) for g in level.groups],
                        parent=pmaps[lvl] if lvl < top else None,
                        members=hier.members(lvl),
                        base_logits=base_l[lvl],
                        logits=fin_l[lvl],
                        raw_idx=raw[lvl],
                        final_idx=final[lvl],
                        joint_paired=scored[lvl].paired,
                        facts=facts,
                        features=feats[lvl].detach(),
                    )
                )
        return head_idx, raw_head, tree, labels

    def _route(self, q, k, v, T: int) -> _Route:
        c, st = self.cfg, self.state
        H = self.n_head
        step = self.step
        in_warmup = step is not None and step < c.warmup_steps
        want = self.has_subscribers
        if c.apply_window_control and not in_warmup:
            due = (
                c.control_interval <= 1
                or step is None
                or st.last_control_step is None
                or step - st.last_control_step >= c.control_interval
            )
            if not due and st.cached_idx is not None:  # C1
                path = "grouped_control_cached" if c.build_hierarchy else "ungrouped_control_cached"
                # the reference reports 0.0 for both rates on every cached forward, grouped or not
                return _Route(
                    st.cached_idx,
                    path,
                    False,
                    True,
                    False,
                    resolution_delta=0.0,
                    group_change_rate=0.0,
                    extra={"group_counts": st.cached_group_counts},
                )
            extra: dict = {}
            if c.build_hierarchy:  # C2, C3
                self._froze_now = False
                hier, path, feats, change, origin = self._level0_source(q, k, v)
                if c.hierarchy_ablation_mode == "freeze_learned_topology":
                    extra["froze_topology"] = self._froze_now
                idx, raw_head, tree, labels = self._decide(hier, want, origin, remember_scoring=True)
                st.cached_labels = labels
                st.cached_group_counts = hier.group_counts()
                extra["group_counts"] = hier.group_counts()
                extra["stop_reason"] = hier.stop_reason
            else:  # C4: grouping off
                feats = self._head_features(q, k, v)
                x = single_level_inputs(feats, c.controller_input_mode)
                s = score_level(
                    self._nets,
                    x.to(self._device()),
                    None,
                    c.controller_pairwise_mode,
                    allow_pairwise=False,
                    float32=c.controller_float32,
                )
                logits = s.logits.detach().float().cpu()
                idx = first_argmax(logits)
                if c.controller_choice_mode == "oracle_alternating":
                    idx = oracle_alternating(H, len(self.windows))
                raw_head, change, path = idx, None, "ungrouped_control_update"
                st.score_inputs, st.score_parent, st.score_parent_final = x.detach().cpu(), None, None
                st.score_labels, st.score_pairwise = list(range(H)), False
                tree = None
                if want:
                    tree = [
                        TreeLevel(
                            level=0,
                            groups=[[h] for h in range(H)],
                            parent=None,
                            members=[[h] for h in range(H)],
                            base_logits=s.base_logits.detach().float().cpu(),
                            logits=logits,
                            raw_idx=idx,
                            final_idx=idx,
                            joint_paired=[False] * H,
                            facts=ClusterFacts(origin="ungrouped"),
                            features=feats,
                        )
                    ]
                extra["group_counts"] = [H]
            delta = None
            if st.cached_idx is not None:  # C5
                delta = float((idx - st.cached_idx).abs().float().mean())
            st.cached_idx = idx
            st.last_control_step = step
            return _Route(
                idx,
                path,
                True,
                True,
                False,
                tree=tree,
                raw_head_idx=raw_head,
                head_features=feats,
                group_change_rate=change,
                resolution_delta=delta,
                extra=extra,
            )

        # W: warm-up or control not applied
        full = full_window_index(self.windows, T)
        idx = torch.full((H,), full, dtype=torch.long)
        # named by the config, as in the reference: control off is "grouping_only" even during warm-up
        path = "warmup_or_disabled_control" if c.apply_window_control else "grouping_only_full_attention"
        route = _Route(idx, path, False, False, in_warmup)
        if not c.build_hierarchy:
            return route
        feats = None
        change = 0.0  # rebuilds from the cached labels change no label (§11.4: None only without grouping)
        route.group_change_rate = change
        if st.cached_labels is not None:
            groups = groups_from_labels(st.cached_labels)
            stale = (
                st.pooled_cache is None
                or step is None
                or st.pooled_cache_step is None
                or step - st.pooled_cache_step >= max(1, c.control_interval)
            )
            if not stale:
                # Same partition, same cached features, same (untrained) networks: the rebuild and
                # the shadow decision would repeat the previous forward's exactly, so skip them.
                route.extra["group_counts"] = st.cached_group_counts
                return route
            st.pooled_cache = self._pooled(q, k, v, groups)
            st.pooled_cache_step = step
            hier = grow_upper_levels(groups, st.pooled_cache, **self._upper_kwargs())
            origin = "frozen"
            route.updated = True
        else:
            hier, feats, change = self._adaptive_build(q, k, v)
            st.cached_labels = labels_from_groups(hier.levels[0].groups, H)
            origin = ""
            route.updated = True
        st.cached_group_counts = hier.group_counts()
        route.extra["group_counts"] = hier.group_counts()
        route.extra["stop_reason"] = hier.stop_reason
        route.head_features = feats
        route.group_change_rate = change
        if c.apply_window_control or want:
            # shadow decision: logged, never executed (computed in control-off only for subscribers)
            shadow, raw_head, tree, _ = self._decide(hier, want, origin, remember_scoring=False)
            route.extra["shadow_idx"] = shadow
            route.tree = tree
            route.raw_head_idx = raw_head
        return route

    # ------------------------------------------------------------- the event
    def _group_ratios(self, members: list[list[int]], executed: torch.Tensor, T: int) -> list[float]:
        """Mean accounting window / T per level-0 group (method §11.4).

        The reference indexes the per-head window vector by each head's *window index* instead of
        its head index (§15.6); that is reproduced unless ``fix_group_ratios`` is set.
        """
        w = [min(T, max(self.cfg.w_min, self.windows[i])) for i in executed.tolist()]
        idx = executed.tolist()
        out = []
        for heads in members:
            if self.cfg.fix_group_ratios:
                vals = [w[h] for h in heads]
            else:
                vals = [w[idx[h]] for h in heads if idx[h] < len(w)]
            out.append(sum(vals) / (len(vals) * T) if vals else 0.0)
        return out

    def _device_idx(self, executed: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(executed.tolist()), str(device))
        cached = self._event_idx_cache
        if cached is None or cached[0] != key:
            idx = executed.to(device, non_blocking=True)
            wins = torch.as_tensor(self.windows, dtype=torch.long).to(device, non_blocking=True).index_select(0, idx)
            cached = (key, idx, wins)
            self._event_idx_cache = cached
        return cached[1], cached[2]

    def _event(self, route: _Route, executed: torch.Tensor, T: int, device, backend: str, work) -> RoutingEvent:
        idx_d, win_d = self._device_idx(executed, device)
        extra = dict(route.extra)
        extra["pre_execution_idx"] = route.idx
        extra["mutated"] = self._mutates()
        extra["controller_training"] = self.cfg.controller_training
        if route.tree is not None and route.applied:
            extra["group_ratios"] = self._group_ratios(route.tree[0].members, executed, T)
        return RoutingEvent(
            layer=self.layer_index,
            step=self.step,
            path_mode=route.path_mode,
            updated=route.updated,
            applied=route.applied,
            in_warmup=route.in_warmup,
            training=self.training,
            window_idx=idx_d,
            windows=win_d,
            seq_len=T,
            candidate_windows=self.windows,
            raw_head_idx=route.raw_head_idx,
            tree=route.tree,
            head_features=route.head_features,
            group_change_rate=route.group_change_rate,
            resolution_delta=route.resolution_delta,
            backend=backend,
            realised_work=work,
            extra=extra,
        )
