"""The attention layers: the plain causal baseline and ``AAHAttention``.

``AAHAttention`` owns the Q/K/V and output projections, the routing networks and the routing
state, and calls the pure state machine ``routing.step.route_step`` once per forward; it then
executes the chosen windows with an attention backend (``dense_masked`` is the reference, method
§10.1) and keeps the head statistics for the next forward. Events go out through ``hooks``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from instrumentation.backends import get_backend
from instrumentation.backends.dense_masked import dense_masked_attention
from instrumentation.backends.masks import MASK_CACHE
from instrumentation.config import AAHConfig
from instrumentation.events import RoutingEvent
from instrumentation.hooks import Hookable, SubscriptionHandle, routing_event
from instrumentation.mixture import mixture_attention
from instrumentation.routing.selection import full_window_index
from instrumentation.routing.state import RoutingState
from instrumentation.routing.step import (
    RouteDecision,
    RoutingInputs,
    frozen_decision,
    networks_for,
    route_step,
    stats_read_next,
)

__all__ = ["AAHAttention", "CausalSelfAttention", "RoutingState", "SubscriptionHandle"]


def _full_causal(
    q,
    k,
    v,
    *,
    dropout_p: float,
    training: bool,
    window: int | tuple[int, ...] | None,
    need_probs: bool,
    scale: float | None = None,
    mask: torch.Tensor | None = None,
    sinks: int = 0,
):
    """Plain causal (optionally banded) attention for the baseline modules; a tuple window gives
    each head its own band; ``mask`` as ``attend``'s; ``sinks`` k: the first k positions stay visible
    to every query besides its band (method §10.4)."""
    B, H, T, D = q.shape
    per_head = list(window) if isinstance(window, tuple) else [window or T] * H
    if need_probs or mask is not None:
        res = dense_masked_attention(
            q,
            k,
            v,
            per_head,
            dropout_p=dropout_p,
            training=training,
            scale=scale,
            need_probs=need_probs,
            mask=mask,
            sinks=sinks,
        )
        return res.out, res.probs
    p = dropout_p if training else 0.0
    if max(per_head) >= T and min(per_head) >= T:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=scale), None
    if len(set(per_head)) == 1:
        allowed = MASK_CACHE.get(T, per_head[0], q.device, sinks)
    else:
        allowed = torch.stack([MASK_CACHE.get(T, min(w, T), q.device, sinks) for w in per_head])  # (H, T, T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p, scale=scale), None


def split_heads(x: torch.Tensor, c_attn: nn.Linear, n_head: int):
    """(B, H, T, D) views of Q, K and V: the layer's projection of ``x`` (B, T, C), split per head."""
    B, T, C = x.shape
    q, k, v = c_attn(x).split(C, dim=2)
    return (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))


# ----------------------------------------------------------------------------- plain attention
class CausalSelfAttention(nn.Module, Hookable):
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
        """The training step (None at stand-alone inference); a plain layer only records it."""
        self.step = step

    def set_control(self, flag: bool) -> None:  # nothing to control
        pass

    def executed_windows(self, seq_len: int | None = None) -> list[int]:
        T = seq_len or self.last_seq_len or self.cfg.block_size
        if isinstance(self.window, tuple):
            return [min(w, T) for w in self.window]
        return [T if self.window is None else self.window] * self.n_head

    def band_windows(self) -> list[int | None]:
        """Each head's band in tokens, None for full causal attention (what cached decoding keeps to)."""
        if isinstance(self.window, tuple):
            return list(self.window)
        return [self.window] * self.n_head

    def forward(self, x: torch.Tensor, need_probs: bool = False):
        B, T, C = x.shape
        y, probs = self.attend(*split_heads(x, self.c_attn, self.n_head), need_probs=need_probs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), probs

    def attend(self, q, k, v, *, need_probs: bool = False, scale: float | None = None, mask=None):
        """Attention of per-head ``q, k, v`` (B, H, T, D): ``(y (B, H, T, D), probs or None)``.

        ``mask`` (boolean, broadcastable to (B, H, T, T); True where a query may see a key) restricts
        the band further: the padding of another model's batch (``instrumentation.retrofit``).
        """
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
            mask=mask,
            sinks=self.cfg.sink_tokens,
        )
        self.last_seq_len = T
        if self._subscribers:
            wins = self.executed_windows(T)
            if isinstance(self.window, tuple):  # per-head bands: indices into the candidate windows
                cand = tuple(self.cfg.windows)
                idx = torch.tensor([cand.index(w) if w in cand else -1 for w in wins], device=q.device)
            else:
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
                    windows=torch.tensor(wins, dtype=torch.long, device=q.device),
                    seq_len=T,
                    candidate_windows=cand,
                    backend="sdpa",
                )
            )
        return y, probs


