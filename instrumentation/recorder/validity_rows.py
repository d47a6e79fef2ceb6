"""The recorder's ``cluster_validity`` rows: one per level-0 partition at a routing update."""

from __future__ import annotations

import numpy as np

from aah_viz.analysis.cluster_validity import partition_row
from instrumentation.routing.clustering import labels_from_groups


def validity_columns(updates: list[dict], threshold: float) -> dict[str, list]:
    """Columns of the ``cluster_validity`` table for the recorder's buffered routing updates.

    Each update holds its tree levels and the heads' level-0 clustering features (``None`` where the
    partition was not fitted here: fixed and frozen paths); the null draws are seeded by step and
    layer, so a resumed run writes the rows an uninterrupted one would.
    """
    rows = []
    for upd in updates:
        level0 = next((lv for lv in upd["levels"] if lv["level"] == 0), None)
        if level0 is None:
            continue
        feats = upd.get("features")
        n_heads = sum(len(m) for m in level0["members"])
        rows.append(
            partition_row(
                upd["step"],
                upd["layer"],
                None if feats is None else np.asarray(feats, dtype=np.float32),
                labels_from_groups(level0["members"], n_heads),
                threshold=threshold,
                origin=level0["facts"].origin or "natural",
                shadow=upd["shadow"],
            )
        )
    return {key: [row[key] for row in rows] for key in rows[0]} if rows else {}
