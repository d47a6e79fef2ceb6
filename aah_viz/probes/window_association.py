"""Do windows follow the probes? The ``window_association`` table.

Spearman's rho between the heads' windows and their syntax score, coreference accuracy and coreference
accuracy within reach, per layer and pooled as the head-weighted mean of the within-layer rhos (layers whose
heads share one window carry no information and are left out); the permutation null permutes windows within
layers and the 95 % bootstrap interval resamples heads within layers (``aah_viz.stats.ranks.stratified_spearman``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.stats.ranks import stratified_spearman

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
