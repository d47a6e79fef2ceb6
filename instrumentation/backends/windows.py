"""Window bookkeeping shared by the backends: validation, head buckets, pair counts."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aah_viz.coverage import acr, causal_coverage  # noqa: F401 - the one ACR / coverage formula
from aah_viz.errors import ConfigError


def normalise_windows(windows, n_heads: int) -> list[int]:
    """Return the per-head windows as a list of Python ints (a tensor or sequence is accepted)."""
    if isinstance(windows, torch.Tensor):
        values = [int(w) for w in windows.reshape(-1).tolist()]
    else:
        values = [int(w) for w in windows]
    if len(values) != n_heads:
        raise ConfigError(
            f"attention windows: got {len(values)} windows for {n_heads} heads; "
            "pass exactly one window (in tokens) per head"
        )
    return values


def clamp_window(window: int, seq_len: int) -> int:
    """The window the kernel executes: W = max(1, min(W_h, T)) (method section 10.1)."""
    return max(1, min(int(window), int(seq_len)))


def bucket_heads(windows: Sequence[int], key=lambda w: w) -> list[tuple[int, list[int]]]:
    """Group heads by ``key(window)``.

    Buckets are ordered by the first head that uses each key; heads ascend inside a bucket
    (method section 10.1). Returns ``[(key_value, [head, ...]), ...]``.
    """
    order: list[int] = []
    members: dict[int, list[int]] = {}
    for head, window in enumerate(windows):
        k = key(window)
        if k not in members:
            members[k] = []
            order.append(k)
        members[k].append(head)
    return [(k, members[k]) for k in order]


def causal_pairs(seq_len: int) -> int:
    """Score elements of full causal attention for one head: T(T+1)/2."""
    return seq_len * (seq_len + 1) // 2


def band_pairs(seq_len: int, window: int, sinks: int = 0) -> int:
    """Causal pairs one head with window W attends: sum_t min(t+1, W), plus, with ``sinks`` k, the pairs
    of the first k positions left of each band (sum over t >= W of min(k, t - W + 1))."""
    w = clamp_window(window, seq_len)
    # rows 0..w-1 contribute t+1, the remaining T-w rows contribute w each
    pairs = w * (w + 1) // 2 + (seq_len - w) * w
    n, k = seq_len - w, max(0, int(sinks))
    low = min(n, k)
    return pairs + low * (low + 1) // 2 + (n - low) * k


def sink_visible(seq_len: int, window: int, sinks: int) -> int:
    """How many sink positions lie left of some query's band: keys [0, this) are the sink part (0: none)."""
    w = clamp_window(window, seq_len)
    return 0 if w >= seq_len else min(max(0, int(sinks)), seq_len - w)
