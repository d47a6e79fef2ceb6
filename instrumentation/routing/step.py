"""The per-forward state machine of method §8.2 as one pure function, ``route_step``.

    state, decision = route_step(state, RoutingInputs(q, k, v, step=s), cfg, nets)

It reads one layer's per-head ``q, k, v`` (B, H, T, D), the routing state left by the previous
forward, the config and the routing networks (``networks_for(cfg)``), and returns the new state
and what to execute: paths F, C1-C5 and W1-W2, then the resolution EMA, the ramp and the window
override. The caller executes the windows and hands the head statistics back with
``state.with_stats(stats)``. No module is needed: a patched model calls it with its own tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from instrumentation.events import ClusterFacts, TreeLevel
from instrumentation.routing.clustering import labels_from_groups
from instrumentation.routing.controller import RoutingNetworks, make_networks, score_level, single_level_inputs
from instrumentation.routing.decide import decide, networks_device
from instrumentation.routing.features import ema_update, head_features, normalize_features, pooled_group_features
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
    oracle_alternating,
    ramp,
    resolution_ema,
    window_ablation,
)
from instrumentation.routing.state import RoutingState

SHADOW_PATHS = ("warmup_or_disabled_control", "grouping_only_full_attention")


@dataclass(frozen=True)
class RoutingInputs:
    """What one forward of one layer gives the state machine."""

    q: torch.Tensor  # (B, H, T, D)
    k: torch.Tensor
    v: torch.Tensor
    step: int | None  # the training step (set_step); None at stand-alone inference
    layer_index: int = 0  # seeds the window-ablation generator (§8.5)
    want_tree: bool = False  # build the per-level tree (and shadow decisions) for subscribers
    reducer: Callable[[torch.Tensor], torch.Tensor] | None = None  # e.g. a mean over data-parallel ranks

    @property
    def seq_len(self) -> int:
        return self.q.shape[2]


@dataclass
class RouteDecision:
    """What one forward decided: the windows to execute and the facts a routing event reports."""

    idx: torch.Tensor  # (H,) per-head index before the resolution EMA, ramp and override
    executed: torch.Tensor  # (H,) the index each head executes
    path_mode: str  # method §11.4 names
    updated: bool  # routing was (re)computed: a control update or a shadow rebuild
    applied: bool  # decisions executed (False in warm-up / control off)
    in_warmup: bool
    tree: list[TreeLevel] | None = None  # the hierarchy, when (re)built and asked for
    raw_head_idx: torch.Tensor | None = None  # (H,) level-0 argmax per head
    head_features: torch.Tensor | None = None  # (H, 9) features clustered (EMA) or scored (grouping off)
    group_change_rate: float | None = None
    resolution_delta: float | None = None
    group_counts: list[int] | None = None  # groups per level (current or cached)
    froze_topology: bool | None = None  # freeze_learned_topology: this update stored the topology
    shadow_idx: torch.Tensor | None = None  # (H,) the decision a warm-up / control-off build would take


def networks_for(cfg) -> RoutingNetworks:
    """The controller, joint scorer and sibling-bias networks one layer of ``cfg`` routes with (§7)."""
    return make_networks(
        input_mode=cfg.controller_input_mode,
        n_windows=len(cfg.windows),
        control_dim=cfg.control_dim,
        arch=cfg.controller_arch,
        logit_scale=cfg.controller_logit_scale,
        pairwise_mode=cfg.controller_pairwise_mode,
        joint_hidden_dim=cfg.joint_hidden_dim,
        joint_output_scale=cfg.joint_output_scale,
        pairwise_bias_scale=cfg.pairwise_bias_scale,
        rng_reference_dim=cfg.controller_rng_reference_dim,
    )


def initial_state(cfg) -> RoutingState:
    return RoutingState(control_enabled=cfg.apply_window_control)


def frozen_decision(state: RoutingState, cfg, step: int | None, applied: bool) -> RouteDecision:
    """An evaluation forward that leaves routing untouched (``eval_mutates_routing=False``)."""
    idx = state.executed_idx
    in_warmup = step is not None and step < cfg.warmup_steps
    return RouteDecision(idx, idx, "frozen_eval", False, applied, in_warmup)


# ----------------------------------------------------------------------------- features
def _moment_inputs(inp: RoutingInputs, cfg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V as the moments read them: every ``feature_token_stride``-th token (all by default)."""
    s = cfg.feature_token_stride
    if s == 1:
        return inp.q, inp.k, inp.v
    return tuple(x[:, :, ::s] for x in (inp.q, inp.k, inp.v))


