"""From runs to the small, plot-ready data each figure needs (read + analyse, no plotting).

The dashboard caches these results (``st.cache_data``); the figure registry and the bench call
them directly. Every function reduces a run to a bounded size before it returns: one step, one
layer, sampled or binned steps.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from aah_viz.analysis import queries, stability, windows
from aah_viz.analysis.hierarchy import head_states, moved_heads

MAX_TIMELINE_COLUMNS = 400
MAX_SERIES_POINTS = 1000


def run_label(run, key: str | None = None) -> str:
    """ "regime sS (name)": the name is the run's key under the logs root where one is given (two runs
    of the same regime and seed, even of the same run id in two folders, never share a label)."""
    seed = "" if run.seed is None else f" s{run.seed}"
    return f"{run.regime}{seed} ({run.run_id if key is None else key})"


def run_backend(run) -> str | None:
    """The attention backend that actually ran (the manifest's resolved backend)."""
    b = run.manifest.get("backend") or {}
    name = b.get("resolved") if isinstance(b, dict) else b
    return None if name in (None, "none") else str(name)


def warmup_steps(manifest: dict) -> int | None:
    cfg = manifest.get("config") or {}
    w = cfg.get("warmup_steps", manifest.get("warmup_steps"))
    return int(w) if isinstance(w, int) and w > 0 else None


def _pick_step(steps: np.ndarray, step: int | None) -> int | None:
    if len(steps) == 0:
        return None
    return int(steps[-1]) if step is None else queries.nearest(steps, int(step))


def hierarchy_data(run, layer: int = 0, step: int | None = None, steps=None) -> dict:
    """Tree rows of one layer at the routing update nearest ``step`` (default: the last), the heads'
    executed windows, and the heads that moved (group-mates or window) since the previous update.
    ``steps``: the layer's ``queries.tree_steps`` when the caller has them."""
    steps = queries.tree_steps(run, layer) if steps is None else np.asarray(steps, dtype=np.int64)
    chosen = _pick_step(steps, step)
    if chosen is None:
        return {
            "steps": steps,
            "step": None,
            "layer": layer,
            "tree": pd.DataFrame(),
            "head_windows": {},
            "moved": set(),
        }
    i = int(np.searchsorted(steps, chosen))
    previous = int(steps[i - 1]) if i > 0 else None
    wanted = [chosen] if previous is None else [previous, chosen]
    tree_all = run.table(
        "tree", filters=[("layer", "==", int(layer)), ("step", "in", wanted)], steps=(wanted[0], chosen)
    )
    heads = queries.heads_of_layer(run, layer, steps=wanted)

    def windows_at(s):
        h = heads[heads["step"] == s]
        return {int(a): int(b) for a, b in zip(h["head"], h["window"])}

    tree = tree_all[tree_all["step"] == chosen].reset_index(drop=True)
    head_windows = windows_at(chosen)
    moved: set[int] = set()
    if previous is not None:
        prev_tree = tree_all[tree_all["step"] == previous]
        moved = moved_heads(head_states(prev_tree, windows_at(previous)), head_states(tree, head_windows))
    return {
        "steps": steps,
        "step": chosen,
        "previous": previous,
        "layer": layer,
        "tree": tree,
        "head_windows": head_windows,
        "moved": moved,
    }


def window_heatmap_data(run, step: int | None = None) -> dict:
    """Layer x head executed windows at the recorded step nearest ``step`` (default: the last)."""
    chosen = queries.nearest_step(run, "heads", step)
    heads = (
        queries.heads_at_step(run, chosen) if chosen is not None else pd.DataFrame(columns=["layer", "head", "window"])
    )
    matrix = windows.window_matrix(heads, run.n_layer, run.n_head)
    return {"step": chosen, "matrix": matrix}


def head_spans_data(run) -> pd.DataFrame:
    """One row per (layer, head) of the newest ``head_spans`` profile: needed_95, needed_99, executed_window
    and mass_cut, the share of the head's attention mass beyond its executed window (NaN where the executed
    window is not a profiled candidate); empty when the run has never been profiled (``aah-viz profile``)."""
    cols = ["layer", "head", "needed_95", "needed_99", "executed_window", "mass_cut"]
    if "head_spans" not in run.tables():
        return pd.DataFrame(columns=cols)
    spans = run.table("head_spans")
    if spans is None or spans.empty:
        return pd.DataFrame(columns=cols)
    spans = spans[spans["step"] == spans["step"].max()]
    at_executed = spans[spans["window"] == spans["executed_window"]].drop_duplicates(["layer", "head"], keep="last")
    cut = at_executed.assign(mass_cut=(1.0 - at_executed["mass_share"]).clip(lower=0.0))[["layer", "head", "mass_cut"]]
    heads = spans.drop_duplicates(["layer", "head"], keep="last").drop(columns=["mass_cut"], errors="ignore")
    return (
        heads.merge(cut, on=["layer", "head"], how="left")[cols].sort_values(["layer", "head"]).reset_index(drop=True)
    )


def head_retrieval_data(run) -> dict:
    """The newest ``head_retrieval`` rows (``aah-viz profile --retrieval``: each head cut alone, the passkey
    questions it loses) and the uncut baseline from the same profile's event; ``rows`` empty when never asked."""
    cols = ["layer", "head", "window", "sink_tokens", "asked", "retrieved", "lost", "answer_nll"]
    if "head_retrieval" not in run.tables():
        return {"rows": pd.DataFrame(columns=cols), "baseline": None}
    rows = run.table("head_retrieval")
    if rows is None or rows.empty:
        return {"rows": pd.DataFrame(columns=cols), "baseline": None}
    step = int(rows["step"].max())
    rows = rows[rows["step"] == step].drop_duplicates(["layer", "head"], keep="last")
    baseline = None
    events = run.events("profile")
    for detail in reversed(list(events["detail"]) if events is not None and len(events) else []):
        found = (json.loads(detail) if isinstance(detail, str) else detail).get("head_retrieval")
        if found:
            baseline = found
            break
    return {"rows": rows[cols].sort_values(["layer", "head"]).reset_index(drop=True), "baseline": baseline}


def timeline_data(run, layer: int = 0, max_columns: int = MAX_TIMELINE_COLUMNS) -> dict:
    """One layer's windows per head at sampled steps (routing updates when they fit).

    With per-update summaries this reads the layer's summary rows (one per update) and the head rows
    of the first and last recorded steps; older runs read the layer's head rows at sampled steps.
    """
    if queries.has_summaries(run):
        import pyarrow.compute as pc

        ups = run.arrow_table("updates", columns=["step", "window_idx"], filters=pc.field("layer") == int(layer))
        first, last = queries.nearest_step(run, "heads", 0), queries.last_step_of(run, "heads")
        ends = sorted({s for s in (first, last) if s is not None})
        up_steps = ups.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
        candidates = np.union1d(up_steps, ends).astype(np.int64)
        sampled = windows.sample_steps(candidates, max_columns, prefer=up_steps)
        frames = []
        if len(up_steps):
            keep = np.isin(up_steps, sampled)
            idx = np.stack(ups.column("window_idx").to_numpy(zero_copy_only=False)[keep]).astype(np.int64)
            tokens = np.asarray(run.windows, dtype=np.int64)[np.clip(idx, 0, len(run.windows) - 1)]
            frames.append(
                pd.DataFrame(
                    {
                        "step": np.repeat(up_steps[keep], run.n_head),
                        "head": np.tile(np.arange(run.n_head), int(keep.sum())),
                        "window": tokens.ravel(),
                    }
                )
            )
        extra = [s for s in ends if s in set(sampled.tolist()) and s not in set(up_steps.tolist())]
        if extra:
            frames.append(queries.heads_of_layer(run, layer, steps=extra)[["step", "head", "window"]])
        heads = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["step", "head", "window"])
        recorded = (last - first + 1) if first is not None and last is not None else 0
        cols, matrix = windows.head_timeline(heads, run.n_head)
        return {"layer": layer, "steps": cols, "matrix": matrix, "recorded": int(recorded)}
    steps = queries.recorded_steps(run)
    ups = queries.update_steps(run)
    prefer = ups.loc[ups["layer"] == layer, "step"].to_numpy() if not ups.empty else None
    sampled = windows.sample_steps(steps, max_columns, prefer=prefer)
    heads = (
        queries.heads_of_layer(run, layer, steps=sampled)
        if len(sampled)
        else pd.DataFrame(columns=["step", "head", "window"])
    )
    cols, matrix = windows.head_timeline(heads, run.n_head)
    return {"layer": layer, "steps": cols, "matrix": matrix, "recorded": len(steps)}


