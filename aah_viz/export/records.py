"""Per-run numbers for the paper tables, read from a run directory.

One function per table kind; each returns plain dicts (one per run, or per run and layer) so the
table builder can list them per run or summarise them per regime. Definitions (which step, which
aggregation) are documented in ``docs/export.md`` and repeated in each table's notes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from aah_viz import coverage
from aah_viz.analysis import cluster_validity, queries
from aah_viz.analysis.stability import update_frame
from aah_viz.regimes import REGIMES

# inference metrics: names in an ``inference`` event's detail (and the eval extras)
INFERENCE_KEYS = (
    "val_loss",
    "val_ppl",
    "acr",
    "acr_causal",
    "flops_ratio_est",
    "flops_reduction_pct",
    "tokens_per_s",
    "elapsed_s",
    "peak_mem_mb",
)


def display_name(run) -> str:
    ref = run.manifest.get("reference") or {}
    if isinstance(ref, dict) and ref.get("method"):
        return str(ref["method"])
    row = REGIMES.get(str(run.regime))
    return row.title if row else str(run.regime)


def descriptions(run) -> tuple[str, str, str]:
    """(grouping, hierarchy, joint scorer) as the paper's Table 1 describes the run's regime."""
    ref = run.manifest.get("reference") or {}
    if isinstance(ref, dict) and all(k in ref for k in ("grouping", "hierarchy", "joint_scorer")):
        return (str(ref["grouping"]), str(ref["hierarchy"]), str(ref["joint_scorer"]))
    row = REGIMES.get(str(run.regime))
    return (row.described if row else None) or ("", "", "")


def identity(run) -> dict:
    grouping, hierarchy, joint = descriptions(run)
    return {
        "run": run.run_id,
        "regime": run.regime,
        "method": display_name(run),
        "grouping": grouping,
        "hierarchy": hierarchy,
        "joint_scorer": joint,
        "seed": run.seed,
        "seq_len": run.seq_len,
        "imported": bool(run.manifest.get("imported")) or run.status == "imported",
    }


def _model_scalars(run, names) -> pd.DataFrame:
    df = queries.scalar_frame(run, names)
    return df[df["layer"].isna()].sort_values("step", kind="stable")


def _last(df: pd.DataFrame, name: str) -> float:
    part = df[(df["name"] == name) & df["value"].notna()]
    return float(part["value"].iloc[-1]) if len(part) else math.nan


def _last_with_step(df: pd.DataFrame, name: str) -> tuple[float, float]:
    part = df[(df["name"] == name) & df["value"].notna()]
    if not len(part):
        return math.nan, math.nan
    return float(part["value"].iloc[-1]), float(part["step"].iloc[-1])


def final_window_fractions(run, windows) -> dict[int, float]:
    """Bucket fractions at the last step of the ``branch`` table, averaged over layers.

    Model-wide ``window_frac_<w>`` scalars at the last step (imported runs keep the published
    float64 values there) win; else the mean over layers of the ``branch`` rows, a window a layer
    did not use counting as 0.
    """
    names = [f"window_frac_{int(w)}" for w in windows]
    sc = _model_scalars(run, names)
    if len(sc):
        last = sc[sc["step"] == sc["step"].max()]
        got = dict(zip(last["name"], last["value"].astype(float)))
        return {int(w): got.get(f"window_frac_{int(w)}", 0.0) for w in windows}
    steps = queries.branch_steps(run)
    if len(steps) == 0:
        return {int(w): math.nan for w in windows}
    branch = queries.branch_at(run, int(steps[-1]))
    n_layers = branch["layer"].nunique()
    sums = branch.groupby("window")["fraction"].sum()
    return {int(w): float(sums.get(w, 0.0)) / n_layers for w in windows}


def training_record(run, windows) -> dict:
    """Final validation loss/ppl, final ACR and causal coverage, analytic FLOPs ratio estimate,
    median tokens/s, peak memory, window fractions at the final step."""
    names = [
        "val_loss",
        "val_ppl",
        "acr",
        "acr_causal",
        "flops_ratio_est",
        "tokens_per_s",
        "peak_mem_mb",
        "peak_reserved_mb",
    ]
    sc = _model_scalars(run, names)
    val_loss, val_step = _last_with_step(sc, "val_loss")
    # perplexity of the same evaluation as the final loss; exp(loss) when that step logged none
    ppl_rows = sc[(sc["name"] == "val_ppl") & (sc["step"] == val_step) & sc["value"].notna()]
    val_ppl = (
        float(ppl_rows["value"].iloc[-1])
        if len(ppl_rows)
        else (math.exp(val_loss) if not math.isnan(val_loss) else math.nan)
    )
    acr = _last(sc, "acr")
    if math.isnan(acr) and run.regime == "full_attention":
        acr = 1.0  # the baseline attends to everything (method section 11.1)
    tok = sc.loc[(sc["name"] == "tokens_per_s") & sc["value"].notna(), "value"]
    mem = sc.loc[(sc["name"] == "peak_mem_mb") & sc["value"].notna(), "value"]
    res = sc.loc[(sc["name"] == "peak_reserved_mb") & sc["value"].notna(), "value"]
    rec = {
        **identity(run),
        "step": queries.final_step(run),
        "val_loss": val_loss,
        "val_ppl": val_ppl,
        "acr": acr,
        "acr_causal": _last(sc, "acr_causal"),
        "flops_ratio_est": _flops_ratio(run, _last(sc, "flops_ratio_est"), acr),
        "tokens_per_s": float(np.median(tok.to_numpy())) if len(tok) else math.nan,
        "peak_mem_mb": float(mem.max()) if len(mem) else math.nan,
        "peak_reserved_mb": float(res.max()) if len(res) else math.nan,
    }
    fr = final_window_fractions(run, windows) if run.regime != "full_attention" else {int(w): math.nan for w in windows}
    for w, f in fr.items():
        rec[f"window_frac_{w}"] = f
    return rec


def _flops_ratio(run, logged: float, acr: float) -> float:
    """The logged analytic estimate, else the same formula (method section 11.1) from the final ACR and
    the model shape in the manifest's config; NaN when the shape is not recorded."""
    if not math.isnan(logged) or math.isnan(acr):
        return logged
    cfg = run.config
    n_embd, n_ff = cfg.get("n_embd"), cfg.get("n_ff")
    if not n_embd or not n_ff or not run.seq_len:
        return math.nan
    return coverage.flops_ratio_est(acr, seq_len=int(run.seq_len), n_embd=int(n_embd), n_ff=int(n_ff))