def _head_features(inp: RoutingInputs, state: RoutingState, cfg) -> torch.Tensor:
    f = head_features(*_moment_inputs(inp, cfg), state.prev_stats)
    return (f if inp.reducer is None else inp.reducer(f)).cpu()


def _pooled(inp: RoutingInputs, state: RoutingState, groups, cfg) -> torch.Tensor:
    f = pooled_group_features(*_moment_inputs(inp, cfg), groups, state.prev_stats)
    return (f if inp.reducer is None else inp.reducer(f)).cpu()


def groups_from_labels(labels) -> list[list[int]]:
    """Level-0 groups (members ascending) from a head -> group labelling."""
    n_groups = max(labels) + 1 if labels else 0
    groups: list[list[int]] = [[] for _ in range(n_groups)]
    for h, g in enumerate(labels):
        groups[g].append(h)
    return [g for g in groups if g]


def _upper_kwargs(cfg) -> dict:
    return dict(
        super_threshold=cfg.super_threshold,
        max_depth=cfg.max_depth,
        upper_metric=cfg.upper_cluster_metric,
        normdiff_scale=cfg.cosine_normdiff_scale,
        min_group_size=cfg.min_group_size,
        group_feature_mode=cfg.group_feature_mode,
        upper_l2_threshold=cfg.upper_l2_threshold,
    )


def _adaptive_build(inp: RoutingInputs, state: RoutingState, cfg) -> tuple[Hierarchy, torch.Tensor, float, dict]:
    """Per-head features -> EMA -> full hierarchy with churn against the cached labels (§5.8).

    Returns the hierarchy, the features it clustered (the EMA, standardised across the heads under
    ``feature_normalization="zscore"``), the group change rate (0.0 on the first clustering, as in
    the reference) and the state changes; a re-clustering drops the pooled-feature cache. The EMA
    itself always smooths the raw features.
    """
    ema = ema_update(state.ema, _head_features(inp, state, cfg), cfg.ema_alpha)
    clustered = normalize_features(ema, cfg.feature_normalization)
    hier = build_hierarchy(
        clustered,
        sim_threshold=cfg.sim_threshold,
        prev_labels=state.cached_labels,
        churn_penalty=cfg.churn_penalty,
        churn_clamp=cfg.churn_clamp,
        **_upper_kwargs(cfg),
    )
    change = 0.0
    if state.cached_labels is not None:
        new = labels_from_groups(hier.levels[0].groups, len(state.cached_labels))
        change = sum(a != b for a, b in zip(new, state.cached_labels)) / len(new)
    return hier, clustered, change, dict(ema=ema, pooled_cache=None, pooled_cache_step=None)