def branch_data(run, step: int | None = None) -> dict:
    """Per-layer window shares at ``step`` (default: last), from ``branch`` or else from ``heads``."""
    chosen = queries.nearest_step(run, "branch", step) if "branch" in run.tables() else None
    if chosen is not None:
        per_layer = windows.bucket_fractions(queries.branch_at(run, chosen), run.windows)
    else:
        chosen = queries.nearest_step(run, "heads", step) if "heads" in run.tables() else None
        heads = queries.heads_at_step(run, chosen) if chosen is not None else pd.DataFrame(columns=["layer", "window"])
        per_layer = windows.bucket_fractions_from_heads(heads, run.windows)
        if per_layer.empty:  # imported published runs carry only window_frac_<W> scalars
            chosen, per_layer = _fractions_from_scalars(run, step)
    return {"step": chosen, "per_layer": per_layer}


def _fractions_from_scalars(run, step: int | None):
    names = [f"window_frac_{w}" for w in run.windows]
    s = queries.scalar_frame(run, names)
    s = s[s["layer"].isna()]
    if s.empty:
        return None, pd.DataFrame(columns=list(run.windows), dtype=float)
    chosen = _pick_step(np.unique(s["step"].to_numpy()), step)
    at = s[s["step"] == chosen].groupby("name")["value"].mean()
    row = {w: float(at.get(f"window_frac_{w}", 0.0)) for w in run.windows}
    return int(chosen), pd.DataFrame([row], index=pd.Index([-1], name="layer"))


