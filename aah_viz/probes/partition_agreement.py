"""Do the AAH head groups line up with what the heads do? The ``comparisons`` table.

For every hierarchy level and layer, the AAH groups (``heads.group_l{i}``) against clusters of that layer's
heads built from their probe profiles (``head_profiles``), each with ``k`` = the number of AAH groups in the
layer (at least 2):

- ARI, NMI and V-measure (scikit-learn's) against a permutation null that shuffles the AAH labels
  within the layer: ``null_mean``, ``null_p95`` (of ARI) and ``p_value = (1 + #{null ARI >=
  observed}) / (1 + permutations)``; ``window_ari`` is the agreement of the window classes with
  the same probe clusters, for reference;
- one pooled row per level and target (``layer`` null): the mean over the non-degenerate layers,
  with a null that permutes within every layer at once (stratified by layer);
- ``degenerate`` and ``reason`` flag rows that cannot say anything: one AAH group, every head
  its own group (grouping off: ARI is 0 by construction while NMI, counting many groups, looks
  high; :func:`flag_without_groups` marks such rows in tables written before), one probe
  cluster, fewer than 3 heads, no probe feature that varies within the layer, or groups identical
  to the window classes (then agreement with probes measures the windows' direct effect on
  attention, not the grouping).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.probes.agreement import scores as batched_scores
from aah_viz.probes.head_profiles import TARGETS, cluster_heads, layer_profile
from aah_viz.stats.significance import adjusted_p

METRIC_NAMES = ("ari", "nmi", "v_measure")
COMPARISON_COLUMNS = [
    "step",
    "level",
    "layer",
    "target",
    "ari",
    "nmi",
    "v_measure",
    "null_mean",
    "null_p95",
    "p_value",
    "nmi_null_mean",
    "v_measure_null_mean",
    "window_ari",
    "n_heads",
    "n_groups",
    "n_probe_clusters",
    "n_layers",
    "degenerate",
    "reason",
    "partition_verdict",
]

# the columns of a comparisons row a reader is shown (CLI and Probes page), in order
SHOWN_COMPARISON_COLUMNS = [
    "level",
    "layer",
    "target",
    "ari",
    "null_mean",
    "null_p95",
    "p_value",
    "nmi",
    "v_measure",
    "n_groups",
    "n_probe_clusters",
    "partition_verdict",
    "degenerate",
    "reason",
]


def sklearn_metrics() -> dict:
    """scikit-learn's scores, imported on use (scikit-learn pulls in scipy.stats, which is slow to import)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, v_measure_score

    return {"ari": adjusted_rand_score, "nmi": normalized_mutual_info_score, "v_measure": v_measure_score}


def permutation_null(aah: np.ndarray, target: np.ndarray, permutations: int, rng) -> dict[str, np.ndarray]:
    """metric -> (permutations,) scores with the AAH labels of one layer shuffled."""
    shuffled = np.stack([rng.permutation(aah) for _ in range(permutations)])
    return batched_scores(shuffled, target)


NO_GROUPS = "every head its own group (no grouping): ARI 0 by construction, NMI high from the many groups"
ALL_DEGENERATE = "every layer degenerate"


def degenerate_reasons(aah: np.ndarray, probe: np.ndarray | None, windows: np.ndarray, n_features: int) -> list[str]:
    """Why a comparison of one layer's AAH groups with its probe clusters cannot say anything."""
    reasons = []
    if len(aah) < 3:
        reasons.append("fewer than 3 heads")
    if len(np.unique(aah)) < 2:
        reasons.append("one AAH group")
    elif len(aah) >= 3 and len(np.unique(aah)) == len(aah):
        reasons.append(NO_GROUPS)
    if probe is None or n_features == 0:
        reasons.append("no probe feature varies within the layer")
    elif len(np.unique(probe)) < 2:
        reasons.append("one probe cluster")
    if len(np.unique(windows)) > 1 and len(np.unique(aah)) > 1:
        if batched_scores(aah[None], windows)["ari"][0] >= 1 - 1e-12:
            reasons.append("groups identical to window classes")
    return reasons