def _level0_source(inp: RoutingInputs, state: RoutingState, cfg):
    """Step C2 of §8.2: the first matching level-0 source.

    Returns the hierarchy, the path mode, the clustered features (adaptive only), the change rate,
    the level-0 origin ("" when clustered) and the state changes.
    """
    mode = cfg.hierarchy_ablation_mode
    n_heads = inp.q.shape[1]
    if mode in ("fixed_random", "fixed_deterministic"):
        groups = state.fixed_groups
        if groups is None:
            made = (
                fixed_random_partition(n_heads, cfg.fixed_hierarchy_seed)
                if mode == "fixed_random"
                else fixed_deterministic_partition(n_heads)
            )
            groups = tuple(tuple(g) for g in made)
        hier = passthrough_hierarchy(groups, _pooled(inp, state, groups, cfg), cfg.max_depth, cfg.group_feature_mode)
        return hier, f"grouped_control_{mode}_update", None, 0.0, "fixed", dict(fixed_groups=groups)
    if mode == "freeze_learned_topology" and state.topology is not None:
        topo = state.topology
        hier = hierarchy_from_topology(topo, _pooled(inp, state, topo[0], cfg), cfg.group_feature_mode)
        return hier, "grouped_control_frozen_learned_topology_update", None, 0.0, "frozen", {}
    if mode == "freeze_after_warmup" and state.cached_labels is not None:
        groups = groups_from_labels(state.cached_labels)
        hier = passthrough_hierarchy(groups, _pooled(inp, state, groups, cfg), cfg.max_depth, cfg.group_feature_mode)
        return hier, "grouped_control_frozen_update", None, 0.0, "frozen", {}
    if cfg.reuse_group_hierarchy and state.cached_labels is not None:
        groups = groups_from_labels(state.cached_labels)
        hier = grow_upper_levels(groups, _pooled(inp, state, groups, cfg), **_upper_kwargs(cfg))
        return hier, "grouped_control_reuse_update", None, 0.0, "frozen", {}
    hier, feats, change, changes = _adaptive_build(inp, state, cfg)
    if mode == "freeze_learned_topology":  # no topology stored yet: store this one
        changes["topology"] = tuple(tuple(tuple(g) for g in level) for level in hier.topology())
    return hier, "grouped_control_update", feats, change, "", changes


# ----------------------------------------------------------------------------- the paths
def _cached(state: RoutingState, cfg) -> RouteDecision:
    """C1: reuse the cached per-head indices; the reference reports 0.0 for both rates."""
    path = "grouped_control_cached" if cfg.build_hierarchy else "ungrouped_control_cached"
    counts = None if state.cached_group_counts is None else list(state.cached_group_counts)
    return RouteDecision(
        state.cached_idx,
        state.cached_idx,
        path,
        False,
        True,
        False,
        resolution_delta=0.0,
        group_change_rate=0.0,
        group_counts=counts,
    )


def _grouped_update(inp: RoutingInputs, state: RoutingState, cfg, nets) -> tuple[RouteDecision, dict]:
    """C2, C3: level-0 source, hierarchy, top-down decision; caches the new labels."""
    hier, path, feats, change, origin, changes = _level0_source(inp, state, cfg)
    d = decide(hier, nets, cfg, inp.q.shape[1], want_tree=inp.want_tree, level0_origin=origin)
    froze = "topology" in changes if cfg.hierarchy_ablation_mode == "freeze_learned_topology" else None
    changes.update(
        cached_labels=tuple(d.labels),
        cached_group_counts=tuple(hier.group_counts()),
        score_inputs=d.level0_inputs,
        score_parent=None if d.level0_parent is None else tuple(d.level0_parent),
        score_parent_final=d.level0_parent_final,
        score_labels=tuple(d.labels),
        score_pairwise=True,
    )
    decision = RouteDecision(
        d.head_idx,
        d.head_idx,
        path,
        True,
        True,
        False,
        tree=d.tree,
        raw_head_idx=d.raw_head_idx,
        head_features=feats,
        group_change_rate=change,
        group_counts=hier.group_counts(),
        froze_topology=froze,
    )
    return decision, changes