COVERAGE_SCALARS = ("acr", "acr_causal", "realised_work")
COST_SCALARS = (*COVERAGE_SCALARS, "flops_ratio_est", "step_time_s", "tokens_per_s")
COVERAGE_COLUMNS = ["label", "regime", "seed", "backend", "name", "step", "value"]
MAX_SEGMENTS_READ = 50  # scalars segments read of one run for coverage over training (see coverage_and_cost)


def coverage_data(runs, max_points: int = MAX_SERIES_POINTS) -> pd.DataFrame:
    """ACR, causal-pair coverage and realised work per run, binned to at most ``max_points`` per line."""
    return coverage_and_cost(runs, max_points, names=COVERAGE_SCALARS)[0]


def cost_table(runs) -> pd.DataFrame:
    """Per run: the three coverage figures at the last recorded step, the analytic FLOPs
    estimate beside it, and the measured step time and throughput (medians over the run)."""
    return coverage_and_cost(runs)[1]


def coverage_and_cost(
    runs, max_points: int = MAX_SERIES_POINTS, names=COST_SCALARS, keys=None, max_segments: int = MAX_SEGMENTS_READ
):
    """(:func:`coverage_data`, :func:`cost_table`) from one read of each run's scalars (a page that
    shows both reads the run once); ``keys``: the runs' names in labels (default their run ids).

    A run of more than ``max_segments`` ``scalars`` segments (a long run: 200 at 100,000 steps flushed every
    500) is read from that many of them, evenly spaced with the first and last kept: its lines are binned
    from those stretches of steps and its medians taken over them, its last values read from its tail as
    always (``queries.last_values``). ``coverage.attrs["sampled"]``: {label: (segments read, segments)} of
    the runs read so."""
    parts, rows, sampled = [], [], {}
    for run, key in zip(runs, keys or [None] * len(runs)):
        view, seen, total = run.sampled("scalars", max_segments)
        s = queries.scalar_frame(view, names, model_wide=True)  # the layer filter read with the rows
        if s.empty:
            continue
        if seen < total:
            sampled[run_label(run, key)] = (seen, total)
        cov = s[s["name"].isin(COVERAGE_SCALARS)]
        if not cov.empty:
            b = windows.binned_series(cov, "step", "value", max_points=max_points, by="name")
            b.insert(0, "backend", run_backend(run))
            b.insert(0, "seed", run.seed)
            b.insert(0, "regime", run.regime)
            b.insert(0, "label", run_label(run, key))
            parts.append(b)
        last = s.sort_values("step", kind="stable").groupby("name")["value"].last()
        if seen < total:  # the stretches read may end before a name's last value
            found = queries.last_values(run, COST_SCALARS[:4], model_wide=True)
            last = {name: value for name, value in found.items() if value is not None}
        median = s.groupby("name")["value"].median()
        rows.append(
            {
                "run": run_label(run, key),
                "ACR": last.get("acr"),
                "causal-pair coverage": last.get("acr_causal"),
                "realised work": last.get("realised_work"),
                "FLOPs ratio (analytic estimate)": last.get("flops_ratio_est"),
                "step time, median (s, measured)": median.get("step_time_s"),
                "tokens/s, median (measured)": median.get("tokens_per_s"),
            }
        )
    coverage = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COVERAGE_COLUMNS)
    coverage.attrs["sampled"] = sampled
    return coverage, pd.DataFrame(rows)