def comparison_row(
    *,
    step: int,
    level: int,
    layer: int | None,
    target: str,
    observed: dict[str, float],
    null: dict[str, np.ndarray] | None,
    window_ari: float,
    n_heads: int,
    n_groups: int,
    n_probe_clusters: int,
    n_layers: int,
    reasons: list[str],
) -> dict:
    """One row of the ``comparisons`` table (every row, per layer or pooled, is built here)."""
    ari = observed.get("ari", np.nan)
    has_null = null is not None and len(null["ari"]) > 0 and np.isfinite(ari)
    return {
        "step": step,
        "level": level,
        "layer": layer,
        "target": target,
        "ari": ari,
        "nmi": observed.get("nmi", np.nan),
        "v_measure": observed.get("v_measure", np.nan),
        "null_mean": float(null["ari"].mean()) if has_null else np.nan,
        "null_p95": float(np.quantile(null["ari"], 0.95)) if has_null else np.nan,
        "p_value": adjusted_p(ari, null["ari"]) if has_null else np.nan,
        "nmi_null_mean": float(null["nmi"].mean()) if has_null else np.nan,
        "v_measure_null_mean": float(null["v_measure"].mean()) if has_null else np.nan,
        "window_ari": window_ari,
        "n_heads": n_heads,
        "n_groups": n_groups,
        "n_probe_clusters": n_probe_clusters,
        "n_layers": n_layers,
        "degenerate": bool(reasons),
        "reason": "; ".join(reasons),
        "partition_verdict": "undefined",  # joined from the run's cluster validity (partition_verdicts)
    }


def partition_rows(
    step: int,
    level: int,
    labels: np.ndarray,
    windows: np.ndarray,
    wide: pd.DataFrame,
    js: np.ndarray | None,
    permutations: int,
    seed: int,
) -> list[dict]:
    """Rows of one level: per layer and target, then pooled per target. ``labels``/``windows``:
    (n_layer, n_head), labels -1 in layers without this level."""
    n_layer, n_head = labels.shape
    metrics = sklearn_metrics()
    rows = []
    pooled: dict[str, list] = {t: [] for t in TARGETS}  # target -> [(observed, null, n_groups, n_probe)]
    for layer in range(n_layer):
        aah = labels[layer]
        if (aah < 0).any():
            continue  # the hierarchy of this layer does not reach this level
        profile = layer_profile(wide, layer, n_head, windows[layer])
        sub_js = (
            js[layer * n_head : (layer + 1) * n_head, layer * n_head : (layer + 1) * n_head] if js is not None else None
        )
        n_groups = len(np.unique(aah))
        clusters = cluster_heads(profile, sub_js, n_groups, seed)
        rng = np.random.default_rng([seed, level, layer])
        for target in TARGETS:
            probe = clusters.get(target)
            if probe is None and target == "js_agglomerative" and sub_js is None:
                continue  # no attention_js rows in this run
            n_features = (
                (sub_js.shape[0] if target == "js_agglomerative" else profile.shape[1]) if probe is not None else 0
            )
            reasons = degenerate_reasons(aah, probe, windows[layer], n_features)
            observed, null, window_ari = {}, None, np.nan
            if probe is not None:
                observed = {name: float(f(aah, probe)) for name, f in metrics.items()}
                null = permutation_null(aah, probe, permutations, rng)
                window_ari = float(metrics["ari"](windows[layer], probe))
                if not reasons:
                    pooled[target].append((observed, null, n_groups, len(np.unique(probe))))
            rows.append(
                comparison_row(
                    step=step,
                    level=level,
                    layer=layer,
                    target=target,
                    observed=observed,
                    null=null,
                    window_ari=window_ari,
                    n_heads=n_head,
                    n_groups=n_groups,
                    n_probe_clusters=len(np.unique(probe)) if probe is not None else 0,
                    n_layers=1,
                    reasons=reasons,
                )
            )
    for target in TARGETS:
        layer_rows = [r for r in rows if r["target"] == target]
        if not layer_rows:
            continue
        parts = pooled[target]
        if parts:
            observed = {m: float(np.mean([p[0][m] for p in parts])) for m in METRIC_NAMES}
            null = {m: np.mean([p[1][m] for p in parts], axis=0) for m in METRIC_NAMES}
            window_ari = float(np.nanmean([r["window_ari"] for r in layer_rows if not r["degenerate"]]))
        else:
            observed, null, window_ari = {}, None, np.nan
        rows.append(
            comparison_row(
                step=step,
                level=level,
                layer=None,
                target=target,
                observed=observed,
                null=null,
                window_ari=window_ari,
                n_heads=n_head * len(parts),
                n_groups=max((p[2] for p in parts), default=0),
                n_probe_clusters=max((p[3] for p in parts), default=0),
                n_layers=len(parts),
                reasons=[] if parts else [ALL_DEGENERATE],
            )
        )
    return rows


