"""Routing stability between consecutive routing updates.

Input is the ``heads`` table restricted to routing-update steps (see
:func:`aah_viz.analysis.queries.heads_at_updates`): columns ``step, layer, head, window_idx`` and the
``group_l{i}`` columns. Everything is computed per layer over consecutive updates, batched with
numpy (a paper-shaped run has ~2,000 updates x 24 layers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.analysis.partitions import compare_rows

UPDATE_COLUMNS = [
    "layer",
    "step",
    "prev_step",
    "ari",
    "group_switch_share",
    "window_switch_share",
    "topology_changed",
    "n_groups",
    "n_levels",
]
# per (layer, head) over the updates: head_switch_stats and head_stats_from_counts
HEAD_STATS_COLUMNS = [
    "layer", "head", "updates", "window_switches", "switch_rate", "mean_dwell_steps", "flip_flops", "group_switches",
]  # fmt: skip


def group_columns(frame: pd.DataFrame) -> list[str]:
    """The ``group_l{i}`` columns of a frame, in level order."""
    cols = [c for c in frame.columns if c.startswith("group_l") and c[7:].isdigit()]
    return sorted(cols, key=lambda c: int(c[7:]))


class Matrices:
    """Head rows reshaped to one row per (layer, update): window indices and group labels per level."""

    def __init__(self, heads: pd.DataFrame, n_head: int):
        self.n_head = n_head
        gcols = group_columns(heads)
        layer = heads["layer"].to_numpy().astype(np.int64)
        step = heads["step"].to_numpy().astype(np.int64)
        head = heads["head"].to_numpy().astype(np.int64)

        def col(name: str, fill: int) -> np.ndarray:
            return np.nan_to_num(heads[name].to_numpy(dtype=np.float64), nan=fill).astype(np.int16)

        n = len(heads)
        blocks = n // n_head if n_head else 0
        complete = n_head > 0 and n == blocks * n_head and blocks > 0
        if complete:  # the usual case: rows come in full (step, layer) blocks of heads 0..H-1
            hb, lb, sb = head.reshape(blocks, n_head), layer.reshape(blocks, n_head), step.reshape(blocks, n_head)
            complete = bool((hb == np.arange(n_head)).all() and (lb == lb[:, :1]).all() and (sb == sb[:, :1]).all())
        if complete:
            order = np.lexsort((sb[:, 0], lb[:, 0]))
            self.layer, self.step = lb[order, 0], sb[order, 0]
            self.windows = col("window_idx", -2).reshape(blocks, n_head)[order]
            self.groups = [col(c, -1).reshape(blocks, n_head)[order] for c in gcols]
        else:  # rows missing or out of order (a run cut mid-flush): scatter into place
            order = np.lexsort((head, step, layer))
            layer_s, step_s, head_s = layer[order], step[order], head[order]
            new_key = np.ones(n, dtype=bool)
            new_key[1:] = (layer_s[1:] != layer_s[:-1]) | (step_s[1:] != step_s[:-1])
            row = np.cumsum(new_key) - 1
            m = int(row[-1]) + 1 if n else 0
            self.layer, self.step = layer_s[new_key], step_s[new_key]
            ok = (head_s >= 0) & (head_s < n_head)

            def mat(values: np.ndarray, fill: int) -> np.ndarray:
                out = np.full((m, n_head), fill, dtype=np.int16)
                out[row[ok], head_s[ok]] = values[order][ok]
                return out

            self.windows = mat(col("window_idx", -2), -2)
            self.groups = [mat(col(c, -1), -1) for c in gcols]
        # a level exists for a (layer, update) when any head has a group id there
        self.present = [(g >= 0).any(axis=1) for g in self.groups]

    @classmethod
    def from_arrays(cls, layer, step, windows, groups, n_head: int) -> Matrices:
        """Matrices from arrays already in (layer, step) order (one row per layer and update)."""
        self = cls.__new__(cls)
        self.n_head = n_head
        self.layer = np.asarray(layer, dtype=np.int64)
        self.step = np.asarray(step, dtype=np.int64)
        self.windows = np.asarray(windows, dtype=np.int16).reshape(len(self.layer), n_head)
        self.groups = [np.asarray(g, dtype=np.int16).reshape(len(self.layer), n_head) for g in groups]
        self.present = [(g >= 0).any(axis=1) for g in self.groups]
        return self

    def rows(self, index) -> Matrices:
        """A subset of rows (kept in the given order)."""
        index = np.asarray(index, dtype=np.int64)
        return Matrices.from_arrays(
            self.layer[index], self.step[index], self.windows[index], [g[index] for g in self.groups], self.n_head
        )

    def __len__(self) -> int:
        return len(self.layer)


def update_frame(heads: pd.DataFrame, n_head: int, mats: Matrices | None = None) -> pd.DataFrame:
    """One row per (layer, routing update) comparing it with the layer's previous update.

    ``ari``: adjusted Rand index of the level-0 partitions (1 = same partition up to relabelling);
    ``group_switch_share``: heads whose set of level-0 group-mates changed / all heads;
    ``window_switch_share``: heads whose executed window changed / all heads;
    ``topology_changed``: the partition at any level, or the number of levels, changed.
    The first update of each layer has no predecessor: its comparison columns are NaN.
    """
    if mats is None and (heads is None or heads.empty):
        return pd.DataFrame(columns=UPDATE_COLUMNS)
    mats = mats if mats is not None else Matrices(heads, n_head)
    if len(mats) == 0:
        return pd.DataFrame(columns=UPDATE_COLUMNS)
    layer, step, m = mats.layer, mats.step, len(mats)
    has_prev = np.zeros(m, dtype=bool)
    has_prev[1:] = layer[1:] == layer[:-1]
    cur = np.flatnonzero(has_prev)
    prev = cur - 1
    out = pd.DataFrame({"layer": layer, "step": step})
    prev_step = np.full(m, np.nan)
    prev_step[cur] = step[prev]
    out["prev_step"] = prev_step
    ari = np.full(m, np.nan)
    gshare = np.full(m, np.nan)
    wshare = np.full(m, np.nan)
    topo = pd.array([pd.NA] * m, dtype="boolean")
    n_levels = np.sum(np.stack(mats.present, axis=1), axis=1) if mats.present else np.zeros(m, dtype=int)
    n_groups = _count_groups(mats.groups[0]) if mats.groups else np.zeros(m, dtype=int)
    if len(cur):
        wshare[cur] = (mats.windows[prev] != mats.windows[cur]).mean(axis=1)
        if mats.groups:
            changed = n_levels[cur] != n_levels[prev]
            for level, g in enumerate(mats.groups):
                level_ari, moved = compare_rows(g[prev], g[cur])
                if level == 0:
                    ari[cur] = level_ari
                    gshare[cur] = moved.mean(axis=1)
                changed |= moved.any(axis=1)
            topo[cur] = changed
    out["ari"] = ari
    out["group_switch_share"] = gshare
    out["window_switch_share"] = wshare
    out["topology_changed"] = topo
    out["n_groups"] = n_groups
    out["n_levels"] = n_levels
    return out[UPDATE_COLUMNS]


def _count_groups(labels: np.ndarray) -> np.ndarray:
    s = np.sort(labels, axis=1)
    distinct = np.ones_like(s, dtype=bool)
    distinct[:, 1:] = s[:, 1:] != s[:, :-1]
    distinct &= s >= 0
    return distinct.sum(axis=1)


def layer_summary(updates: pd.DataFrame) -> pd.DataFrame:
    """Per layer: updates, mean ARI, mean shares switching, topology changes (count)."""
    if updates.empty:
        return pd.DataFrame(
            columns=["layer", "updates", "mean_ari", "group_switch_share", "window_switch_share", "topology_changes"]
        )
    g = updates.groupby("layer")
    return pd.DataFrame(
        {
            "updates": g.size(),
            "mean_ari": g["ari"].mean(),
            "group_switch_share": g["group_switch_share"].mean(),
            "window_switch_share": g["window_switch_share"].mean(),
            "topology_changes": g["topology_changed"].sum().astype(int),
        }
    ).reset_index()


def head_switch_stats(heads: pd.DataFrame, n_head: int, mats: Matrices | None = None) -> pd.DataFrame:
    """Per (layer, head) over the routing updates given.

    ``window_switches``: updates at which the executed window changed; ``switch_rate``: switches /
    comparisons (updates - 1); ``mean_dwell_steps``: training steps spanned / (switches + 1), i.e.
    the mean time a window was kept (the first and last spells are cut by the record);
    ``flip_flops``: A -> B -> A patterns over three consecutive updates; ``group_switches``: updates
    at which the head's set of level-0 group-mates changed.
    """
    if heads.empty:
        return pd.DataFrame(columns=HEAD_STATS_COLUMNS)
    mats = mats if mats is not None else Matrices(heads, n_head)
    rows = []
    boundaries = np.flatnonzero(np.diff(mats.layer)) + 1
    for idx in np.split(np.arange(len(mats)), boundaries):
        layer = int(mats.layer[idx[0]])
        w = mats.windows[idx]
        steps = mats.step[idx]
        n_up = len(idx)
        switches = (w[1:] != w[:-1]).sum(axis=0) if n_up > 1 else np.zeros(n_head, dtype=int)
        flips = ((w[2:] == w[:-2]) & (w[1:-1] != w[2:])).sum(axis=0) if n_up > 2 else np.zeros(n_head, dtype=int)
        if mats.groups and n_up > 1:
            g = mats.groups[0][idx]
            gsw = compare_rows(g[:-1], g[1:])[1].sum(axis=0)
        else:
            gsw = np.zeros(n_head, dtype=int)
        span = float(steps[-1] - steps[0]) if n_up else 0.0
        rows.append(
            pd.DataFrame(
                {
                    "layer": layer,
                    "head": np.arange(n_head),
                    "updates": n_up,
                    "window_switches": switches,
                    "switch_rate": switches / (n_up - 1) if n_up > 1 else np.full(n_head, np.nan),
                    "mean_dwell_steps": span / (switches + 1),
                    "flip_flops": flips,
                    "group_switches": gsw,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)[HEAD_STATS_COLUMNS]


# ---- per-update summaries: what the run writer stores so that no figure scans every head row -----

SUMMARY_LISTS = ["window_idx", "window_switched", "group_switched", "flipped"]
SUMMARY_COLUMNS = UPDATE_COLUMNS + SUMMARY_LISTS


def _heads_where(mask: np.ndarray) -> list[np.ndarray]:
    return [np.flatnonzero(row).astype(np.int16) for row in mask]


def summarize_updates(mats: Matrices, carry: Matrices | None = None) -> tuple[pd.DataFrame, Matrices]:
    """One summary row per (layer, routing update) of ``mats``, each compared with the layer's
    previous update (taken from ``carry``, the last two updates per layer seen before, when the
    previous update is not in ``mats``).

    Columns: :data:`UPDATE_COLUMNS` (exactly :func:`update_frame`'s values) plus the update's
    window index per head (``window_idx``) and the heads whose window changed
    (``window_switched``), whose level-0 group-mates changed (``group_switched``) and that went
    back to the window of two updates ago (``flipped``). Returns the rows and the new carry.
    """
    n_head = mats.n_head
    if carry is not None and len(carry):
        both = Matrices.from_arrays(
            np.concatenate([carry.layer, mats.layer]),
            np.concatenate([carry.step, mats.step]),
            np.concatenate([carry.windows, mats.windows]),
            [np.concatenate([a, b]) for a, b in zip(carry.groups, mats.groups)],
            n_head,
        )
        n_carry = len(carry)
    else:
        both, n_carry = mats, 0
    order = np.lexsort((both.step, both.layer))  # carry rows are earlier steps of the same layers
    both = both.rows(order)
    fresh = order >= n_carry
    frame = update_frame(None, n_head, both)
    m = len(both)
    same1 = np.zeros(m, dtype=bool)
    same1[1:] = both.layer[1:] == both.layer[:-1]
    same2 = np.zeros(m, dtype=bool)
    same2[2:] = (both.layer[2:] == both.layer[:-2]) & same1[2:]
    empty = np.zeros((m, n_head), dtype=bool)
    w_changed, g_changed, flipped = empty.copy(), empty.copy(), empty.copy()
    cur = np.flatnonzero(same1)
    if len(cur):
        w_changed[cur] = both.windows[cur - 1] != both.windows[cur]
        if both.groups:
            g_changed[cur] = compare_rows(both.groups[0][cur - 1], both.groups[0][cur])[1]
    cur2 = np.flatnonzero(same2)
    if len(cur2):
        flipped[cur2] = (both.windows[cur2] == both.windows[cur2 - 2]) & (both.windows[cur2 - 1] != both.windows[cur2])
    frame["window_idx"] = list(both.windows.astype(np.int8))
    frame["window_switched"] = _heads_where(w_changed)
    frame["group_switched"] = _heads_where(g_changed)
    frame["flipped"] = _heads_where(flipped)
    out = frame[fresh].reset_index(drop=True)
    # the new carry: the last two updates of every layer
    last = np.ones(m, dtype=bool)
    last[:-1] = both.layer[:-1] != both.layer[1:]
    keep = last.copy()
    keep[:-1] |= last[1:] & (both.layer[:-1] == both.layer[1:])
    return out[SUMMARY_COLUMNS], both.rows(np.flatnonzero(keep))


def head_stats_from_counts(
    updates: pd.DataFrame, switches: np.ndarray, flips: np.ndarray, group_switches: np.ndarray
) -> pd.DataFrame:
    """:func:`head_switch_stats` from per-update summaries: ``updates`` (one row per layer and
    update) and (n_layer, n_head) counts of window switches, flip-flops and group switches."""
    if updates.empty:
        return pd.DataFrame(columns=HEAD_STATS_COLUMNS)
    n_head = switches.shape[1]
    g = updates.groupby("layer", sort=True)["step"]
    rows = []
    for layer, n_up, lo, hi in zip(g.size().index, g.size().to_numpy(), g.min().to_numpy(), g.max().to_numpy()):
        sw = switches[int(layer)]
        rows.append(
            pd.DataFrame(
                {
                    "layer": int(layer),
                    "head": np.arange(n_head),
                    "updates": int(n_up),
                    "window_switches": sw,
                    "switch_rate": sw / (n_up - 1) if n_up > 1 else np.full(n_head, np.nan),
                    "mean_dwell_steps": float(hi - lo) / (sw + 1),
                    "flip_flops": flips[int(layer)],
                    "group_switches": group_switches[int(layer)],
                }
            )
        )
    return pd.concat(rows, ignore_index=True)[HEAD_STATS_COLUMNS]