def bucket_table(runs, step: int | None = None, keys=None) -> pd.DataFrame:
    """Run label x candidate window: share of (layer, head) slots at the final (or given) step;
    ``keys``: the runs' names in labels (default their run ids)."""
    rows = {}
    all_windows: list[int] = []
    for run, key in zip(runs, keys or [None] * len(runs)):
        per_layer = branch_data(run, step)["per_layer"]
        rows[run_label(run, key)] = windows.run_bucket_fractions(per_layer)
        all_windows = sorted(set(all_windows) | set(run.windows))
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).T.reindex(columns=all_windows).fillna(0.0)


def stability_data(run) -> dict:
    """Per-update comparisons and per-head switch statistics: from the per-update summaries the run
    writer kept (a small read), or computed from the head rows at routing updates (older runs)."""
    if queries.has_summaries(run):
        import pyarrow.compute as pc

        t = run.arrow_table(
            "updates", columns=[*stability.UPDATE_COLUMNS, "window_switched", "flipped", "group_switched"]
        )
        updates = t.select(stability.UPDATE_COLUMNS).to_pandas().sort_values(["layer", "step"], kind="stable")
        updates = updates.reset_index(drop=True)
        layer = t.column("layer").to_numpy(zero_copy_only=False).astype(np.int64)
        n_layer, n_head = int(run.n_layer), int(run.n_head)

        def counts(column: str) -> np.ndarray:
            lists = t.column(column).combine_chunks()
            heads = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
            parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
            return np.bincount(layer[parents] * n_head + heads, minlength=n_layer * n_head).reshape(n_layer, n_head)

        return {
            "updates": updates,
            "layers": stability.layer_summary(updates),
            "heads": stability.head_stats_from_counts(
                updates, counts("window_switched"), counts("flipped"), counts("group_switched")
            ),
        }
    heads = queries.heads_at_updates(run)
    mats = stability.Matrices(heads, run.n_head) if not heads.empty else None
    updates = stability.update_frame(heads, run.n_head, mats)
    return {
        "updates": updates,
        "layers": stability.layer_summary(updates),
        "heads": stability.head_switch_stats(heads, run.n_head, mats),
    }


def validity_data(run) -> dict:
    """The run's level-0 partition validity rows and its clustering threshold."""
    threshold = run.config.get("sim_threshold")
    return {
        "validity": queries.cluster_validity(run),
        "threshold": float(threshold) if isinstance(threshold, (int, float)) else None,
    }


