"""How far each head looks: the share of its attention at each token distance.

Part of a head's probe profile (with its relation scores and its coreference accuracy by
distance), and what separates positional heads (most mass at distance 1) from broad ones. Rows
are token rows of the model's inputs, each counted once (in the chunk that scores it); mass on
the model's special tokens is not part of the input's attention here, so each head's profile is
normalised to the attention it gives the text's tokens.
"""

from __future__ import annotations

import numpy as np

DISTANCE_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)  # lower edges of |query - key| buckets, last open


def distance_labels() -> list[str]:
    labels = []
    for i, lo in enumerate(DISTANCE_EDGES):
        hi = DISTANCE_EDGES[i + 1] - 1 if i + 1 < len(DISTANCE_EDGES) else None
        labels.append(f"{lo}+" if hi is None else (str(lo) if hi == lo else f"{lo}-{hi}"))
    return labels


class DistanceProfile:
    """Accumulates per head the attention mass per distance bucket and the mass on later tokens."""

    def __init__(self, n_heads: int):
        self.mass = np.zeros((n_heads, len(DISTANCE_EDGES)))
        self.forward = np.zeros(n_heads)
        self.rows = 0

    def add(self, attention: np.ndarray, row_lo: int, row_hi: int) -> None:
        """``attention`` (n_heads, n, n) of one input; rows ``row_lo:row_hi`` are counted."""
        n = attention.shape[-1]
        if row_hi <= row_lo:
            return
        i = np.arange(row_lo, row_hi)[:, None]
        j = np.arange(n)[None, :]
        bucket = (np.searchsorted(DISTANCE_EDGES, np.abs(i - j), side="right") - 1).ravel()  # (R * n,)
        # sums over the entries of each bucket (gathered in bucket order), not a product with a
        # (R * n, buckets) indicator matrix: the probe's time is the model's, not this bookkeeping's
        order = np.argsort(bucket, kind="stable")
        ordered = bucket[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        flat = attention[:, row_lo:row_hi, :].reshape(attention.shape[0], -1)
        self.mass[:, ordered[starts]] += np.add.reduceat(flat[:, order], starts, axis=1, dtype=np.float64)
        self.forward += flat[:, np.broadcast_to(j > i, (row_hi - row_lo, n)).ravel()].sum(axis=1, dtype=np.float64)
        self.rows += row_hi - row_lo

    def shares(self) -> tuple[np.ndarray, np.ndarray]:
        """(n_heads, buckets) share of each head's attention per bucket; (n_heads,) share on later tokens."""
        total = self.mass.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        return self.mass / safe[:, None], self.forward / safe

    def head_rows(self, step: int, n_head: int, windows: np.ndarray) -> list[dict]:
        """probe_heads rows (probe ``distance``): ``mass:BUCKET`` per distance bucket and ``forward``."""
        if self.rows == 0:
            return []
        shares, forward = self.shares()
        labels = distance_labels()
        rows = []
        for flat in range(shares.shape[0]):
            layer, head = divmod(flat, n_head)
            base = {
                "step": step,
                "layer": layer,
                "head": head,
                "probe": "distance",
                "window": int(windows[layer, head]),
            }
            rows += [dict(base, metric=f"mass:{label}", value=float(v)) for label, v in zip(labels, shares[flat])]
            rows.append(dict(base, metric="forward", value=float(forward[flat])))
        return rows


NEEDED_SHARE = 0.9


def needed_windows(probe_heads, n_layer: int, n_head: int, share: float = NEEDED_SHARE) -> np.ndarray:
    """(n_layer, n_head) the smallest window (in tokens, a bucket edge) that holds ``share`` of each
    head's attention, from its ``distance`` rows at the newest probed step.

    A window w holds distances 0 .. w-1, so a head whose attention is 90 % within distance 3
    needs a window of 4. ``inf``: the share is only reached in the open last bucket; ``nan``: no
    distance rows for the head.
    """
    out = np.full((n_layer, n_head), np.nan)
    rows = probe_heads[probe_heads["probe"] == "distance"]
    if rows.empty:
        return out
    rows = rows[rows["step"] == rows["step"].max()]
    columns = [f"mass:{label}" for label in distance_labels()]
    wide = rows.pivot_table(index=["layer", "head"], columns="metric", values="value").reindex(columns=columns)
    mass = np.nan_to_num(wide.to_numpy(dtype=np.float64))
    cumulative = np.cumsum(mass, axis=1)
    reached = np.argmax(cumulative >= share - 1e-9, axis=1)
    upper = np.array(DISTANCE_EDGES[1:] + (np.inf,), dtype=np.float64)
    windows = np.where(cumulative[:, -1] >= share - 1e-9, upper[reached], np.nan)
    layer = wide.index.get_level_values("layer").to_numpy(dtype=int)
    head = wide.index.get_level_values("head").to_numpy(dtype=int)
    ok = (layer >= 0) & (layer < n_layer) & (head >= 0) & (head < n_head)
    out[layer[ok], head[ok]] = windows[ok]
    return out
