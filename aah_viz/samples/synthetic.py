"""A plausible, complete, synthetic run written through ``RunWriter`` (no model, no torch).

Used by tests of the other parts and by the dashboard's scale benchmark. Everything is drawn
from ``numpy.random.RandomState(seed)`` and generated with vectorised numpy, so 24 layers x 16
heads x 10,000 steps (3.84M head rows) takes seconds.

The routing it simulates: a hierarchy rebuilt every ``control_interval`` steps (shadow builds
during warm-up, when every head runs the full context), level-0 groups of heads merged in pairs
level by level, controller logits per node with a per-layer window preference, joint scoring of
siblings, and the top-down parent constraint (a child's window index is at most its parent's).
Groups and preferences persist between updates and change with a small probability.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from aah_viz.coverage import band_pairs, effective_windows
from aah_viz.runlog.columns import rows_to_arrow
from aah_viz.runlog.manifest import make_manifest
from aah_viz.runlog.paths import checkpoint_path
from aah_viz.runlog.writer import RunWriter

FEATURE_DIM = 9
SIM_THRESHOLD = 0.72  # the paper's level-0 similarity threshold


def make_synthetic_run(
    run_dir: str | os.PathLike,
    *,
    n_layer: int = 4,
    n_head: int = 12,
    steps: int = 300,
    windows=(32, 64, 128, 256),
    seq_len: int = 256,
    regime: str = "full_adaptive",
    seed: int = 0,
    control_interval: int = 5,
    warmup: int = 20,
    max_depth: int = 4,
    flush_every: int = 50,
    eval_interval: int | None = None,
    w_min: int = 0,
    detail: str = "full",
    status: str = "finished",
    overwrite: bool = False,
) -> Path:
    """Write a synthetic run to ``run_dir`` and return its path.

    ``flush_every`` steps go into one segment per table; ``status`` is what the manifest ends with
    (``"running"`` leaves the writer unclosed, as if the process were still training).
    """
    rng = np.random.RandomState(seed)
    windows = [int(w) for w in windows]
    sim = _simulate(rng, n_layer, n_head, steps, windows, seq_len, control_interval, warmup, max_depth, w_min)
    routed = max_depth > 0 and regime != "full_attention"
    if not routed:  # every head attends the full context; nothing is routed
        sim["build_idx"][:] = windows.index(seq_len) if seq_len in windows else len(windows) - 1
        sim["routed"] = False
        sim["shadow"][:] = True
        warmup = steps
    sim["warmup"] = warmup
    eval_interval = eval_interval or max(1, steps // 10)
    # small whole-run tables first (their draws do not depend on the chunking), then the big ones per chunk
    scalars = _scalars_table(rng, sim, steps, warmup, eval_interval, seq_len, w_min)
    events = _events_table(sim, steps, warmup, eval_interval)
    config = {
        "n_layer": n_layer,
        "n_head": n_head,
        "n_embd": 32 * n_head,
        "vocab_size": 256,
        "seq_len": seq_len,
        "windows": windows,
        "w_min": w_min,
        "control_interval": control_interval,
        "warmup_steps": warmup,
        "max_depth": max_depth,
        "regime": regime,
        "sim_threshold": SIM_THRESHOLD,
    }
    manifest = make_manifest(
        run_id=Path(run_dir).name,
        regime=regime,
        seed=seed,
        config=config,
        windows=windows,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        max_depth=max_depth,
        preset="synthetic",
        steps=steps,
        data="synthetic-run",
        backend={"requested": "none", "resolved": "none", "fallback_reason": None},
        synthetic=True,
        detail=detail,
    )
    writer = RunWriter.create(run_dir, manifest, overwrite=overwrite)
    writer.flush_rows = 1 << 62  # one segment per table per chunk, written by the loop below
    writer.durable = False  # regenerable data: atomic renames without fsync
    small = {"scalars": scalars, "events": events}
    small_steps = {name: table.column("step").to_numpy() for name, table in small.items()}
    chunk = max(1, int(flush_every))
    validity_rng = np.random.RandomState(seed + 7919)  # its own stream: the other tables stay as they were
    for start in range(0, steps, chunk):
        stop = min(steps, start + chunk)
        writer.append("heads", _heads_table(sim, max_depth, start, stop))
        if routed:
            b_lo, b_hi = -(-start // control_interval), -(-stop // control_interval)  # builds at steps in the chunk
            if b_hi > b_lo:
                tree = _tree_table(rng, sim, detail == "full", b_lo, b_hi)
                writer.append("tree", tree)
                writer.append("cluster_validity", _validity_table(validity_rng, tree, n_head))
        writer.append("branch", _branch_table(sim, windows, start, stop))
        for name, table in small.items():
            lo, hi = np.searchsorted(small_steps[name], [start, stop])
            if hi > lo:
                writer.append(name, table.slice(int(lo), int(hi - lo)))
        writer.flush()
    if status == "running":
        writer.flush()
    else:
        writer.close(status)
    return Path(run_dir)


def add_synthetic_lens(run_dir: str | os.PathLike, step: int, n_layer: int, n_head: int, T: int = 14) -> None:
    """A token lens of one syntax document, as ``aah-viz lens`` writes it: random causal attention
    (seeded), every head at a 4-token window, a dependency arc from token 9 to token 5."""
    import pandas as pd

    from aah_viz.analysis.lens import attention_rows
    from aah_viz.runlog.rewrite import rewrite_step

    rng = np.random.RandomState(1)
    probs = np.tril(rng.random_sample((n_layer, n_head, T, T)) ** 3)
    probs /= probs.sum(-1, keepdims=True)
    samples = pd.DataFrame(attention_rows(probs, np.full((n_layer, n_head), 4)))
    text = "The <b>cat</b> sat on it"
    tokens = pd.DataFrame({"position": range(T), "token": [text[i] if i < len(text) else "." for i in range(T)]})
    links = pd.DataFrame({"kind": ["dep"], "label": ["nsubj"], "query": [9], "key": [5], "gold": [True]})
    tables = {
        "attention_samples": samples.assign(doc=0, step=step),
        "lens_tokens": tokens.assign(word=-1, special=False, doc=0, doc_id="d1", source="syntax", step=step),
        "lens_links": links.assign(query_is_head=True, doc=0, step=step),
    }
    rewrite_step(run_dir, tables, step, purpose="writing a synthetic lens")


def make_synthetic_frontier_run(root: str | os.PathLike, seed: int = 0, n_blocks: int = 8) -> Path:
    """A run as ``aah-viz frontier`` writes one: an ``inference`` event per configuration (unpatched,
    static windows, an adapted AAH) with per-block losses drawn around a perplexity that falls with ACR."""
    rng = np.random.RandomState(seed)
    manifest = make_manifest(
        run_id=Path(root).name, regime="frontier", seed=seed, config={"kind": "frontier"}, windows=[8, 16, 32],
        seq_len=32, n_layer=2, n_head=4, max_depth=1,
    )  # fmt: skip
    writer = RunWriter.create(root, manifest)
    configurations = [("unpatched", "unpatched", 1.0), ("sliding_window_8", "sliding_window", 0.25)]
    configurations += [("sliding_window_16", "sliding_window", 0.5), ("full_adaptive_adapted", "adapted", 0.3)]
    for i, (name, family, acr) in enumerate(configurations):
        mean_nll = 32 * (3.0 + 0.4 * (1.0 - acr) - (0.2 if family == "adapted" else 0.0))  # nats per block
        writer.event(
            0, "inference", configuration=name, family=family, acr=acr, acr_causal=acr, tokens_per_block=32,
            block_nll=(mean_nll + rng.normal(0.0, 1.0, n_blocks)).tolist(),
            speed_vs_unpatched={"median": 1.0 + 0.5 * i, "ci95": [0.9 + 0.5 * i, 1.1 + 0.5 * i]},
        )  # fmt: skip
    writer.append("head_spans", _head_spans(rng, n_layer=2, n_head=4, windows=(8, 16, 32)))
    writer.close("finished")
    return Path(root)


def _head_spans(rng, n_layer: int, n_head: int, windows) -> dict:
    """``aah-viz profile`` rows: per head a share of mass that grows with the window (all of it at the
    largest), its 95% and 99% spans, and a random executed candidate."""
    rows = {c: [] for c in ("step", "layer", "head", "window", "mass_share", "needed_95", "needed_99")}
    rows["executed_window"] = []
    for layer in range(n_layer):
        for head in range(n_head):
            shares = np.sort(rng.uniform(0.5, 1.0, len(windows)))
            shares[-1] = 1.0
            needed = int(rng.randint(1, windows[-1] + 1))
            executed = int(windows[rng.randint(len(windows))])
            for w, share in zip(windows, shares):
                for col, value in (
                    ("step", 0),
                    ("layer", layer),
                    ("head", head),
                    ("window", int(w)),
                    ("mass_share", float(share)),
                    ("needed_95", needed),
                    ("needed_99", min(windows[-1], needed + 2)),
                    ("executed_window", executed),
                ):
                    rows[col].append(value)  # fmt: skip
    return rows


# ---------------------------------------------------------------------- the simulation
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


def _simulate(rng, L, H, steps, windows, T, ci, warmup, D, w_min):
    """Build-level draws (one per routing rebuild and layer); per-step arrays come per chunk."""
    K = len(windows)
    n_build = -(-steps // ci)
    build_step = np.arange(n_build) * ci
    shadow = build_step < warmup
    D = max(1, D)
    # partitions: level-0 groups of heads (contiguous chunks of a random permutation)
    part_src = _persist(rng, n_build, L, 0.15)
    n0 = rng.randint(max(1, H // 4), max(1, H // 2) + 1, size=(n_build, L))
    perm = np.argsort(rng.random_sample((n_build, L, H)), axis=-1)
    pos = np.argsort(perm, axis=-1)
    del perm
    levels = rng.randint(max(1, D - 1), D + 1, size=(n_build, L))
    n0, pos, levels = _take(n0, part_src), _take(pos, part_src), _take(levels, part_src)
    g0 = (pos * n0[..., None] // H).astype(np.int16)  # (B, L, H)
    del pos
    n_max = int(n0.max())
    level_ids = np.arange(D)
    n_nodes = ((n0[..., None] - 1) >> level_ids) + 1  # (B, L, D)
    node_ids = np.arange(n_max)
    valid = (level_ids[None, None, :, None] < levels[..., None, None]) & (node_ids < n_nodes[..., None])
    # controller logits: a per-layer preferred window plus persistent noise (float32, drawn in slices)
    centre = np.linspace(0.3, K - 1.2, L) if L > 1 else np.array([K / 2])
    pref = (-0.9 * (np.arange(K)[None, :] - centre[:, None]) ** 2).astype(np.float32)  # (L, K)
    noise_src = _persist(rng, n_build, L, 0.3)
    noise = _draw_f32(rng, 1.0, (n_build, L, D, n_max, K))
    sibling = node_ids ^ 1
    paired = valid & (sibling < n_nodes[..., None])
    delta = _draw_f32(rng, 0.25, (n_build, L, D, n_max, K))
    delta *= paired[..., None]
    sim = dict(
        L=L,
        H=H,
        D=D,
        K=K,
        T=T,
        ci=ci,
        steps=steps,
        windows=windows,
        w_min=w_min,
        n_build=n_build,
        build_step=build_step,
        shadow=shadow,
        g0=g0,
        levels=levels,
        n_nodes=n_nodes,
        valid=valid,
        pref=pref,
        noise=noise,
        noise_src=noise_src,
        delta=delta,
        paired=paired,
        part_src=part_src,
        routed=True,
    )
    raw = np.empty(valid.shape, dtype=np.int8)
    final = np.empty(valid.shape, dtype=np.int8)
    for lo in range(0, n_build, BUILD_CHUNK):
        hi = min(n_build, lo + BUILD_CHUNK)
        r, f = _choices(sim, lo, hi)
        raw[lo:hi], final[lo:hi] = r, f
    sim["raw"], sim["final"] = raw, final
    heads_b = np.arange(n_build)[:, None, None]
    heads_l = np.arange(L)[None, :, None]
    sim["build_idx"] = final[heads_b, heads_l, 0, g0].astype(np.int8)  # (B, L, H) executed index after the update
    sim["build_raw"] = raw[heads_b, heads_l, 0, g0].astype(np.int8)
    sim["warm_idx"] = windows.index(T) if T in windows else 0
    return sim


BUILD_CHUNK = 2048


def _draw_f32(rng, scale: float, shape: tuple) -> np.ndarray:
    """rng.normal(0, scale, shape) as float32, drawn in slices along the first axis (the same values)."""
    out = np.empty(shape, dtype=np.float32)
    for lo in range(0, shape[0], BUILD_CHUNK):
        hi = min(shape[0], lo + BUILD_CHUNK)
        out[lo:hi] = rng.normal(0.0, scale, size=(hi - lo, *shape[1:]))
    return out


def _logits(sim, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(base, final) logits of builds lo..hi: (b, L, D, N, K) float32."""
    layers = np.arange(sim["L"])[None, :]
    base = sim["pref"][None, :, None, None, :] + sim["noise"][sim["noise_src"][lo:hi], layers]
    return base, base + sim["delta"][lo:hi]


