"""The tables of a synthetic run, built with vectorised numpy from its ``Simulation``: the per-step
ones (heads, branch) a chunk of steps at a time, tree and cluster validity per chunk of rebuilds, and
the whole run's scalars and events."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from aah_viz.coverage import band_pairs, effective_windows
from aah_viz.method import SIM_THRESHOLD
from aah_viz.runlog.columns import rows_to_arrow
from aah_viz.runlog.paths import checkpoint_path
from aah_viz.samples.simulation import Simulation, step_arrays

FEATURE_DIM = 9


def heads_table(sim: Simulation, start: int, stop: int) -> pa.Table:
    L, H, max_depth = sim.shape.n_layer, sim.shape.n_head, sim.shape.max_depth
    S = stop - start
    n = S * L * H
    b_of_step, idx, raw, win = step_arrays(sim, start, stop)
    cols = {
        "step": pa.array(np.repeat(np.arange(start, stop, dtype=np.int64), L * H)),
        "layer": pa.array(np.tile(np.repeat(np.arange(L, dtype=np.int16), H), S)),
        "head": pa.array(np.tile(np.arange(H, dtype=np.int16), S * L)),
        "window_idx": pa.array(idx.reshape(n).astype(np.int8)),
        "window": pa.array(win.reshape(n).astype(np.int32)),
    }
    raw = raw.reshape(n)
    cols["raw_idx"] = pa.array(raw.astype(np.int8), mask=raw < 0)
    g0 = sim.partitions.g0[b_of_step]  # (S, L, H)
    levels = sim.partitions.levels[b_of_step][..., None]
    for level in range(max_depth):
        group = (g0 >> level).reshape(n).astype(np.int16)
        missing = np.broadcast_to(level >= levels, g0.shape).reshape(n)
        if not sim.routed:
            missing = np.ones(n, dtype=bool)
        cols[f"group_l{level}"] = pa.array(group, mask=missing)
    return pa.table(cols)


def _list_array(values: np.ndarray, offsets: np.ndarray, typ) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=typ))


def tree_table(rng, sim: Simulation, with_features: bool, b_lo: int, b_hi: int) -> pa.Table:
    """The rebuilds b_lo..b_hi: one row per (build, layer, level, node)."""
    parts, choices = sim.partitions, sim.choices
    valid, K, D = parts.valid[b_lo:b_hi], sim.shape.n_windows, sim.shape.depth
    bi, li, lev, node = np.nonzero(valid)  # rows in (build, layer, level, node) order, bi within the chunk
    n_rows = len(bi)
    row_id = np.full(valid.shape, -1, dtype=np.int64)
    row_id[valid] = np.arange(n_rows)
    levels = parts.levels[b_lo:b_hi]
    # members: heads whose level-l group is the node; children: level 0 -> heads, else nodes below
    B, L = levels.shape
    g = parts.g0[b_lo:b_hi, :, None, :].astype(np.int64) >> np.arange(D)[None, None, :, None]  # (B, L, D, H)
    in_use = np.arange(D)[None, None, :, None] < levels[..., None, None]
    eb, el, ed, eh = np.nonzero(np.broadcast_to(in_use, g.shape))
    member_row = row_id[eb, el, ed, g[eb, el, ed, eh]]
    order = np.argsort(member_row, kind="stable")  # heads are enumerated ascending within each row
    member_values = eh[order].astype(np.int32)
    member_offsets = np.concatenate([[0], np.cumsum(np.bincount(member_row, minlength=n_rows))])
    upper = lev > 0
    n_below = np.where(upper, parts.n_nodes[b_lo + bi, li, np.maximum(lev - 1, 0)], 0)
    first, second = 2 * node, 2 * node + 1
    child_rows = np.concatenate([member_row[ed == 0], np.nonzero(upper)[0], np.nonzero(upper & (second < n_below))[0]])
    child_vals = np.concatenate([eh[ed == 0], first[upper], second[upper & (second < n_below)]])
    order = np.argsort(child_rows, kind="stable")  # heads ascending, then first before second child
    child_values = child_vals[order].astype(np.int32)
    child_offsets = np.concatenate([[0], np.cumsum(np.bincount(child_rows, minlength=n_rows))])
    base_all, final_all = sim.logits.between(b_lo, b_hi)
    final_logits = final_all[bi, li, lev, node]  # (R, K)
    base = base_all[bi, li, lev, node]
    del base_all, final_all
    top2 = np.sort(final_logits, axis=-1)[:, -2:] if K > 1 else np.concatenate([final_logits, final_logits], 1)
    has_parent = lev + 1 < levels[bi, li]
    forced = (lev == 0) & (rng.random_sample(n_rows) < 0.05)
    sim_mean = rng.uniform(0.2, 0.9, n_rows)
    sim_std = rng.uniform(0.01, 0.2, n_rows)
    log_off = np.arange(n_rows + 1) * K
    feat_dim = FEATURE_DIM if with_features else 0
    features = rng.normal(0.0, 1.0, n_rows * feat_dim).astype(np.float32)
    cols = {
        "step": pa.array(sim.build_step[b_lo + bi].astype(np.int64)),
        "layer": pa.array(li.astype(np.int16)),
        "level": pa.array(lev.astype(np.int8)),
        "node": pa.array(node.astype(np.int16)),
        "parent": pa.array((node >> 1).astype(np.int16), mask=~has_parent),
        "members": _list_array(member_values, member_offsets, pa.int32()),
        "children": _list_array(child_values, child_offsets, pa.int32()),
        "logits": _list_array(final_logits.reshape(-1), log_off, pa.float32()),
        "base_logits": _list_array(base.reshape(-1), log_off, pa.float32()),
        "margin": pa.array((top2[:, 1] - top2[:, 0]).astype(np.float32)),
        "raw_idx": pa.array(choices.raw[b_lo + bi, li, lev, node].astype(np.int8)),
        "final_idx": pa.array(choices.final[b_lo + bi, li, lev, node].astype(np.int8)),
        "joint_paired": pa.array(parts.paired[b_lo + bi, li, lev, node]),
        "joint_delta": pa.array(np.linalg.norm(sim.logits.delta[b_lo + bi, li, lev, node], axis=-1).astype(np.float32)),
        "shadow": pa.array(sim.shadow[b_lo + bi]),
        "origin": pa.array(np.where(forced, "forced_bipartition", "natural")),
        "forced_split": pa.array(forced),
        "merged": pa.array(np.where(lev == 0, rng.randint(0, 2, n_rows), 0).astype(np.int16)),
        "sim_mean": pa.array(sim_mean.astype(np.float32)),
        "sim_std": pa.array(sim_std.astype(np.float32)),
        "sim_min": pa.array(np.maximum(-1.0, sim_mean - 2.5 * sim_std).astype(np.float32)),
        "sim_max": pa.array(np.minimum(1.0, sim_mean + 2.5 * sim_std).astype(np.float32)),
        "features": _list_array(features, np.arange(n_rows + 1) * feat_dim, pa.float32()),
    }
    return pa.table(cols)


def validity_table(rng, tree: pa.Table, n_head: int) -> pa.Table:
    """One validity row per level-0 partition of the chunk's tree, with drawn silhouettes and nulls."""
    cols = ["step", "layer", "level", "origin", "shadow", "sim_min", "sim_mean", "sim_max"]
    level0 = tree.select(cols).to_pandas()
    level0 = level0[level0["level"] == 0]
    part = level0.groupby(["step", "layer"], sort=True).agg(
        origin=("origin", "first"),
        shadow=("shadow", "first"),
        sim_min=("sim_min", "first"),
        sim_median=("sim_mean", "first"),
        sim_max=("sim_max", "first"),
        n_groups=("level", "size"),
    )
    n = len(part)
    null_p95 = rng.uniform(0.05, 0.3, n)
    refit_p95 = null_p95 + rng.uniform(0.0, 0.2, n)
    silhouette = rng.uniform(0.0, 0.6, n)
    defined = (part["n_groups"] >= 2) & (part["n_groups"] < n_head)
    real = silhouette > np.maximum(null_p95, refit_p95)
    part["n_heads"] = n_head
    part["threshold"] = SIM_THRESHOLD
    part["silhouette"] = np.where(defined, silhouette, np.nan)
    for name, p95 in (("null", null_p95), ("refit", refit_p95)):
        part[f"{name}_mean"] = np.where(defined, p95 - 0.05, np.nan)
        part[f"{name}_p95"] = np.where(defined, p95, np.nan)
        part[f"{name}_p_value"] = np.where(defined, np.where(silhouette > p95, 0.01, 0.5), np.nan)
    part["verdict"] = np.where(defined, np.where(real, "real", "chance"), "undefined")
    return rows_to_arrow("cluster_validity", part.reset_index())


