"""Do the AAH head groups line up with what the heads do? And do windows follow the probes?

Two kinds of comparison, both read from a run directory after ``aah-viz probe``:

``partition_agreement``: at each hierarchy level, the AAH groups (``heads.group_l{i}``) against
head clusters derived from the probes: k-means and agglomerative (Ward) clustering of the heads'
standardised probe profiles (syntax accuracy per relation and direction, coreference accuracy per
distance bucket), and Clark et al.'s clustering by the Jensen-Shannon divergence between heads'
attention (average linkage). Clusters are computed over all heads, with ``k`` the most groups any
layer has at that level (at least 2). AAH groups are per layer, so agreement (ARI, NMI, V-measure,
from scikit-learn) is computed within each layer and averaged over the layers that have the level
(``n`` counts their heads); the permutation null
shuffles the AAH labels within each layer, giving the chance mean and the p-value
``(1 + #{null >= observed}) / (1 + permutations)``.

``window_association``: Spearman's rho between each head's window and its syntax score, its
coreference accuracy, and its coreference accuracy on antecedents within reach; a percentile
bootstrap interval over heads and a two-sided permutation p-value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.probes.agreement import scores as batched_scores

METRIC_NAMES = ("ari", "nmi", "v_measure")


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


COLUMNS = ["step", "kind", "level", "target", "metric", "value", "chance_mean", "p_value", "ci_low", "ci_high", "n"]
ASSOCIATION_SCORES = {  # target name -> (probe, metric)
    "spearman:syntax": ("syntax", "score"),
    "spearman:coref": ("coref", "accuracy"),
    "spearman:coref_reachable": ("coref", "reachable_accuracy"),
}


# ---------------------------------------------------------------------------------------------
# head profiles and probe-derived clusters


def head_profiles(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray:
    """(n_layer*n_head, features): syntax ``REL:DIR`` and coreference ``acc:BUCKET`` metrics,
    missing values filled with the feature's mean, constant features dropped, standardised."""
    rows = probe_heads[
        (
            (probe_heads["probe"] == "syntax")
            & probe_heads["metric"].str.contains(":")
            & ~probe_heads["metric"].str.startswith("all:")
        )
        | ((probe_heads["probe"] == "coref") & probe_heads["metric"].str.startswith("acc:"))
    ]
    if rows.empty:
        return np.zeros((n_layer * n_head, 0))
    wide = rows.assign(flat=rows["layer"].astype(int) * n_head + rows["head"].astype(int)).pivot_table(
        index="flat", columns=["probe", "metric"], values="value", aggfunc="mean"
    )
    wide = wide.reindex(range(n_layer * n_head))
    x = wide.to_numpy(dtype=np.float64)
    keep = ~np.all(np.isnan(x), axis=0)
    x = x[:, keep]
    means = np.nanmean(x, axis=0) if x.shape[1] else np.zeros(0)
    x = np.where(np.isnan(x), means, x)
    std = x.std(axis=0)
    x = x[:, std > 1e-12]
    std = std[std > 1e-12]
    return (x - x.mean(axis=0)) / std if x.shape[1] else x


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


