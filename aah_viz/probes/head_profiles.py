"""Each head's probe profile within its layer, and the clusters of a layer's heads built from it.

A profile has three families, each standardised over the layer's heads and weighted so that every family
counts the same: syntax accuracy per relation and direction; coreference accuracy per antecedent-distance
bucket, only for buckets every head of the layer can reach (beyond a head's window its accuracy is zero by
construction, which would sort heads by window); and the share of attention per token distance (with the
share on later tokens). The targets the AAH groups are compared with (``partition_agreement``):
``kmeans:profile``, ``agglomerative:profile`` (Ward) and ``js_agglomerative`` (average linkage on Clark et
al.'s Jensen-Shannon divergence between the heads' attention).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.probes.syntax_causal import SYNTAX_DIRECTIONS

TARGETS = ("kmeans:profile", "agglomerative:profile", "js_agglomerative")


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
