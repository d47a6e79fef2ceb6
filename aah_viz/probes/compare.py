"""Do the AAH head groups line up with what the heads do? And do windows follow the probes?

Both comparisons are made *within a layer*: AAH groups heads layer by layer, and heads of
different layers differ in everything, so a comparison across layers mostly rediscovers the
layer. Read from a run directory after ``aah-viz probe``.

``comparisons`` (partition agreement): for every hierarchy level and layer, the AAH groups
(``heads.group_l{i}``) against clusters of that layer's heads built from their probe profiles:

- a profile has three families, each standardised over the layer's heads and weighted so that
  every family counts the same: syntax accuracy per relation and direction; coreference accuracy
  per antecedent-distance bucket, only for buckets every head of the layer can reach (beyond a
  head's window its accuracy is zero by construction, which would sort heads by window); and the
  share of attention per token distance (with the share on later tokens);
- targets: ``kmeans:profile``, ``agglomerative:profile`` (Ward) and ``js_agglomerative`` (average
  linkage on Clark et al.'s Jensen-Shannon divergence between the heads' attention), each with
  ``k`` = the number of AAH groups in the layer (at least 2);
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

``window_association``: Spearman's rho between the heads' windows and their syntax score,
coreference accuracy and coreference accuracy within reach, per layer and pooled as the
head-weighted mean of the within-layer rhos (layers whose heads share one window carry no
information and are left out); the permutation null permutes windows within layers and the 95 %
bootstrap interval resamples heads within layers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.analysis import queries
from aah_viz.errors import RunLogError
from aah_viz.probes.agreement import scores as batched_scores
from aah_viz.probes.syntax_causal import SYNTAX_DIRECTIONS

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
ASSOCIATION_COLUMNS = [
    "step",
    "layer",
    "target",
    "rho",
    "null_mean",
    "p_value",
    "ci_low",
    "ci_high",
    "n_heads",
    "n_layers",
    "degenerate",
    "reason",
]
ASSOCIATION_SCORES = {  # target name -> (probe, metric)
    "spearman:syntax": ("syntax", "score"),
    "spearman:coref": ("coref", "accuracy"),
    "spearman:coref_reachable": ("coref", "reachable_accuracy"),
}
TARGETS = ("kmeans:profile", "agglomerative:profile", "js_agglomerative")


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


def rankdata(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Ranks from 1 along ``axis``, ties given their average rank (as ``scipy.stats.rankdata``)."""
    a = np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1)
    order = np.argsort(a, axis=-1, kind="stable")
    sorted_a = np.take_along_axis(a, order, axis=-1)
    n = a.shape[-1]
    new = np.ones(sorted_a.shape, dtype=bool)
    new[..., 1:] = sorted_a[..., 1:] != sorted_a[..., :-1]
    group = np.cumsum(new, axis=-1) - 1  # tie-group index per sorted position
    pos = np.broadcast_to(np.arange(1, n + 1, dtype=np.float64), sorted_a.shape)
    flat_group = group.reshape(-1, n) + (np.arange(group.reshape(-1, n).shape[0]) * n)[:, None]
    sums = np.bincount(flat_group.ravel(), weights=pos.reshape(-1), minlength=flat_group.size)
    counts = np.bincount(flat_group.ravel(), minlength=flat_group.size)
    avg_sorted = (sums / np.maximum(counts, 1))[flat_group].reshape(sorted_a.shape)
    ranks = np.empty_like(avg_sorted)
    np.put_along_axis(ranks, order, avg_sorted, axis=-1)
    return np.moveaxis(ranks, -1, axis)


# ---------------------------------------------------------------------------------------------
# per-layer head profiles and probe-derived clusters


def _family(wide: pd.DataFrame, probe: str) -> pd.DataFrame:
    cols = [c for c in wide.columns if c[0] == probe]
    return wide[cols] if cols else wide.iloc[:, :0]


