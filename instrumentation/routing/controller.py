"""Controller inputs (method §6) and the routing networks (method §7).

* ``level_inputs`` builds the controller-input rows of every level (base / enriched /
  contrastive / position_aware / relative_sibling_mean);
* ``Controller`` is the per-layer MLP shared by all levels; ``JointSiblingScorer`` scores sibling
  pairs jointly and *replaces* their base logits; ``SiblingBias`` adds a sibling-difference term;
* ``sibling_pairs`` implements the pairing rules of §7.2; ``score_level`` composes them;
* ``make_networks`` creates them with the RNG bookkeeping of §7.4.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from aah_viz.errors import ConfigError
from instrumentation.routing.features import FEATURE_DIM

INPUT_DIMS = {
    "base": FEATURE_DIM,
    "enriched": 3 * FEATURE_DIM + 2,  # 29
    "contrastive": 4 * FEATURE_DIM + 2,  # 38
    "position_aware": 3 * FEATURE_DIM + 5,  # 32
    "relative_sibling_mean": 3 * FEATURE_DIM + 1,  # 28
}


# ----------------------------------------------------------------------------- inputs (§6)
def _same_parent_sets(parent: Sequence[int] | None, n: int) -> list[list[int]]:
    """For each item, the items sharing its parent (itself included); all items without a parent."""
    if parent is None:
        return [list(range(n))] * n
    by_parent: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        by_parent.setdefault(int(p), []).append(i)
    return [by_parent[int(parent[i])] for i in range(n)]


def sibling_difference(F: torch.Tensor, parent: Sequence[int] | None) -> torch.Tensor:
    """F_i minus the mean of F over the other groups with the same parent (all others at the top).

    Zero when an item has no other sibling (and when n = 1).
    """
    n = F.shape[0]
    if n <= 1:
        return torch.zeros_like(F)
    if parent is None:
        others = (F.sum(dim=0, keepdim=True) - F) / (n - 1)
        return F - others
    p = torch.as_tensor(list(parent), dtype=torch.long, device=F.device)
    same = (p[:, None] == p[None, :]).to(F.dtype)
    same.fill_diagonal_(0.0)
    count = same.sum(dim=1, keepdim=True)
    mean_others = (same @ F) / count.clamp_min(1.0)
    return torch.where(count > 0, F - mean_others, torch.zeros_like(F))


def _position(parent: Sequence[int] | None, n: int, device) -> torch.Tensor:
    """(n, 3): [normalised position among same-parent groups, is-first, is-not-first]; zero if n = 1."""
    out = torch.zeros((n, 3), dtype=torch.float32, device=device)
    if n <= 1:
        return out
    sets = _same_parent_sets(parent, n)
    vals = []
    for i in range(n):
        mates = sorted(sets[i])
        rank = mates.index(i)
        vals.append([rank / max(1, len(mates) - 1), 1.0 if rank == 0 else 0.0, 0.0 if rank == 0 else 1.0])
    return torch.tensor(vals, dtype=torch.float32, device=device)


def level_inputs(
    features: Sequence[torch.Tensor],
    sizes: Sequence[Sequence[int]],
    parent_maps: Sequence[Sequence[int]],
    mode: str,
) -> list[torch.Tensor]:
    """Controller-input rows of every level (§6).

    ``features[l]`` is (n_l, 9); ``sizes[l][i]`` is the member count of group i at level l (heads at
    level 0, child groups above); ``parent_maps[l]`` maps level-l groups to level-(l+1) groups
    (one map per level below the top).
    """
    n_levels = len(features)
    out = []
    for lvl, F in enumerate(features):
        F = F.float()
        if mode == "base":
            out.append(F)
            continue
        n = F.shape[0]
        dev = F.device
        has_parent = lvl < n_levels - 1
        parent = list(parent_maps[lvl]) if has_parent else None
        level_scalar = torch.full((n, 1), lvl / max(1, n_levels - 1), dtype=torch.float32, device=dev)
        if has_parent:
            idx = torch.as_tensor(parent, dtype=torch.long, device=dev)
            parent_diff = F - features[lvl + 1].float().index_select(0, idx)
        else:
            parent_diff = torch.zeros_like(F)
        if mode == "relative_sibling_mean":
            out.append(torch.cat([F, sibling_difference(F, parent), parent_diff, level_scalar], dim=1))
            continue
        offset = F - F.mean(dim=0, keepdim=True)
        sz = torch.as_tensor([float(s) for s in sizes[lvl]], dtype=torch.float32, device=dev).reshape(n, 1)
        frac = sz / sz.sum().clamp_min(1e-12)
        rows = [F, level_scalar, parent_diff, offset, frac]
        if mode == "contrastive":
            rows.append(sibling_difference(F, parent))
        elif mode == "position_aware":
            rows.append(_position(parent, n, dev))
        out.append(torch.cat(rows, dim=1))
    return out


def single_level_inputs(head_feats: torch.Tensor, mode: str) -> torch.Tensor:
    """Grouping-off inputs: one level of heads on raw features (level 0, no parent, size 1/H)."""
    n = head_feats.shape[0]
    return level_inputs([head_feats], [[1] * n], [], mode)[0]


# ----------------------------------------------------------------------------- networks (§7)
def _mlp(in_dim: int, hidden: int, out_dim: int, deep: bool) -> nn.Sequential:
    if deep:
        return nn.Sequential(
            nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, out_dim)
        )
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))


class Controller(nn.Module):
    """in_dim -> hidden -> K logits (GELU, biases), times ``logit_scale``; shared by all levels."""

    def __init__(self, in_dim: int, n_windows: int, hidden: int, arch: str = "mlp", logit_scale: float = 1.0):
        super().__init__()
        self.net = _mlp(in_dim, hidden, n_windows, arch == "deep_mlp")
        self.logit_scale = float(logit_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).float() * self.logit_scale


class JointSiblingScorer(nn.Module):
    """[x_a, x_b, x_a - x_b, x_b - x_a] -> 2K logits: rows for a and b (§7.2)."""

    def __init__(self, in_dim: int, n_windows: int, hidden: int, output_scale: float = 1.0):
        super().__init__()
        self.net = _mlp(4 * in_dim, hidden, 2 * n_windows, False)
        self.n_windows = n_windows
        self.output_scale = float(output_scale)

    def forward(self, xa: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
        """(P, in) x 2 -> (P, 2, K)."""
        z = torch.cat([xa, xb, xa - xb, xb - xa], dim=-1)
        return self.net(z).float().reshape(-1, 2, self.n_windows) * self.output_scale


class SiblingBias(nn.Module):
    """A controller-shaped MLP on sibling-difference vectors, added to the base logits (§7.3)."""

    def __init__(self, in_dim: int, n_windows: int, hidden: int, arch: str = "mlp", scale: float = 1.0):
        super().__init__()
        self.net = _mlp(in_dim, hidden, n_windows, arch == "deep_mlp")
        self.scale = float(scale)

    def forward(self, sib_diff: torch.Tensor) -> torch.Tensor:
        return self.net(sib_diff).float() * self.scale


@contextlib.contextmanager
def _rng_preserved():
    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


@dataclass
class RoutingNetworks:
    controller: Controller
    joint: JointSiblingScorer | None
    sibling_bias: SiblingBias | None


def make_networks(
    *,
    input_mode: str,
    n_windows: int,
    control_dim: int,
    arch: str,
    logit_scale: float,
    pairwise_mode: str,
    joint_hidden_dim: int,
    joint_output_scale: float,
    pairwise_bias_scale: float,
    rng_reference_dim: int,
) -> RoutingNetworks:
    """Create the networks with the RNG bookkeeping of §7.4.

    A controller of the reference shape (base input, mlp, hidden = rng_reference_dim) draws from the
    global stream normally. Any other shape is created with the RNG state saved and restored, then
    a throw-away reference-shaped controller consumes exactly the reference's draws, so backbones of
    different controller variants are bit-identical for one seed. The joint scorer and the
    sibling-bias MLP never consume draws.
    """
    in_dim = INPUT_DIMS[input_mode]
    hidden = max(4, int(control_dim))
    reference_shape = input_mode == "base" and arch == "mlp" and hidden == int(rng_reference_dim)
    if reference_shape:
        controller = Controller(in_dim, n_windows, hidden, arch, logit_scale)
    else:
        with _rng_preserved():
            controller = Controller(in_dim, n_windows, hidden, arch, logit_scale)
        Controller(FEATURE_DIM, n_windows, int(rng_reference_dim), "mlp")  # consumes the reference draws
    joint = bias = None
    if pairwise_mode == "joint_sibling":
        jh = max(4, int(joint_hidden_dim)) if joint_hidden_dim > 0 else hidden
        with _rng_preserved():
            joint = JointSiblingScorer(in_dim, n_windows, jh, joint_output_scale)
    elif pairwise_mode == "sibling_bias":
        with _rng_preserved():
            bias = SiblingBias(in_dim, n_windows, hidden, arch, pairwise_bias_scale)
    return RoutingNetworks(controller, joint, bias)


# ----------------------------------------------------------------------------- pairing and scoring
def sibling_pairs(n: int, parent: Sequence[int] | None) -> list[tuple[int, int]]:
    """Pairs scored jointly at one level (§7.2).

    Top level (``parent`` None): (0,1), (2,3), ...; below: per parent in ascending order, its
    children in ascending order paired consecutively. Odd leftovers stay unpaired.
    """
    if parent is None:
        return [(i, i + 1) for i in range(0, n - 1, 2)]
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        children.setdefault(int(p), []).append(i)
    pairs = []
    for p in sorted(children):
        kids = sorted(children[p])
        pairs.extend((kids[j], kids[j + 1]) for j in range(0, len(kids) - 1, 2))
    return pairs


@dataclass
class LevelScores:
    base_logits: torch.Tensor  # (n, K) controller logits
    logits: torch.Tensor  # (n, K) after the pairwise term
    paired: list[bool]
    pairs: list[tuple[int, int]]
    pairwise_delta: torch.Tensor | None = None  # (n, K) joint rows minus base, or the sibling bias


def score_level(
    nets: RoutingNetworks,
    x: torch.Tensor,
    parent: Sequence[int] | None,
    pairwise_mode: str,
    *,
    allow_pairwise: bool = True,
    float32: bool = False,
) -> LevelScores:
    """Base logits, then the sibling bias (added) or the joint scorer (replacing paired rows)."""
    ctx = torch.autocast(device_type=x.device.type, enabled=False) if float32 else contextlib.nullcontext()
    with ctx:
        weight_dtype = nets.controller.net[0].weight.dtype
        x = x.float() if float32 else x.to(weight_dtype)
        if float32 and weight_dtype != torch.float32:
            raise ConfigError(
                "controller_float32 needs float32 controller weights; keep the routing networks in float32"
            )
        base = nets.controller(x)
        n = x.shape[0]
        logits = base
        paired = [False] * n
        pairs: list[tuple[int, int]] = []
        delta = None
        if allow_pairwise and pairwise_mode == "joint_sibling" and nets.joint is not None:
            pairs = sibling_pairs(n, parent)
            if pairs:
                a = torch.as_tensor([p[0] for p in pairs], dtype=torch.long, device=x.device)
                b = torch.as_tensor([p[1] for p in pairs], dtype=torch.long, device=x.device)
                rows = nets.joint(x.index_select(0, a), x.index_select(0, b))  # (P, 2, K)
                logits = base.clone()
                logits = logits.index_copy(0, a, rows[:, 0]).index_copy(0, b, rows[:, 1])
                for i, j in pairs:
                    paired[i] = paired[j] = True
                delta = logits - base
        elif allow_pairwise and pairwise_mode == "sibling_bias" and nets.sibling_bias is not None:
            delta = nets.sibling_bias(sibling_difference(x, parent))
            logits = base + delta
    return LevelScores(base, logits, paired, pairs, delta)