def branch_table(sim: Simulation, start: int, stop: int) -> pa.Table:
    L, K, H, windows = sim.shape.n_layer, sim.shape.n_windows, sim.shape.n_head, sim.shape.windows
    S = stop - start
    _, idx, _, _ = step_arrays(sim, start, stop)
    counts = np.zeros((S, L, K), dtype=np.int64)
    for k in range(K):
        counts[:, :, k] = (idx == k).sum(axis=-1)
    n = S * L * K
    return pa.table(
        {
            "step": pa.array(np.repeat(np.arange(start, stop, dtype=np.int64), L * K)),
            "layer": pa.array(np.tile(np.repeat(np.arange(L, dtype=np.int16), K), S)),
            "window": pa.array(np.tile(np.asarray(windows, dtype=np.int32), S * L)),
            "fraction": pa.array((counts.reshape(n) / H).astype(np.float32)),
        }
    )


def _coverage_per_layer(sim: Simulation) -> tuple[np.ndarray, np.ndarray]:
    """(S, L) ACR and causal-pair coverage, computed a chunk of steps at a time."""
    S, L, H = sim.shape.steps, sim.shape.n_layer, sim.shape.n_head
    T, w_min = sim.shape.seq_len, sim.shape.w_min
    acr = np.empty((S, L))
    pairs = np.empty((S, L))
    for start in range(0, S, 2000):
        stop = min(S, start + 2000)
        win = step_arrays(sim, start, stop)[3]
        acr[start:stop] = effective_windows(win, T, w_min).sum(axis=-1) / (H * T)
        pairs[start:stop] = band_pairs(T, win).sum(axis=-1) / (H * T * (T + 1) / 2)  # raw windows
    return acr, pairs