def _detail(text: Any) -> dict:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def inference_record(run, windows) -> dict:
    """The run's last ``inference`` event (a stand-alone evaluation), else its last ``eval`` event.

    Window fractions come from the event's ``window_frac`` object (keys are window sizes);
    ``source`` says which event kind the numbers come from.
    """
    rec = {**identity(run), "step": math.nan, "source": "", "checkpoint_step": math.nan, "n_batches": math.nan}
    for key in INFERENCE_KEYS:
        rec[key] = math.nan
    for w in windows:
        rec[f"window_frac_{w}"] = math.nan
    rec["resolution_per_head_mean"] = ""
    found = _last_evaluation(run)
    if found is None:
        return rec
    kind, row = found
    d = _detail(row["detail"])
    rec["step"] = int(row["step"])
    rec["source"] = kind
    rec["checkpoint_step"] = _num(d.get("checkpoint_step", row["step"]))
    rec["n_batches"] = _num(d.get("n_batches"))
    for key in INFERENCE_KEYS:
        rec[key] = _num(d.get(key))
    if math.isnan(rec["val_ppl"]) and not math.isnan(rec["val_loss"]):
        rec["val_ppl"] = math.exp(rec["val_loss"])
    if math.isnan(rec["acr"]) and run.regime == "full_attention":
        rec["acr"] = 1.0
    fr = d.get("window_frac") or {}
    for w in windows:
        rec[f"window_frac_{w}"] = _num(fr.get(str(w)))
    res = d.get("resolution_per_head_mean")
    if isinstance(res, list):
        rec["resolution_per_head_mean"] = "[" + ",".join(repr(float(x)) for x in res) + "]"
    if kind == "eval":
        _fill_from_training_state(run, rec, int(row["step"]), windows)
    return rec