# ----------------------------------------------------------------------------- AAH attention
class AAHAttention(nn.Module, Hookable):
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
        nets = networks_for(cfg)
        self.controller = nets.controller
        self.joint_scorer = nets.joint
        self.sibling_bias = nets.sibling_bias
        self.networks = nets
        for i, p in enumerate(self.routing_parameters()):  # weight drift is measured against these
            self.register_buffer(f"_routing_init_{i}", p.detach().clone(), persistent=False)
        self.step: int | None = None
        self.state = RoutingState(control_enabled=cfg.apply_window_control)
        self.eval_mutates_routing = cfg.eval_mutates_routing
        self.last_seq_len: int | None = None
        self.last_decision: RouteDecision | None = None
        self._backends: dict[tuple, tuple] = {}
        # Optional reduction of routing inputs across data-parallel ranks (see set_feature_reducer).
        self.feature_reducer: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._init_hooks()

    # ------------------------------------------------------------- public controls
    def routing_parameters(self) -> list[nn.Parameter]:
        """Controller, joint scorer and sibling-bias parameters, in a fixed order."""
        mods = [m for m in (self.controller, self.joint_scorer, self.sibling_bias) if m is not None]
        return [p for m in mods for p in m.parameters()]

    def routing_initial_parameters(self) -> list[torch.Tensor]:
        return [getattr(self, f"_routing_init_{i}") for i in range(len(self.routing_parameters()))]

    def set_step(self, step: int | None) -> None:
        """The training step the next forwards belong to: routing keys its warm-up and control cadence on
        it (method §8.6); None at stand-alone inference, where every forward that may change routing
        updates it. Trainers call ``prepare_step``, which also sets the control flag."""
        self.step = None if step is None else int(step)

    def set_control(self, flag: bool) -> None:
        """Method §8.6: False clears the control caches; True only sets the flag."""
        self.state = self.state.with_control(bool(flag))

    def reset_routing_state(self) -> None:
        self.state = RoutingState(control_enabled=self.cfg.apply_window_control)
        self.last_decision = None

    def _executed_idx(self) -> torch.Tensor | None:
        """Window indices executed last: the routing state's, else those of the last forward (an evaluation
        forward of a layer without routing state decides on a scratch copy and keeps only this)."""
        if self.state.executed_idx is not None:
            return self.state.executed_idx
        return None if self.last_decision is None else self.last_decision.executed

    def executed_windows(self, seq_len: int | None = None) -> list[int]:
        """Windows (tokens) executed by the last forward; the warm-up choice before any forward."""
        T = seq_len or self.last_seq_len or self.cfg.block_size
        if not (self.cfg.apply_window_control or self.cfg.build_hierarchy):
            return [T] * self.n_head  # the fast path always runs full causal attention
        idx = self._executed_idx()
        if idx is not None:
            return [self.windows[i] for i in idx.tolist()]
        return [self.windows[full_window_index(self.windows, T)]] * self.n_head

    def band_windows(self) -> list[int | None]:
        """Each head's band in tokens, None for full causal attention: the windows of the last forward,
        which cached decoding keeps to (a candidate window is a band at any length)."""
        if not (self.cfg.apply_window_control or self.cfg.build_hierarchy):
            return [None] * self.n_head
        return list(self.executed_windows())

    # ------------------------------------------------------------- checkpointed state
    def get_extra_state(self) -> dict:
        if not self.cfg.persist_routing_state:
            return {}
        return {"routing_state": self.state.to_plain(), "step": self.step}

    def set_extra_state(self, state: dict) -> None:
        if not self.cfg.persist_routing_state or not state:
            return
        device = next(self.controller.parameters()).device
        self.state = RoutingState.from_plain(state.get("routing_state", {}), device=device)
        self.step = state.get("step", self.step)

    # ------------------------------------------------------------- forward
    def _mutates(self) -> bool:
        return self.training or self.eval_mutates_routing

    def _backend(self, device, training: bool):
        key = (device.type, training)
        if key not in self._backends:
            self._backends[key] = get_backend(
                self.cfg.attention_backend, device=device, training=training, dropout_p=self.cfg.dropout
            )
        return self._backends[key]

    def forward(self, x: torch.Tensor, need_probs: bool = False):
        B, T, C = x.shape
        y, probs = self.attend(*split_heads(x, self.c_attn, self.n_head), need_probs=need_probs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), probs

    def attend(self, q, k, v, *, need_probs: bool = False, scale: float | None = None, mask=None):
        """Route and execute per-head ``q, k, v`` (B, H, T, D): ``(y (B, H, T, D), probs or None)``.

        ``scale`` multiplies the scores (default ``D^-1/2``). Training forwards (and evaluation
        forwards with ``eval_mutates_routing``) run the state machine and keep its new state;
        other evaluation forwards execute the current windows and leave routing untouched.
        ``mask`` (boolean, broadcastable to (B, H, T, T); True where a query may see a key: the
        padding of another model's batch) restricts every head's window further; such a forward
        executes with the ``dense_masked`` backend, the one that takes a mask.
        """
        self.last_seq_len = q.shape[2]
        mutate = self._mutates()
        fast = not (self.cfg.apply_window_control or self.cfg.build_hierarchy)
        if not fast and not mutate and self.state.executed_idx is not None:
            applied = self.last_decision.applied if self.last_decision is not None else True
            decision = frozen_decision(self.state, self.cfg, self.step, applied)
        else:
            inputs = RoutingInputs(
                q,
                k,
                v,
                step=self.step,
                layer_index=self.layer_index,
                want_tree=self.has_subscribers,
                reducer=self.feature_reducer,
            )
            state, decision = route_step(self.state, inputs, self.cfg, self.networks)
            if mutate:  # otherwise decide on a scratch state and forget it
                self.state = state
        if fast:
            y, probs = _full_causal(
                q,
                k,
                v,
                dropout_p=self.cfg.dropout,
                training=self.training,
                window=None,
                need_probs=need_probs,
                scale=scale,
                mask=mask,
            )
            stats, backend, work, fallback = None, "sdpa" if mask is None else "dense_masked", None, None
        else:
            want_stats = mutate and (
                not self.cfg.stats_on_update_only or stats_read_next(self.state, self.step, self.cfg)
            )
            y, probs, stats, backend, work, fallback = self._execute(
                q, k, v, decision, need_probs, need_stats=want_stats, scale=scale, mask=mask
            )
        if mutate:
            self.state = self.state.with_stats(stats)
        self.last_decision = decision
        if self._subscribers:
            event = routing_event(
                self,
                decision,
                step=self.step,
                training=self.training,
                device=y.device,
                backend=backend,
                work=work,
                fallback_reason=fallback,
            )
            self._emit(event)
        return y, probs

    # ------------------------------------------------------------- execution (§10)
    def _execute(self, q, k, v, decision: RouteDecision, need_probs: bool, need_stats: bool, scale=None, mask=None):
        """Run the executed windows: (y, probs, (H, 3) stats, backend name, realised work, fallback reason)."""
        cfg = self.cfg
        executed = decision.executed
        wins = [self.windows[i] for i in executed.tolist()]
        trainable = (
            self.training
            and cfg.controller_training != "none"
            and decision.applied
            and not decision.in_warmup
            and self.state.score_inputs is not None
        )
        sinks = cfg.sink_tokens
        if trainable:
            fn, name = self._backend(q.device, True)[0], cfg.attention_backend
            if mask is not None:
                fn, name = functools.partial(dense_masked_attention, mask=mask), "dense_masked"
            fn = functools.partial(fn, sinks=sinks) if sinks else fn
            y, stats = mixture_attention(fn, q, k, v, self.state, self.networks, cfg, executed, scale)
            probs = None
            if need_probs:
                probs = dense_masked_attention(
                    q, k, v, wins, scale=scale, need_probs=True, mask=mask, sinks=sinks
                ).probs
            return y, probs, stats, f"{name}+{cfg.controller_training}", None, None
        if need_probs or mask is not None:  # the reference backend: it forms the probabilities and takes a mask
            fn, reason = dense_masked_attention, None
            extra = dict(need_probs=need_probs, mask=mask)
        else:
            fn, _, reason = self._backend(q.device, self.training)
            extra = {}
        if sinks:  # left out at 0, so that the method's calls stay exactly what they were
            extra["sinks"] = sinks
        res = fn(
            q, k, v, wins, dropout_p=cfg.dropout, training=self.training, need_stats=need_stats, scale=scale, **extra
        )
        stats = None if res.stats is None else res.stats.matrix()
        return res.out, res.probs, stats, res.backend, res.realised_work, reason