def probe_clusters(
    probe_heads: pd.DataFrame, n_layer: int, n_head: int, k: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Cluster labels over all heads per method (methods without data are left out)."""
    from sklearn.cluster import AgglomerativeClustering, KMeans

    n = n_layer * n_head
    k = int(min(max(k, 2), n - 1))
    out = {}
    x = head_profiles(probe_heads, n_layer, n_head)
    if x.shape[1] > 0 and n > 2:
        out["kmeans:profile"] = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
        out["agglomerative:profile"] = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
    js = js_matrix(probe_heads, n_layer, n_head)
    if js is not None and n > 2:
        out["js_agglomerative"] = AgglomerativeClustering(
            n_clusters=k, metric="precomputed", linkage="average"
        ).fit_predict(js)
    return out


# ---------------------------------------------------------------------------------------------
# agreement with a permutation null


def layerwise_agreement(aah: np.ndarray, target: np.ndarray, metric) -> float:
    """Mean over layers of ``metric(aah[layer], target[layer])``; ``aah``/``target``: (n_layer, n_head)."""
    return float(np.mean([metric(a, t) for a, t in zip(aah, target)]))


def agreement_with_null(
    aah: np.ndarray, target: np.ndarray, permutations: int = 200, seed: int = 0
) -> dict[str, tuple]:
    """metric -> (observed, chance mean, p-value), AAH labels shuffled within each layer.

    Observed values come from scikit-learn; the null's scores from the batched equivalents in
    :mod:`aah_viz.probes.agreement` (equal to scikit-learn's, and fast enough for many permutations).
    """
    rng = np.random.default_rng(seed)
    null = {name: np.zeros(permutations) for name in METRIC_NAMES}
    for row, t in zip(aah, target):
        shuffled = np.stack([rng.permutation(row) for _ in range(permutations)])
        for name, values in batched_scores(shuffled, t).items():
            null[name] += values / len(aah)
    out = {}
    for name, metric in sklearn_metrics().items():
        observed = layerwise_agreement(aah, target, metric)
        p = (1 + int(np.sum(null[name] >= observed - 1e-12))) / (1 + permutations)
        out[name] = (observed, float(null[name].mean()), p)
    return out


# ---------------------------------------------------------------------------------------------
# window association


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of x against each row of y (ties averaged); NaN where a side is constant."""
    rx = rankdata(x, axis=-1)
    ry = rankdata(y, axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    denom = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (rx * ry).sum(-1) / np.where(denom > 0, denom, 1), np.nan)


def spearman_with_uncertainty(x, y, n_boot: int = 1000, permutations: int = 1000, seed: int = 0, level: float = 0.95):
    """(rho, chance mean, permutation p, ci_low, ci_high, n)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    if n < 3:
        return (np.nan, np.nan, np.nan, np.nan, np.nan, n)
    rho = float(_spearman_rows(x, y[None])[0])
    if not np.isfinite(rho):
        return (np.nan, np.nan, np.nan, np.nan, np.nan, n)
    rng = np.random.default_rng(seed)
    perm = np.stack([rng.permutation(y) for _ in range(permutations)])
    null = _spearman_rows(x[None].repeat(permutations, 0), perm)
    null = null[np.isfinite(null)]
    p = (1 + int(np.sum(np.abs(null) >= abs(rho) - 1e-12))) / (1 + len(null))
    idx = rng.integers(0, n, size=(n_boot, n))
    boot = _spearman_rows(x[idx], y[idx])
    boot = boot[np.isfinite(boot)]
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha]) if len(boot) else (np.nan, np.nan)
    return (rho, float(null.mean()) if len(null) else np.nan, p, float(lo), float(hi), n)


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


def compare_run(
    run,
    step: int | None = None,
    level: int | None = None,
    permutations: int = 200,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """The comparisons table of one run (an opened ``aah_viz.runlog.Run``) at a probed step."""
    from aah_viz.errors import RunLogError

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
    rows = []
    heads = run.table("heads")
    if not heads.empty and (heads["step"] <= step).any():
        at = heads[heads["step"] == heads.loc[heads["step"] <= step, "step"].max()]
        max_depth = int(run.max_depth or 0) or sum(c.startswith("group_l") for c in at.columns)
        levels = [level] if level is not None else list(range(max_depth))
        for lv in levels:
            labels = group_labels(at, lv, n_layer, n_head)
            if labels is None:
                continue
            present = (labels >= 0).all(axis=1)  # layers whose hierarchy has this level
            if not present.any():
                continue
            k = max(len(np.unique(row)) for row in labels[present])
            for target, clusters in probe_clusters(probe_heads, n_layer, n_head, k, seed).items():
                clusters = clusters.reshape(n_layer, n_head)[present]
                result = agreement_with_null(labels[present], clusters, permutations, seed)
                for metric, (value, chance, p) in result.items():
                    rows.append(
                        {
                            "step": step,
                            "kind": "partition_agreement",
                            "level": lv,
                            "target": target,
                            "metric": metric,
                            "value": value,
                            "chance_mean": chance,
                            "p_value": p,
                            "ci_low": np.nan,
                            "ci_high": np.nan,
                            "n": int(present.sum()) * n_head,
                        }
                    )
    for target, (probe, metric) in ASSOCIATION_SCORES.items():
        sel = probe_heads[(probe_heads["probe"] == probe) & (probe_heads["metric"] == metric)]
        if sel.empty:
            continue
        rho, chance, p, lo, hi, n = spearman_with_uncertainty(
            sel["window"], sel["value"], n_boot, permutations * 5, seed
        )
        rows.append(
            {
                "step": step,
                "kind": "window_association",
                "level": None,
                "target": target,
                "metric": "spearman",
                "value": rho,
                "chance_mean": chance,
                "p_value": p,
                "ci_low": lo,
                "ci_high": hi,
                "n": n,
            }
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["level"] = table["level"].astype("Int64")
    table["n"] = table["n"].astype("Int64")
    return table