def _ungrouped_update(inp: RoutingInputs, state: RoutingState, cfg, nets) -> tuple[RouteDecision, dict]:
    """C4 (grouping off): raw per-head features, one level, base controller, argmax per head."""
    n_heads = inp.q.shape[1]
    feats = _head_features(inp, state, cfg)
    x = single_level_inputs(feats, cfg.controller_input_mode)
    dev = networks_device(nets)
    s = score_level(
        nets, x.to(dev), None, cfg.controller_pairwise_mode, allow_pairwise=False, float32=cfg.controller_float32
    )
    logits = s.logits.detach().float().cpu()
    idx = first_argmax(logits)
    if cfg.controller_choice_mode == "oracle_alternating":
        idx = oracle_alternating(n_heads, len(cfg.windows))
    tree = None
    if inp.want_tree:
        singles = [[h] for h in range(n_heads)]
        tree = [
            TreeLevel(
                level=0,
                groups=singles,
                parent=None,
                members=singles,
                base_logits=s.base_logits.detach().float().cpu(),
                logits=logits,
                raw_idx=idx,
                final_idx=idx,
                joint_paired=[False] * n_heads,
                facts=ClusterFacts(origin="ungrouped"),
                features=feats,
            )
        ]
    changes = dict(
        score_inputs=x.detach().cpu(),
        score_parent=None,
        score_parent_final=None,
        score_labels=tuple(range(n_heads)),
        score_pairwise=False,
    )
    decision = RouteDecision(
        idx,
        idx,
        "ungrouped_control_update",
        True,
        True,
        False,
        tree=tree,
        raw_head_idx=idx,
        head_features=feats,
        group_counts=[n_heads],
    )
    return decision, changes


def _control(inp: RoutingInputs, state: RoutingState, cfg, nets) -> tuple[RouteDecision, RoutingState]:
    """Path C: a cached forward (C1) or a control update (C2-C5)."""
    step = inp.step
    due = (
        cfg.control_interval <= 1
        or step is None
        or state.last_control_step is None
        or step - state.last_control_step >= cfg.control_interval
    )
    if not due and state.cached_idx is not None:
        return _cached(state, cfg), state
    update = _grouped_update if cfg.build_hierarchy else _ungrouped_update
    decision, changes = update(inp, state, cfg, nets)
    if state.cached_idx is not None:  # C5
        decision.resolution_delta = float((decision.idx - state.cached_idx).abs().float().mean())
    return decision, state.replace(cached_idx=decision.idx, last_control_step=step, **changes)


def _shadow(inp: RoutingInputs, state: RoutingState, cfg, nets, in_warmup: bool) -> tuple[RouteDecision, RoutingState]:
    """Path W: warm-up or control not applied; every head runs the full window (or index 0)."""
    n_heads = inp.q.shape[1]
    idx = torch.full((n_heads,), full_window_index(cfg.windows, inp.seq_len), dtype=torch.long)
    # named by the config, as in the reference: control off is "grouping_only" even during warm-up
    path = SHADOW_PATHS[0] if cfg.apply_window_control else SHADOW_PATHS[1]
    decision = RouteDecision(idx, idx, path, False, False, in_warmup)
    if not cfg.build_hierarchy:
        return decision, state
    decision.group_change_rate = 0.0  # rebuilds from the cached labels change no label (§11.4)
    step = inp.step
    if state.cached_labels is not None:
        fresh = not (
            state.pooled_cache is None
            or step is None
            or state.pooled_cache_step is None
            or step - state.pooled_cache_step >= max(1, cfg.control_interval)
        )
        if fresh:
            # Same partition, same cached features, same (untrained) networks: the rebuild and the
            # shadow decision would repeat the previous forward's exactly, so they are skipped.
            decision.group_counts = list(state.cached_group_counts)
            return decision, state
        groups = groups_from_labels(state.cached_labels)
        pooled = _pooled(inp, state, groups, cfg)
        hier = grow_upper_levels(groups, pooled, **_upper_kwargs(cfg))
        feats, origin = None, "frozen"
        changes = dict(pooled_cache=pooled, pooled_cache_step=step)
    else:
        hier, feats, change, changes = _adaptive_build(inp, state, cfg)
        changes["cached_labels"] = tuple(labels_from_groups(hier.levels[0].groups, n_heads))
        decision.group_change_rate = change
        origin = ""
    decision.updated = True
    decision.head_features = feats
    decision.group_counts = hier.group_counts()
    changes["cached_group_counts"] = tuple(hier.group_counts())
    if cfg.apply_window_control or inp.want_tree:
        # the shadow decision: logged, never executed (in control off only for subscribers)
        d = decide(hier, nets, cfg, n_heads, want_tree=inp.want_tree, level0_origin=origin)
        decision.shadow_idx = d.head_idx
        decision.tree = d.tree
        decision.raw_head_idx = d.raw_head_idx
    return decision, state.replace(**changes)