def _choices(sim, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw argmax and parent-constrained window indices of builds lo..hi."""
    _, final_logits = _logits(sim, lo, hi)
    raw = final_logits.argmax(axis=-1).astype(np.int8)  # (b, L, D, N)
    final = raw.copy()
    parent_of = np.arange(raw.shape[-1]) >> 1
    levels = sim["levels"][lo:hi]
    for level in range(sim["D"] - 2, -1, -1):  # top-down parent constraint (ascending windows: min of indices)
        parent_final = final[:, :, level + 1, :][..., parent_of]
        has_parent = (level + 1 < levels)[..., None]
        final[:, :, level, :] = np.where(has_parent, np.minimum(raw[:, :, level, :], parent_final), raw[:, :, level, :])
    return raw, final


def _step_arrays(sim, start: int, stop: int):
    """Executed index, raw index (-1 off updates) and window of steps start..stop: (S, L, H)."""
    step_ids = np.arange(start, stop)
    b_of_step = step_ids // sim["ci"]
    warmup = sim["warmup"]
    idx = sim["build_idx"][b_of_step].astype(np.int64)
    idx[step_ids < warmup] = sim["warm_idx"]
    if sim["routed"]:
        is_update = (step_ids % sim["ci"] == 0) & (step_ids >= warmup)
        raw_step = np.where(is_update[:, None, None], sim["build_raw"][b_of_step], -1)
    else:
        raw_step = np.full(idx.shape, -1, dtype=np.int64)
    win = np.asarray(sim["windows"], dtype=np.int64)[idx]
    return b_of_step, idx, raw_step, win


# ---------------------------------------------------------------------- tables
def _heads_table(sim, max_depth: int, start: int, stop: int) -> pa.Table:
    L, H = sim["L"], sim["H"]
    S = stop - start
    n = S * L * H
    b_of_step, idx, raw, win = _step_arrays(sim, start, stop)
    cols = {
        "step": pa.array(np.repeat(np.arange(start, stop, dtype=np.int64), L * H)),
        "layer": pa.array(np.tile(np.repeat(np.arange(L, dtype=np.int16), H), S)),
        "head": pa.array(np.tile(np.arange(H, dtype=np.int16), S * L)),
        "window_idx": pa.array(idx.reshape(n).astype(np.int8)),
        "window": pa.array(win.reshape(n).astype(np.int32)),
    }
    raw = raw.reshape(n)
    cols["raw_idx"] = pa.array(raw.astype(np.int8), mask=raw < 0)
    g0 = sim["g0"][b_of_step]  # (S, L, H)
    levels = sim["levels"][b_of_step][..., None]
    for level in range(max_depth):
        group = (g0 >> level).reshape(n).astype(np.int16)
        missing = np.broadcast_to(level >= levels, g0.shape).reshape(n)
        if not sim["routed"]:
            missing = np.ones(n, dtype=bool)
        cols[f"group_l{level}"] = pa.array(group, mask=missing)
    return pa.table(cols)


def _list_array(values: np.ndarray, offsets: np.ndarray, typ) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=typ))


def _tree_table(rng, sim, with_features: bool, b_lo: int, b_hi: int) -> pa.Table:
    valid, K, D = sim["valid"][b_lo:b_hi], sim["K"], sim["D"]
    bi, li, lev, node = np.nonzero(valid)  # rows in (build, layer, level, node) order, bi within the chunk
    n_rows = len(bi)
    row_id = np.full(valid.shape, -1, dtype=np.int64)
    row_id[valid] = np.arange(n_rows)
    levels = sim["levels"][b_lo:b_hi]
    # members: heads whose level-l group is the node; children: level 0 -> heads, else nodes below
    B, L = levels.shape
    g = sim["g0"][b_lo:b_hi, :, None, :].astype(np.int64) >> np.arange(D)[None, None, :, None]  # (B, L, D, H)
    in_use = np.arange(D)[None, None, :, None] < levels[..., None, None]
    eb, el, ed, eh = np.nonzero(np.broadcast_to(in_use, g.shape))
    member_row = row_id[eb, el, ed, g[eb, el, ed, eh]]
    order = np.argsort(member_row, kind="stable")  # heads are enumerated ascending within each row
    member_values = eh[order].astype(np.int32)
    member_offsets = np.concatenate([[0], np.cumsum(np.bincount(member_row, minlength=n_rows))])
    upper = lev > 0
    n_below = np.where(upper, sim["n_nodes"][b_lo + bi, li, np.maximum(lev - 1, 0)], 0)
    first, second = 2 * node, 2 * node + 1
    child_rows = np.concatenate([member_row[ed == 0], np.nonzero(upper)[0], np.nonzero(upper & (second < n_below))[0]])
    child_vals = np.concatenate([eh[ed == 0], first[upper], second[upper & (second < n_below)]])
    order = np.argsort(child_rows, kind="stable")  # heads ascending, then first before second child
    child_values = child_vals[order].astype(np.int32)
    child_offsets = np.concatenate([[0], np.cumsum(np.bincount(child_rows, minlength=n_rows))])
    base_all, final_all = _logits(sim, b_lo, b_hi)
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
        "step": pa.array(sim["build_step"][b_lo + bi].astype(np.int64)),
        "layer": pa.array(li.astype(np.int16)),
        "level": pa.array(lev.astype(np.int8)),
        "node": pa.array(node.astype(np.int16)),
        "parent": pa.array((node >> 1).astype(np.int16), mask=~has_parent),
        "members": _list_array(member_values, member_offsets, pa.int32()),
        "children": _list_array(child_values, child_offsets, pa.int32()),
        "logits": _list_array(final_logits.reshape(-1), log_off, pa.float32()),
        "base_logits": _list_array(base.reshape(-1), log_off, pa.float32()),
        "margin": pa.array((top2[:, 1] - top2[:, 0]).astype(np.float32)),
        "raw_idx": pa.array(sim["raw"][b_lo + bi, li, lev, node].astype(np.int8)),
        "final_idx": pa.array(sim["final"][b_lo + bi, li, lev, node].astype(np.int8)),
        "joint_paired": pa.array(sim["paired"][b_lo + bi, li, lev, node]),
        "joint_delta": pa.array(np.linalg.norm(sim["delta"][b_lo + bi, li, lev, node], axis=-1).astype(np.float32)),
        "shadow": pa.array(sim["shadow"][b_lo + bi]),
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


def _validity_table(rng, tree: pa.Table, n_head: int) -> pa.Table:
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


def _branch_table(sim, windows, start: int, stop: int) -> pa.Table:
    L, K, H = sim["L"], sim["K"], sim["H"]
    S = stop - start
    _, idx, _, _ = _step_arrays(sim, start, stop)
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


def _coverage_per_layer(sim, T: int, w_min: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, L) ACR and causal-pair coverage, computed a chunk of steps at a time."""
    S, L, H = sim["steps"], sim["L"], sim["H"]
    acr = np.empty((S, L))
    pairs = np.empty((S, L))
    for start in range(0, S, 2000):
        stop = min(S, start + 2000)
        win = _step_arrays(sim, start, stop)[3]
        acr[start:stop] = effective_windows(win, T, w_min).sum(axis=-1) / (H * T)
        pairs[start:stop] = band_pairs(T, win).sum(axis=-1) / (H * T * (T + 1) / 2)  # raw windows
    return acr, pairs


def _scalars_table(rng, sim, steps, warmup, eval_interval, T, w_min) -> pa.Table:
    S, L = steps, sim["L"]
    layer_acr, pairs = _coverage_per_layer(sim, T, w_min)  # (S, L); raw windows for pairs, as coverage.band_pairs
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


def _events_table(sim, steps, warmup, eval_interval) -> pa.Table:
    L = sim["L"]
    real = np.nonzero(~sim["shadow"])[0]
    n_nodes, levels, part_src = sim["n_nodes"], sim["levels"], sim["part_src"]
    bb, ll = np.repeat(real, L), np.tile(np.arange(L), len(real))
    depth = levels[bb, ll]
    counts = n_nodes[bb, ll].tolist()
    recl = (part_src[bb, ll] == bb).tolist()
    rows_step = sim["build_step"][bb].tolist()
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
