"""The routing a synthetic run pretends to have done, drawn per routing rebuild and layer.

A hierarchy is rebuilt every ``control_interval`` steps (shadow builds during warm-up, when every head
runs the full context): level-0 groups of heads merged in pairs level by level, controller logits per
node with a per-layer window preference, joint scoring of siblings, and the top-down parent constraint
(a child's window index is at most its parent's). Groups and preferences persist between rebuilds and
change with a small probability. Per-step arrays come a chunk of steps at a time (``step_arrays``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BUILD_CHUNK = 2048  # rebuilds drawn or chosen at once: bounds the memory of the per-node arrays


@dataclass(frozen=True)
class RunShape:
    """What the simulated routing depends on: the model's shape, the run's length and routing cadence."""

    n_layer: int
    n_head: int
    steps: int
    windows: tuple[int, ...]
    seq_len: int
    control_interval: int
    warmup: int  # steps before the first applied rebuild (the run's length when nothing is routed)
    max_depth: int
    w_min: int

    @property
    def n_windows(self) -> int:
        return len(self.windows)

    @property
    def depth(self) -> int:
        """Levels simulated: at least one, so an unrouted run still draws the same groups."""
        return max(1, self.max_depth)

    @property
    def n_build(self) -> int:
        return -(-self.steps // self.control_interval)


@dataclass
class Partitions:
    """The hierarchy of every (build, layer): which rebuild's draw it keeps, level-0 group of each head,
    levels in use, nodes per level, and which (level, node) slots exist and have a sibling."""

    source: np.ndarray  # (B, L) index of the build whose partition is kept
    g0: np.ndarray  # (B, L, H) level-0 group of each head
    levels: np.ndarray  # (B, L)
    n_nodes: np.ndarray  # (B, L, D)
    valid: np.ndarray  # (B, L, D, N)
    paired: np.ndarray  # (B, L, D, N)


@dataclass
class Logits:
    """Controller logits: a per-layer preferred window, persistent noise, and the joint scorer's delta."""

    pref: np.ndarray  # (L, K) float32
    noise: np.ndarray  # (B, L, D, N, K) float32
    noise_source: np.ndarray  # (B, L) index of the build whose noise is kept
    delta: np.ndarray  # (B, L, D, N, K) float32, zero where a node has no sibling

    def between(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(base, final) logits of builds lo..hi: (b, L, D, N, K) float32."""
        layers = np.arange(self.pref.shape[0])[None, :]
        base = self.pref[None, :, None, None, :] + self.noise[self.noise_source[lo:hi], layers]
        return base, base + self.delta[lo:hi]


@dataclass
class Choices:
    """Window indices chosen at each rebuild: per node (raw argmax, after the parent constraint) and per head."""

    raw: np.ndarray  # (B, L, D, N) int8
    final: np.ndarray  # (B, L, D, N) int8
    head_final: np.ndarray  # (B, L, H) executed index after the rebuild
    head_raw: np.ndarray  # (B, L, H)


@dataclass
class Simulation:
    shape: RunShape
    routed: bool
    build_step: np.ndarray  # (B,) the step of each rebuild
    shadow: np.ndarray  # (B,) a rebuild during warm-up: recorded, not applied
    warm_index: int  # the window every head runs during warm-up
    partitions: Partitions
    logits: Logits
    choices: Choices


def simulate(rng: np.random.RandomState, shape: RunShape, routed: bool) -> Simulation:
    """Build-level draws (one per routing rebuild and layer), in a fixed order from ``rng``. Unrouted,
    the same draws are made and every head runs the full context (or the largest window)."""
    build_step = np.arange(shape.n_build) * shape.control_interval
    partitions = _draw_partitions(rng, shape)
    logits = _draw_logits(rng, shape, partitions)
    choices = _choose(shape, partitions, logits)
    windows = shape.windows
    if routed:
        shadow = build_step < shape.warmup
    else:
        choices.head_final[:] = windows.index(shape.seq_len) if shape.seq_len in windows else len(windows) - 1
        shadow = np.ones(shape.n_build, dtype=bool)
    warm_index = windows.index(shape.seq_len) if shape.seq_len in windows else 0
    return Simulation(shape, routed, build_step, shadow, warm_index, partitions, logits, choices)


def step_arrays(sim: Simulation, start: int, stop: int):
    """Rebuild of each step, executed index, raw index (-1 off updates) and window of steps start..stop:
    (S,) and three (S, L, H) arrays."""
    shape = sim.shape
    step_ids = np.arange(start, stop)
    b_of_step = step_ids // shape.control_interval
    idx = sim.choices.head_final[b_of_step].astype(np.int64)
    idx[step_ids < shape.warmup] = sim.warm_index
    if sim.routed:
        is_update = (step_ids % shape.control_interval == 0) & (step_ids >= shape.warmup)
        raw_step = np.where(is_update[:, None, None], sim.choices.head_raw[b_of_step], -1)
    else:
        raw_step = np.full(idx.shape, -1, dtype=np.int64)
    win = np.asarray(shape.windows, dtype=np.int64)[idx]
    return b_of_step, idx, raw_step, win


def _persist(rng, n_build: int, n_layer: int, p_change: float) -> np.ndarray:
    """Index of the build whose draw each (build, layer) keeps: draws change with p_change."""
    change = rng.random_sample((n_build, n_layer)) < p_change
    change[0] = True
    marks = np.where(change, np.arange(n_build)[:, None], 0)
    return np.maximum.accumulate(marks, axis=0)


def _take(array: np.ndarray, source: np.ndarray) -> np.ndarray:
    """array[source[b, l], l, ...] for every (b, l)."""
    layers = np.arange(array.shape[1])[None, :]
    return array[source, layers]


def _draw_partitions(rng, shape: RunShape) -> Partitions:
    """Level-0 groups of heads: contiguous chunks of a random permutation, merged in pairs level by level."""
    n_build, L, H, D = shape.n_build, shape.n_layer, shape.n_head, shape.depth
    source = _persist(rng, n_build, L, 0.15)
    n0 = rng.randint(max(1, H // 4), max(1, H // 2) + 1, size=(n_build, L))
    perm = np.argsort(rng.random_sample((n_build, L, H)), axis=-1)
    pos = np.argsort(perm, axis=-1)
    del perm
    levels = rng.randint(max(1, D - 1), D + 1, size=(n_build, L))
    n0, pos, levels = _take(n0, source), _take(pos, source), _take(levels, source)
    g0 = (pos * n0[..., None] // H).astype(np.int16)  # (B, L, H)
    del pos
    n_max = int(n0.max())
    level_ids = np.arange(D)
    n_nodes = ((n0[..., None] - 1) >> level_ids) + 1  # (B, L, D)
    node_ids = np.arange(n_max)
    valid = (level_ids[None, None, :, None] < levels[..., None, None]) & (node_ids < n_nodes[..., None])
    paired = valid & ((node_ids ^ 1) < n_nodes[..., None])
    return Partitions(source, g0, levels, n_nodes, valid, paired)


def _draw_logits(rng, shape: RunShape, partitions: Partitions) -> Logits:
    """A per-layer preferred window plus persistent noise (float32, drawn in slices), and sibling deltas."""
    L, K = shape.n_layer, shape.n_windows
    centre = np.linspace(0.3, K - 1.2, L) if L > 1 else np.array([K / 2])
    pref = (-0.9 * (np.arange(K)[None, :] - centre[:, None]) ** 2).astype(np.float32)  # (L, K)
    noise_source = _persist(rng, shape.n_build, L, 0.3)
    nodes = (shape.n_build, L, shape.depth, partitions.valid.shape[-1], K)
    noise = _draw_f32(rng, 1.0, nodes)
    delta = _draw_f32(rng, 0.25, nodes)
    delta *= partitions.paired[..., None]
    return Logits(pref, noise, noise_source, delta)


def _draw_f32(rng, scale: float, shape: tuple) -> np.ndarray:
    """rng.normal(0, scale, shape) as float32, drawn in slices along the first axis (the same values)."""
    out = np.empty(shape, dtype=np.float32)
    for lo in range(0, shape[0], BUILD_CHUNK):
        hi = min(shape[0], lo + BUILD_CHUNK)
        out[lo:hi] = rng.normal(0.0, scale, size=(hi - lo, *shape[1:]))
    return out


def _choose(shape: RunShape, partitions: Partitions, logits: Logits) -> Choices:
    """Raw argmax and parent-constrained window indices of every node, then of every head (its level-0 node)."""
    raw = np.empty(partitions.valid.shape, dtype=np.int8)
    final = np.empty(partitions.valid.shape, dtype=np.int8)
    for lo in range(0, shape.n_build, BUILD_CHUNK):
        hi = min(shape.n_build, lo + BUILD_CHUNK)
        raw[lo:hi], final[lo:hi] = _constrained(logits, partitions.levels[lo:hi], shape.depth, lo, hi)
    heads_b = np.arange(shape.n_build)[:, None, None]
    heads_l = np.arange(shape.n_layer)[None, :, None]
    g0 = partitions.g0
    head_final = final[heads_b, heads_l, 0, g0].astype(np.int8)
    return Choices(raw, final, head_final, raw[heads_b, heads_l, 0, g0].astype(np.int8))


def _constrained(logits: Logits, levels: np.ndarray, depth: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw argmax and parent-constrained window indices of builds lo..hi."""
    _, final_logits = logits.between(lo, hi)
    raw = final_logits.argmax(axis=-1).astype(np.int8)  # (b, L, D, N)
    final = raw.copy()
    parent_of = np.arange(raw.shape[-1]) >> 1
    for level in range(depth - 2, -1, -1):  # top-down parent constraint (ascending windows: min of indices)
        parent_final = final[:, :, level + 1, :][..., parent_of]
        has_parent = (level + 1 < levels)[..., None]
        final[:, :, level, :] = np.where(has_parent, np.minimum(raw[:, :, level, :], parent_final), raw[:, :, level, :])
    return raw, final