def scalars_table(rng, sim: Simulation, eval_interval: int) -> pa.Table:
    S, L, warmup = sim.shape.steps, sim.shape.n_layer, sim.shape.warmup
    layer_acr, pairs = _coverage_per_layer(sim)  # (S, L); raw windows for pairs, as coverage.band_pairs
    s = np.arange(S, dtype=np.float64)
    model = {
        "acr": layer_acr.mean(axis=1),
        "acr_causal": pairs.mean(axis=1),
        "realised_work": np.minimum(1.0, 1.1 * pairs.mean(axis=1)),  # a banded backend: the band plus tile edges
        "loss": 2.2 + 3.3 * np.exp(-s / max(1.0, S / 4)) + rng.normal(0, 0.05, S),
        "lr": np.where(s < warmup, 3e-4 * (s + 1) / max(1, warmup), 3e-4 * 0.5 * (1 + np.cos(np.pi * s / max(1, S)))),
        "tokens_per_s": 20000.0 / (0.4 + 0.6 * layer_acr.mean(axis=1)) * rng.lognormal(0, 0.03, S),
        "step_time_s": rng.lognormal(np.log(0.05), 0.05, S),
        "peak_mem_mb": 900.0 + 5 * rng.random_sample(S),
        "controller_grad_norm": np.where(s < warmup, 0.0, rng.lognormal(np.log(0.02), 0.4, S)),
        "controller_weight_drift": np.sqrt(np.maximum(0.0, s - warmup)) * 1e-3,
    }
    names, values, steps_col, layers_col = [], [], [], []
    for name, series in model.items():
        names.append(np.full(S, name, dtype=object))
        values.append(series)
        steps_col.append(np.arange(S))
        layers_col.append(np.full(S, -1))
    for name, per_layer in (("acr", layer_acr), ("acr_causal", pairs)):
        names.append(np.full(S * L, name, dtype=object))
        values.append(per_layer.reshape(-1))
        steps_col.append(np.repeat(np.arange(S), L))
        layers_col.append(np.tile(np.arange(L), S))
    eval_steps = np.arange(eval_interval - 1, S, eval_interval)
    val_loss = 2.3 + 3.3 * np.exp(-eval_steps / max(1.0, S / 4)) + rng.normal(0, 0.02, len(eval_steps))
    for name, series in (("val_loss", val_loss), ("val_ppl", np.exp(val_loss))):
        names.append(np.full(len(eval_steps), name, dtype=object))
        values.append(series)
        steps_col.append(eval_steps)
        layers_col.append(np.full(len(eval_steps), -1))
    step = np.concatenate(steps_col)
    order = np.argsort(step, kind="stable")
    layer = np.concatenate(layers_col)[order]
    return pa.table(
        {
            "step": pa.array(step[order].astype(np.int64)),
            "layer": pa.array(layer.astype(np.int16), mask=layer < 0),
            "name": pa.array(np.concatenate(names)[order], type=pa.string()),
            "value": pa.array(np.concatenate(values)[order].astype(np.float64)),
        }
    )