def controller_data(run, max_points: int = MAX_SERIES_POINTS, max_segments: int = MAX_SEGMENTS_READ) -> dict:
    """Controller gradient norm and weight drift (model-wide, else the mean over layers) and the mean
    decision margin per step (from the per-update summaries, else from the tree rows). A long run's
    scalars are read as :func:`coverage_and_cost` reads them: from at most ``max_segments`` segments spread
    over it (``series.attrs["sampled"]``: (segments read, segments) then)."""
    view, seen, total = run.sampled("scalars", max_segments)
    s = queries.scalar_frame(view, ["controller_grad_norm", "controller_weight_drift"])
    model_wide = s[s["layer"].isna()]
    if model_wide.empty and not s.empty:  # per-layer values only: show their mean over layers
        model_wide = s.groupby(["step", "name"], as_index=False)["value"].mean()
    series = (
        windows.binned_series(model_wide, "step", "value", max_points=max_points, by="name")
        if not model_wide.empty
        else pd.DataFrame(columns=["name", "step", "value"])
    )
    series.attrs["sampled"] = (seen, total) if seen < total else None
    margins = _margins(run, max_points)
    if margins is None:
        t = queries.tree_stats(run, columns=("step", "margin", "shadow"))
        if not t.empty:
            t = t[~t["shadow"].fillna(False).astype(bool)]
            m = t.groupby("step", as_index=False)["margin"].mean()
            margins = windows.binned_series(m, "step", "margin", max_points=max_points)
        else:
            margins = pd.DataFrame(columns=["step", "margin"])
    return {"series": series, "margins": margins}


def _margins(run, max_points: int) -> pd.DataFrame | None:
    """Mean decision margin per step from the writer's per-update summaries (None without them)."""
    if not queries.has_summaries(run) or "margins" not in run.tables():
        return None
    m = run.table("margins", columns=["step", "groups", "margin_mean"])
    if m.empty:
        return pd.DataFrame(columns=["step", "margin"])
    m = m.assign(total=m["margin_mean"] * m["groups"]).groupby("step", as_index=False)[["total", "groups"]].sum()
    m["margin"] = m["total"] / m["groups"]
    return windows.binned_series(m[["step", "margin"]], "step", "margin", max_points=max_points)


def probe_points(run, probe: str, metric: str) -> pd.DataFrame:
    """Per head at the latest probed step: layer, head, window, value of one probe metric."""
    tables = queries.probe_tables(run)
    ph = tables.get("probe_heads")
    if ph is None or ph.empty:
        return pd.DataFrame(columns=["layer", "head", "window", "value"])
    rows = ph[(ph["probe"] == probe) & (ph["metric"] == metric)]
    if rows.empty:
        return pd.DataFrame(columns=["layer", "head", "window", "value"])
    rows = rows[rows["step"] == rows["step"].max()] if rows["step"].notna().any() else rows
    rows = rows.dropna(subset=["layer", "head"])
    if rows["window"].isna().any():  # fill missing windows from the heads table at that step
        step = rows["step"].max()
        heads = queries.heads_at_step(run, int(step)) if pd.notna(step) else pd.DataFrame()
        if not heads.empty:
            w = heads.set_index(["layer", "head"])["window"]
            idx = pd.MultiIndex.from_arrays([rows["layer"].astype(int), rows["head"].astype(int)])
            rows = rows.assign(window=rows["window"].fillna(pd.Series(w.reindex(idx).to_numpy(), index=rows.index)))
    return rows[["layer", "head", "window", "value"]].dropna().reset_index(drop=True)


TRAINING_SCALARS = ("loss", "val_loss", "val_ppl", "lr", "tokens_per_s", "step_time_s")


def training_data(runs, max_points: int = MAX_SERIES_POINTS) -> pd.DataFrame:
    """Model-wide training curves per run, binned to at most ``max_points`` per line.

    Columns: label, regime, seed, name (loss, val_loss, lr, tokens_per_s, step_time_s), step, value.
    Only these scalars' rows are read (a name filter pushed down to Parquet).
    """
    parts = []
    for run in runs:
        s = queries.scalar_frame(run, TRAINING_SCALARS, model_wide=True)
        if s.empty:
            continue
        b = windows.binned_series(s, "step", "value", max_points=max_points, by="name")
        b.insert(0, "seed", run.seed)
        b.insert(0, "regime", run.regime)
        b.insert(0, "label", run_label(run))
        parts.append(b)
    if not parts:
        return pd.DataFrame(columns=["label", "regime", "seed", "name", "step", "value"])
    return pd.concat(parts, ignore_index=True)
