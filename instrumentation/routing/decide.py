"""One decision on a built hierarchy (method §8.1): controller inputs, scores, top-down argmax.

``decide`` returns the per-head window index and, when asked, the hierarchy as ``TreeLevel``s
(groups, parents, logits, raw and final indices, clustering facts) for subscribers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from instrumentation.events import ClusterFacts, TreeLevel
from instrumentation.routing.clustering import labels_from_groups
from instrumentation.routing.controller import RoutingNetworks, level_inputs, score_level
from instrumentation.routing.hierarchy import Hierarchy
from instrumentation.routing.selection import heads_from_groups, select_top_down


@dataclass
class Decision:
    """What §8.1 chose on one hierarchy."""

    head_idx: torch.Tensor  # (H,) final index per head
    raw_head_idx: torch.Tensor  # (H,) level-0 argmax per head, before the parent constraint
    labels: list[int]  # head -> level-0 group
    tree: list[TreeLevel] | None
    level0_inputs: torch.Tensor  # (n0, in_dim) controller inputs of level 0 (trainable controller)
    level0_parent: list[int] | None  # level-0 -> level-1 map, None when level 0 is the top
    level0_parent_final: torch.Tensor | None  # (n0,) the parent's final index, None at the top


def networks_device(nets: RoutingNetworks) -> torch.device:
    return next(nets.controller.parameters()).device


def _facts(level, origin: str) -> ClusterFacts:
    res = level.facts
    if res is None:
        return ClusterFacts(origin=origin)
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
        decision_margin=res.decision_margin,
    )


def _level_origin(level_index: int, level0_origin: str) -> str:
    """Origin of a level without clustering facts: level 0 says where its partition came from."""
    if level_index == 0:
        return level0_origin
    return "passthrough" if level0_origin == "fixed" else level0_origin


def decide(
    hier: Hierarchy,
    nets: RoutingNetworks,
    cfg,
    n_heads: int,
    *,
    want_tree: bool,
    level0_origin: str = "",
) -> Decision:
    """§8.1 on ``hier``: ``level0_origin`` is "" for a clustered hierarchy, else fixed / frozen."""
    levels = hier.levels
    pmaps = hier.parent_maps()
    feats = [lvl.features for lvl in levels]
    sizes = [[len(g) for g in lvl.groups] for lvl in levels]
    inputs = level_inputs(feats, sizes, pmaps, cfg.controller_input_mode)
    dev = networks_device(nets)
    top = len(levels) - 1
    scored = [
        score_level(
            nets,
            x.to(dev),
            pmaps[lvl] if lvl < top else None,
            cfg.controller_pairwise_mode,
            float32=cfg.controller_float32,
        )
        for lvl, x in enumerate(inputs)
    ]
    # one host transfer for all levels' logits
    flat = torch.cat([torch.cat([s.base_logits, s.logits], dim=0) for s in scored]).detach().float().cpu()
    base_l, fin_l, off = [], [], 0
    for s in scored:
        n = s.logits.shape[0]
        base_l.append(flat[off : off + n])
        fin_l.append(flat[off + n : off + 2 * n])
        off += 2 * n
    raw, final, parent_final = select_top_down(fin_l, pmaps, cfg.parent_constraint, cfg.controller_choice_mode)
    labels = labels_from_groups(levels[0].groups, n_heads)
    tree = None
    if want_tree:
        tree = []
        for lvl, level in enumerate(levels):
            origin = _level_origin(lvl, level0_origin)
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
                    facts=_facts(level, origin or "natural"),
                    features=feats[lvl].detach(),
                )
            )
    return Decision(
        head_idx=heads_from_groups(final[0], labels),
        raw_head_idx=heads_from_groups(raw[0], labels),
        labels=labels,
        tree=tree,
        level0_inputs=inputs[0].detach().cpu(),
        level0_parent=pmaps[0] if top > 0 else None,
        level0_parent_final=parent_final[0],
    )