def events_table(sim: Simulation, eval_interval: int) -> pa.Table:
    L, steps, warmup = sim.shape.n_layer, sim.shape.steps, sim.shape.warmup
    real = np.nonzero(~sim.shadow)[0]
    n_nodes, levels, part_src = sim.partitions.n_nodes, sim.partitions.levels, sim.partitions.source
    bb, ll = np.repeat(real, L), np.tile(np.arange(L), len(real))
    depth = levels[bb, ll]
    counts = n_nodes[bb, ll].tolist()
    recl = (part_src[bb, ll] == bb).tolist()
    rows_step = sim.build_step[bb].tolist()
    rows_layer = ll.tolist()
    rows_kind = ["routing_update"] * len(bb)
    rows_detail = [  # the recorder's routing_update fields that a synthetic run can know
        f'{{"applied": true, "group_counts": [{", ".join(map(str, c[:d]))}], "n_levels": {d}, '
        f'"reclustered": {"true" if r else "false"}, "shadow": false}}'
        for c, d, r in zip(counts, depth.tolist(), recl)
    ]
    if warmup < steps:
        rows_step.append(int(warmup))
        rows_layer.append(-1)
        rows_kind.append("warmup_end")
        rows_detail.append("{}")
    for s in range(eval_interval - 1, steps, eval_interval):
        rows_step.append(int(s))
        rows_layer.append(-1)
        rows_kind.append("eval")
        rows_detail.append(json.dumps({"split": "val"}))
    if steps:
        rows_step.append(int(steps - 1))
        rows_layer.append(-1)
        rows_kind.append("checkpoint")
        rows_detail.append(json.dumps({"path": checkpoint_path("", steps - 1).as_posix()}))
    step = np.asarray(rows_step, dtype=np.int64)
    order = np.argsort(step, kind="stable")
    layer = np.asarray(rows_layer, dtype=np.int64)[order]
    return pa.table(
        {
            "step": pa.array(step[order]),
            "layer": pa.array(layer.astype(np.int16), mask=layer < 0),
            "kind": pa.array(np.asarray(rows_kind, dtype=object)[order], type=pa.string()),
            "detail": pa.array(np.asarray(rows_detail, dtype=object)[order], type=pa.string()),
        }
    )