def _post_process(decision: RouteDecision, state: RoutingState, inp: RoutingInputs, cfg) -> RoutingState:
    """The end of §8.2: resolution EMA, post-warm-up ramp, window override (sets ``executed``)."""
    out = decision.idx.clone()
    active = state.control_enabled and not decision.in_warmup
    if active and cfg.resolution_ema_alpha > 0:
        res_ema, out = resolution_ema(state.res_ema, out, cfg.resolution_ema_alpha, len(cfg.windows))
        state = state.replace(res_ema=res_ema)
    if active and cfg.post_warmup_ramp_steps > 0 and inp.step is not None:
        full = full_window_index(cfg.windows, inp.seq_len)
        out = ramp(out, full, inp.step, cfg.warmup_steps, cfg.post_warmup_ramp_steps)
    decision.executed = window_ablation(
        out,
        cfg.window_ablation_mode,
        windows=cfg.windows,
        fixed_window=cfg.fixed_window,
        seed=cfg.window_ablation_seed,
        layer_index=inp.layer_index,
        step=inp.step,
    )
    return state.replace(executed_idx=decision.executed)


def stats_read_next(state: RoutingState, step: int | None, cfg) -> bool:
    """Whether the forward after this one (at ``step``, ``state`` as this forward left it) may read this
    forward's head statistics: False only when it is known to be a cached control forward (not due) or a
    warm-up / control-off forward whose pooled features are fresh, the two cases that read no features."""
    if step is None or cfg.control_interval <= 1:
        return True
    nxt = step + 1
    if cfg.apply_window_control and nxt >= cfg.warmup_steps:  # _control's due rule at the next step
        last = state.last_control_step
        return last is None or state.cached_idx is None or nxt - last >= cfg.control_interval
    if not cfg.build_hierarchy:
        return False
    last = state.pooled_cache_step  # _shadow's rebuild rule at the next step
    return (
        state.cached_labels is None or state.pooled_cache is None or last is None or nxt - last >= cfg.control_interval
    )


@torch.no_grad()
def route_step(
    state: RoutingState, inputs: RoutingInputs, cfg, nets: RoutingNetworks
) -> tuple[RoutingState, RouteDecision]:
    """One forward of the §8.2 state machine: the new state and what to execute. Pure."""
    n_heads = inputs.q.shape[1]
    if not (cfg.apply_window_control or cfg.build_hierarchy):  # F: full-attention fast path
        full = torch.full((n_heads,), full_window_index(cfg.windows, inputs.seq_len), dtype=torch.long)
        in_warmup = inputs.step is not None and inputs.step < cfg.warmup_steps
        decision = RouteDecision(full, full, "full_attention_fastpath", False, False, in_warmup)
        return state.replace(executed_idx=full), decision
    in_warmup = inputs.step is not None and inputs.step < cfg.warmup_steps
    if cfg.apply_window_control and not in_warmup:
        decision, state = _control(inputs, state, cfg, nets)
    else:
        decision, state = _shadow(inputs, state, cfg, nets, in_warmup)
    return _post_process(decision, state, inputs, cfg), decision