def _last_evaluation(run):
    """(kind, event row) of the run's last ``inference`` event, else its last ``eval`` event, else None."""
    events = run.events()
    for kind in ("inference", "eval"):
        part = events[events["kind"] == kind].sort_values("step", kind="stable")
        if len(part):
            return kind, part.iloc[-1]
    return None


def evaluated_windows(runs, windows) -> list[int]:
    """The candidate ``windows`` and every window the runs' inference records give a fraction for: an
    evaluation with a fixed or sliding window outside the candidates reports the windows it executed."""
    found = {int(w) for w in windows}
    for run in runs:
        last = _last_evaluation(run)
        fracs = _detail(last[1]["detail"]).get("window_frac") if last is not None else None
        if isinstance(fracs, dict):
            found |= {int(k) for k in fracs if str(k).isdigit()}
    return sorted(found)


def _fill_from_training_state(run, rec: dict, step: int, windows) -> None:
    """An ``eval`` event holds the losses only. Evaluation leaves routing as it is, so ACR, coverage
    and window fractions at evaluation are those recorded at the last step up to ``step``."""
    if math.isnan(rec["val_loss"]):  # events that keep the loss only as a scalar
        sc = run.scalar("val_loss")
        at = sc.loc[sc["step"] == step, "value"]
        rec["val_loss"] = float(at.iloc[-1]) if len(at) else math.nan
        if not math.isnan(rec["val_loss"]) and math.isnan(rec["val_ppl"]):
            rec["val_ppl"] = math.exp(rec["val_loss"])
    sc = _model_scalars(run, ["acr", "acr_causal"])
    sc = sc[sc["step"] <= step]
    for key in ("acr", "acr_causal"):
        if math.isnan(rec[key]):
            rec[key] = _last(sc, key)
    steps = queries.branch_steps(run)
    steps = steps[steps <= step]
    if len(steps) and run.regime != "full_attention":
        branch = queries.branch_at(run, int(steps[-1]))
        n_layers = branch["layer"].nunique()
        sums = branch.groupby("window")["fraction"].sum()
        for w in windows:
            if math.isnan(rec[f"window_frac_{w}"]):
                rec[f"window_frac_{w}"] = float(sums.get(w, 0.0)) / n_layers
    if math.isnan(rec["flops_ratio_est"]):
        rec["flops_ratio_est"] = _flops_ratio(run, math.nan, rec["acr"])


def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def window_records(run, windows) -> list[dict]:
    """Bucket fractions per layer at the final ``branch`` step, plus an ``all`` row (layer mean)."""
    steps = queries.branch_steps(run)
    ident = identity(run)
    if len(steps) == 0:
        return []
    branch = queries.branch_at(run, int(steps[-1]))
    rows = []
    per_layer = branch[branch["layer"].notna()]
    for layer, part in per_layer.groupby("layer"):
        got = dict(zip(part["window"].astype(int), part["fraction"].astype(float)))
        rows.append(
            {
                **ident,
                "step": int(steps[-1]),
                "layer": str(int(layer)),
                **{f"window_frac_{w}": got.get(int(w), 0.0) for w in windows},
            }
        )
    fr = final_window_fractions(run, windows)
    rows.append({**ident, "step": int(steps[-1]), "layer": "all", **{f"window_frac_{w}": fr[int(w)] for w in windows}})
    return rows