def _bucket_lo(metric: str) -> int:
    label = metric.split(":", 1)[1]
    return int(label.rstrip("+").split("-")[0])


def wide_probe_heads(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> pd.DataFrame:
    """(n_layer*n_head) x (probe, metric) values of the profile metrics, rows in head order."""
    ph = probe_heads
    metric = ph["metric"].astype(str)
    syntax = (
        (ph["probe"] == "syntax")
        & metric.str.contains(f":(?:{'|'.join(SYNTAX_DIRECTIONS)})$")
        & ~metric.str.startswith("all:")
    )
    coref = (ph["probe"] == "coref") & metric.str.startswith("acc:")
    distance = ph["probe"] == "distance"
    rows = ph[syntax | coref | distance]
    if rows.empty:
        return pd.DataFrame(index=range(n_layer * n_head))
    flat = rows["layer"].astype(int) * n_head + rows["head"].astype(int)
    wide = rows.assign(flat=flat).pivot_table(index="flat", columns=["probe", "metric"], values="value", aggfunc="mean")
    return wide.reindex(range(n_layer * n_head))


def layer_profile(wide: pd.DataFrame, layer: int, n_head: int, windows: np.ndarray) -> np.ndarray:
    """(n_head, features) profile of one layer's heads: each family standardised over the layer's
    heads (missing values filled with the mean, constant features dropped) and scaled by
    1/sqrt(its feature count), so syntax, coreference and distance weigh the same."""
    block = wide.iloc[layer * n_head : (layer + 1) * n_head]
    reach = int(np.min(windows)) if len(windows) else 0
    parts = []
    for probe in ("syntax", "coref", "distance"):
        fam = _family(block, probe)
        if probe == "coref":  # only buckets every head of the layer can reach
            fam = fam[[c for c in fam.columns if _bucket_lo(c[1]) < reach]]
        x = fam.to_numpy(dtype=np.float64)
        if x.size == 0:
            continue
        x = x[:, ~np.all(np.isnan(x), axis=0)]
        if x.shape[1] == 0:
            continue
        x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
        std = x.std(axis=0)
        x = x[:, std > 1e-12]
        if x.shape[1] == 0:
            continue
        parts.append((x - x.mean(axis=0)) / std[std > 1e-12] / np.sqrt(x.shape[1]))
    return np.concatenate(parts, axis=1) if parts else np.zeros((n_head, 0))


def js_matrix(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray | None:
    rows = probe_heads[probe_heads["probe"] == "attention_js"]
    if rows.empty:
        return None
    n = n_layer * n_head
    m = np.full((n, n), np.nan)
    parts = rows["metric"].str.split(":", expand=True)
    i = rows["layer"].astype(int).to_numpy() * n_head + rows["head"].astype(int).to_numpy()
    j = parts[1].astype(int).to_numpy() * n_head + parts[2].astype(int).to_numpy()
    m[i, j] = rows["value"].to_numpy(dtype=np.float64)
    if np.isnan(m).any():
        return None
    m = 0.5 * (m + m.T)
    np.fill_diagonal(m, 0.0)
    return np.maximum(m, 0.0)


def cluster_heads(profile: np.ndarray, js: np.ndarray | None, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Cluster labels of one layer's heads per target (targets without data are left out)."""
    from sklearn.cluster import AgglomerativeClustering, KMeans

    n = profile.shape[0]
    if n < 3:
        return {}
    k = int(min(max(k, 2), n - 1))
    out = {}
    if profile.shape[1] > 0:
        out["kmeans:profile"] = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(profile)
        out["agglomerative:profile"] = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(profile)
    if js is not None:
        out["js_agglomerative"] = AgglomerativeClustering(
            n_clusters=k, metric="precomputed", linkage="average"
        ).fit_predict(js)
    return out


# ---------------------------------------------------------------------------------------------
# agreement with a layer-stratified permutation null


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
        "p_value": (1 + int(np.sum(null["ari"] >= ari - 1e-12))) / (1 + len(null["ari"])) if has_null else np.nan,
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


# ---------------------------------------------------------------------------------------------
# window association, stratified by layer


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of x against each row of y (ties averaged); NaN where a side is constant."""
    rx = rankdata(x, axis=-1)
    ry = rankdata(y, axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    denom = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 1e-12, (rx * ry).sum(-1) / np.where(denom > 1e-12, denom, 1), np.nan)


def stratified_spearman(
    windows: list[np.ndarray],
    scores: list[np.ndarray],
    n_boot: int = 1000,
    permutations: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict:
    """Head-weighted mean of within-stratum Spearman rhos, with a within-stratum permutation null
    (two-sided p) and a bootstrap over heads within strata. Strata where windows or scores are
    constant, or with fewer than 3 heads, are left out (``reason`` says why when none is left)."""
    use_w, use_s, reasons = [], [], set()
    for w, s in zip(windows, scores):
        ok = np.isfinite(w) & np.isfinite(s)
        w, s = np.asarray(w, dtype=np.float64)[ok], np.asarray(s, dtype=np.float64)[ok]
        if len(w) < 3:
            reasons.add("fewer than 3 heads")
        elif len(np.unique(w)) < 2:
            reasons.add("all heads one window")
        elif len(np.unique(s)) < 2:
            reasons.add("score constant")
        else:
            use_w.append(w)
            use_s.append(s)
    n_heads = int(sum(len(w) for w in use_w))
    out = {"rho": np.nan, "null_mean": np.nan, "p_value": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    out.update(
        n_heads=n_heads, n_layers=len(use_w), degenerate=not use_w, reason="" if use_w else "; ".join(sorted(reasons))
    )
    if not use_w:
        return out
    weights = np.array([len(w) for w in use_w], dtype=np.float64)
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    rho = float(sum(wt * _spearman_rows(w[None], s[None])[0] for wt, w, s in zip(weights, use_w, use_s)))
    null = np.zeros(permutations)
    boot = np.zeros(n_boot)
    boot_ok = np.ones(n_boot, dtype=bool)
    for wt, w, s in zip(weights, use_w, use_s):
        perm = np.stack([rng.permutation(w) for _ in range(permutations)])
        null += wt * _spearman_rows(perm, np.broadcast_to(s, perm.shape))
        idx = rng.integers(0, len(w), size=(n_boot, len(w)))
        b = _spearman_rows(w[idx], s[idx])
        boot_ok &= np.isfinite(b)
        boot += wt * np.nan_to_num(b)
    alpha = (1 - level) / 2
    boot = boot[boot_ok]
    lo, hi = np.quantile(boot, [alpha, 1 - alpha]) if len(boot) else (np.nan, np.nan)
    out.update(
        rho=rho,
        null_mean=float(null.mean()),
        p_value=(1 + int(np.sum(np.abs(null) >= abs(rho) - 1e-12))) / (1 + permutations),
        ci_low=float(lo),
        ci_high=float(hi),
    )
    return out


def association_rows(step: int, probe_heads: pd.DataFrame, n_boot: int, permutations: int, seed: int) -> list[dict]:
    rows = []
    for target, (probe, metric) in ASSOCIATION_SCORES.items():
        sel = probe_heads[(probe_heads["probe"] == probe) & (probe_heads["metric"] == metric)]
        if sel.empty:
            continue
        by_layer = {int(layer): part for layer, part in sel.groupby("layer")}
        strata = {
            layer: (part["window"].to_numpy(np.float64), part["value"].to_numpy(np.float64))
            for layer, part in sorted(by_layer.items())
        }
        for layer, (w, s) in strata.items():
            result = stratified_spearman([w], [s], n_boot, permutations, seed)
            rows.append({"step": step, "layer": layer, "target": target, **result})
        result = stratified_spearman(
            [w for w, _ in strata.values()], [s for _, s in strata.values()], n_boot, permutations, seed
        )
        rows.append({"step": step, "layer": None, "target": target, **result})
    return rows


# ---------------------------------------------------------------------------------------------
# one run


def group_labels(heads_at_step: pd.DataFrame, level: int, n_layer: int, n_head: int) -> np.ndarray | None:
    col = f"group_l{level}"
    if col not in heads_at_step or heads_at_step[col].isna().all():
        return None
    labels = np.full((n_layer, n_head), -1, dtype=np.int64)
    for layer, head, g in zip(heads_at_step["layer"], heads_at_step["head"], heads_at_step[col]):
        labels[int(layer), int(head)] = -1 if pd.isna(g) else int(g)
    return labels


def same_partitions(a: np.ndarray, b: np.ndarray) -> bool:
    """(n_layer, n_head) labels ``a`` and ``b`` split every layer's heads the same way (ids aside)."""
    for x, y in zip(a, b):
        pairs = set(zip(x.tolist(), y.tolist()))
        if len(pairs) != len(set(x.tolist())) or len(pairs) != len(set(y.tolist())):
            return False
    return True


def head_windows(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray:
    """(n_layer, n_head) windows the heads were probed with (from any probe_heads row)."""
    w = np.zeros((n_layer, n_head), dtype=np.int64)
    first = probe_heads.dropna(subset=["window"]).drop_duplicates(["layer", "head"])
    w[first["layer"].astype(int), first["head"].astype(int)] = first["window"].astype(int)
    return w


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


def compare_run(
    run,
    step: int | None = None,
    level: int | None = None,
    permutations: int = 200,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """The ``comparisons`` and ``window_association`` tables of one run (an opened
    ``aah_viz.runlog.Run``) at a probed step."""
    probe_heads = run.table("probe_heads")
    if probe_heads.empty:
        raise RunLogError(f"run {run.path} has no probe_heads table; run `aah-viz probe {run.path}` first")
    steps = sorted(int(s) for s in probe_heads["step"].unique())
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise RunLogError(f"run {run.path} was probed at steps {steps}, not at step {step}")
    probe_heads = probe_heads[probe_heads["step"] == step]
    n_layer = int(run.n_layer or probe_heads["layer"].max() + 1)
    n_head = int(run.n_head or probe_heads["head"].max() + 1)
    windows = head_windows(probe_heads, n_layer, n_head)
    rows = []
    heads = run.table("heads")
    if not heads.empty and (heads["step"] <= step).any():
        at = heads[heads["step"] == heads.loc[heads["step"] <= step, "step"].max()]
        max_depth = int(run.max_depth or 0) or sum(c.startswith("group_l") for c in at.columns)
        levels = [level] if level is not None else list(range(max_depth))
        wide = wide_probe_heads(probe_heads, n_layer, n_head)
        js = js_matrix(probe_heads, n_layer, n_head)
        below = None
        for lv in levels:
            labels = group_labels(at, lv, n_layer, n_head)
            if labels is None or not (labels >= 0).all(axis=1).any():
                continue
            if level is None and below is not None and same_partitions(labels, below):
                continue  # a level that repeats the one below it compares the same partition again
            rows += partition_rows(step, lv, labels, windows, wide, js, permutations, seed)
            below = labels
    comparisons = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    comparisons["partition_verdict"] = partition_verdicts(queries.cluster_validity(run), comparisons)
    for col in ("level", "layer", "n_heads", "n_groups", "n_probe_clusters", "n_layers"):
        comparisons[col] = comparisons[col].astype("Int64")
    association = pd.DataFrame(
        association_rows(step, probe_heads, n_boot, permutations * 5, seed), columns=ASSOCIATION_COLUMNS
    )
    for col in ("layer", "n_heads", "n_layers"):
        association[col] = association[col].astype("Int64")
    return {"comparisons": comparisons, "window_association": association}