def flag_without_groups(comparisons: pd.DataFrame) -> pd.DataFrame:
    """A ``comparisons`` table with the layers whose heads were not grouped (as many groups as heads)
    flagged degenerate, and the pooled rows over only such layers too: tables written before
    :func:`degenerate_reasons` knew the case show ARI 0 beside a high NMI as if it were a result."""
    need = {"layer", "n_heads", "n_groups", "degenerate", "reason", "level", "target"}
    if comparisons.empty or not need <= set(comparisons.columns):
        return comparisons
    out = comparisons.copy()
    out["degenerate"] = out["degenerate"].fillna(False).astype(bool)
    out["reason"] = out["reason"].fillna("").astype(str)
    per_layer = out["layer"].notna()
    alone = (
        per_layer
        & (out["n_heads"] >= 3)
        & (out["n_groups"] >= out["n_heads"])
        & ~out["reason"].str.contains(NO_GROUPS, regex=False)
    )
    out.loc[alone, "reason"] = [f"{r}; {NO_GROUPS}" if r else NO_GROUPS for r in out.loc[alone, "reason"]]
    out.loc[alone, "degenerate"] = True
    keys = [c for c in ("step", "level", "target") if c in out]
    layer_rows = out[per_layer]
    all_bad = layer_rows.groupby(keys, dropna=False)["degenerate"].all() if len(layer_rows) else None
    if all_bad is not None:
        for i in out.index[~per_layer & ~out["degenerate"]]:
            key = tuple(out.loc[i, keys])
            if all_bad.get(key if len(keys) > 1 else key[0], False):
                out.loc[i, "degenerate"] = True
                out.loc[i, "reason"] = ALL_DEGENERATE
    return out


def partition_verdicts(validity: pd.DataFrame, comparisons: pd.DataFrame) -> pd.Series:
    """The cluster-validity verdict (real, chance, undefined) of the partition each row compares.

    Validity is judged for level-0 partitions at routing updates: a row takes the verdict of its
    layer's partition at the newest update at or before the probed step; a pooled row takes the
    layers' common verdict when they all agree. Other levels, and runs without validity rows,
    are ``undefined``.
    """
    out = pd.Series("undefined", index=comparisons.index, dtype=object)
    if validity.empty or comparisons.empty:
        return out
    v = validity.dropna(subset=["step", "layer", "verdict"])
    if "shadow" in v:
        v = v[~v["shadow"].fillna(False).astype(bool)]
    for step in comparisons["step"].unique():
        before = v[v["step"] <= step]
        latest = before.sort_values("step").groupby("layer")["verdict"].last()
        if latest.empty:
            continue
        latest.index = latest.index.astype(int)
        rows = (comparisons["step"] == step) & (comparisons["level"] == 0)
        for i in comparisons.index[rows]:
            layer = comparisons.at[i, "layer"]
            if pd.isna(layer):
                used = comparisons.loc[rows & comparisons["layer"].notna(), "layer"].astype(int).unique()
                verdicts = {latest.get(int(lay), "undefined") for lay in used}
                out[i] = verdicts.pop() if len(verdicts) == 1 else "undefined"
            else:
                out[i] = latest.get(int(layer), "undefined")
    return out