def stability_record(run) -> dict:
    """Routing updates, partition agreement (ARI of consecutive level-0 partitions), switching
    shares, and the controller gradient norm."""
    ups = queries.update_steps(run)
    heads = queries.heads_at_updates(run)
    frame = update_frame(heads, int(run.n_head or 0)) if len(heads) else pd.DataFrame()
    sc = _model_scalars(run, ["controller_grad_norm", "controller_weight_drift"])
    grad = sc.loc[(sc["name"] == "controller_grad_norm") & sc["value"].notna(), "value"].to_numpy()

    def mean_of(col):
        if frame.empty or col not in frame:
            return math.nan
        vals = pd.to_numeric(frame[col], errors="coerce").dropna()
        return float(vals.mean()) if len(vals) else math.nan

    return {
        **identity(run),
        "step": queries.final_step(run),
        "routing_updates": int(len(ups)),
        "update_steps": int(ups["step"].nunique()) if len(ups) else 0,
        "partition_agreement_ari": mean_of("ari"),
        "group_switch_rate": mean_of("group_switch_share"),
        "window_switch_rate": mean_of("window_switch_share"),
        "controller_grad_norm_mean": float(grad.mean()) if grad.size else math.nan,
        "controller_grad_norm_final": float(grad[-1]) if grad.size else math.nan,
        "controller_weight_drift_final": _last(sc, "controller_weight_drift"),
        **_validity_shares(run),
    }


def _validity_shares(run) -> dict:
    """Share of level-0 partitions that are forced splits, and that beat their nulls (nan unrecorded)."""
    validity = queries.cluster_validity(run)
    shares = cluster_validity.run_shares(validity)
    recorded = validity["verdict"].ne(cluster_validity.UNDEFINED).any() if len(validity) else False
    return {
        "forced_share": shares["forced_share"],
        "real_share": shares["real_share"] if recorded else math.nan,
    }


PROBE_PARTS = {
    "claims": (
        "probe_claims",
        ["probe", "relation", "direction", "best_layer", "best_head", "best_direction", "baseline", "beats_baseline"],
        [
            "count",
            "split_half_acc",
            "null_p95",
            "adjusted_p",
            "best_acc",
            "best_ci_low",
            "best_ci_high",
            "baseline_acc",
            "delta",
            "delta_ci_low",
            "delta_ci_high",
            "offset_acc",
            "pos_acc",
            "offset_share",
        ],
    ),
    "comparisons": (
        "comparisons",
        ["level", "layer", "target", "partition_verdict", "reason"],
        ["ari", "null_mean", "null_p95", "p_value", "nmi", "v_measure", "n_groups", "n_probe_clusters"],
    ),
    "association": (
        "window_association",
        ["layer", "target", "reason"],
        ["rho", "null_mean", "p_value", "ci_low", "ci_high", "n_heads"],
    ),
    "relations": (
        "probe_relations",
        ["relation", "best_layer", "best_head", "direction", "baseline_offset"],
        ["count", "best_acc", "baseline_acc", "delta", "delta_ci_low", "delta_ci_high"],
    ),
    "coref": ("probe_coref", ["method", "layer", "head", "bucket"], ["correct", "count", "accuracy"]),
    "heads": ("probe_heads", ["probe", "metric", "layer", "head", "window"], ["value"]),
}


def probe_records(run, part: str) -> list[dict]:
    """Rows of one probe table at its last recorded step (empty when the run has none)."""
    table, keys, values = PROBE_PARTS[part]
    if table not in run.tables():
        return []
    df = run.table(table)
    if df.empty:
        return []
    df = df[df["step"] == df["step"].max()].reindex(columns=["step", *keys, *values])  # older runs: fewer columns
    ident = identity(run)
    out = []
    for _, row in df.iterrows():
        rec = {**ident, "step": int(row["step"])}
        for k in keys:
            v = row[k]
            rec[k] = (
                ""
                if v is None or pd.isna(v)
                else (
                    str(int(v))
                    if isinstance(v, (float, np.floating, np.integer, int)) and not isinstance(v, bool)
                    else str(v)
                )
            )
        for v in values:
            rec[v] = _num(row[v])
        out.append(rec)
    return out
