"""The ``probe_claims`` table: what the best head of a probe target shows once its choice is accounted for.

One row per syntactic relation (and direction, on a causal model) and one for coreference. Each row
holds the best head (the column with the highest accuracy over all items, as ``probe_relations``), and:

- ``best_ci_low``/``best_ci_high``: the best head's accuracy with a 95 % bootstrap over clusters
  (sentences; documents for coreference);
- ``split_half_acc``: the best head chosen on half of the clusters and scored on the other half, both
  ways round, averaged over random halvings (``aah_viz.analysis.selection.split_half_best``);
- ``null_mean``, ``null_p95``, ``adjusted_p``: the best of *all* heads under a within-item label
  shuffle (which candidate is right moves at random; what every head picked stays), per draw, and the
  p-value of the observed best accuracy against it;
- the strongest baseline (``baseline``: ``offset:K``, ``pos`` or a coreference baseline) chosen like the
  head: its accuracy, its split-half accuracy, the best head minus it with a bootstrap interval, and
  ``beats_baseline``: the interval is above zero *and* the split-half head beats the split-half baseline;
- syntax: ``offset_share``, the share of this relation's items where the best head picks the word at
  the offset baseline's offset, and ``positional`` (that share at least one half).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aah_viz.analysis.selection import DEFAULT_NULL_DRAWS, DEFAULT_SPLITS, max_null, split_half_best
from aah_viz.stats.resampling import cluster_bootstrap_interval
from aah_viz.stats.significance import adjusted_p

POSITIONAL_SHARE = 0.5  # positional: at least this share of the predictions sit at one offset (per head, per relation)
INTERVAL_PROBE = "interval"  # probe_heads rows: per-head bootstrap intervals (metric ``METRIC:low``/``:high``)

CLAIM_COLUMNS = [
    "step",
    "probe",
    "relation",
    "direction",
    "count",
    "n_clusters",
    "n_columns",
    "best_layer",
    "best_head",
    "best_direction",
    "best_acc",
    "best_ci_low",
    "best_ci_high",
    "split_half_acc",
    "null_mean",
    "null_p95",
    "adjusted_p",
    "baseline",
    "baseline_acc",
    "baseline_split_half_acc",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
    "beats_baseline",
    "offset_acc",
    "pos_acc",
    "offset_share",
    "positional",
]


@dataclass(frozen=True)
class Items:
    """A probe target's items: per item its cluster, every column's hit and pick, and its choices."""

    clusters: np.ndarray  # (n,) sentence or document of each item
    hits: np.ndarray  # (n, k) bool: column right on the item
    choice: np.ndarray  # (n, k) int: group each column picked, -1 none
    n_choices: np.ndarray  # (n,) groups the item's answer is among
    n_correct: np.ndarray  # (n,) of them right
    baselines: dict  # name -> (n,) bool hits, in tie order


@dataclass(frozen=True)
class Settings:
    n_boot: int = 1000
    n_draws: int = DEFAULT_NULL_DRAWS
    n_splits: int = DEFAULT_SPLITS
    seed: int = 0


DEFAULT_SETTINGS = Settings()  # a frozen value: safe to share as a default


def in_cluster_order(items: Items) -> Items:
    """The items sorted by cluster (stable), so that the draws do not depend on the order inputs were read in."""
    order = np.argsort(items.clusters, kind="stable")
    return Items(
        items.clusters[order],
        items.hits[order],
        items.choice[order],
        np.asarray(items.n_choices)[order],
        np.asarray(items.n_correct)[order],
        {name: np.asarray(hit)[order] for name, hit in items.baselines.items()},
    )


def claim(items: Items, settings: Settings) -> dict:
    """The statistics of one target (columns of ``CLAIM_COLUMNS`` but the naming ones), and ``best`` (the
    best column's index) and ``column_low``/``column_high`` (every column's interval, from the same
    resamples of clusters as the best head's)."""
    items = in_cluster_order(items)
    hits = items.hits.astype(np.float64)
    n, k = hits.shape
    acc = hits.mean(axis=0)
    best = int(np.argmax(acc))  # ties: the first column, as probe_relations
    names = list(items.baselines)
    base = np.stack([items.baselines[name] for name in names], axis=1).astype(np.float64) if names else None
    b = int(np.argmax(base.mean(axis=0))) if names else None  # ties: the first baseline named
    # one set of resamples for every column and the best head's difference from the baseline
    columns = hits if base is None else np.column_stack([hits, hits[:, best] - base[:, b]])
    lo, hi = cluster_bootstrap_interval(
        items.clusters, columns, settings.n_boot, np.random.default_rng([settings.seed, 1])
    )
    split = split_half_best(items.clusters, hits, np.random.default_rng([settings.seed, 2]), settings.n_splits)
    null = max_null(
        items.n_choices, items.n_correct, items.choice, settings.n_draws, np.random.default_rng([settings.seed, 3])
    )
    row = {
        "best": best,
        "column_low": lo[:k],
        "column_high": hi[:k],
        "count": n,
        "n_clusters": int(len(np.unique(items.clusters))),
        "n_columns": k,
        "best_acc": float(acc[best]),
        "best_ci_low": float(lo[best]),
        "best_ci_high": float(hi[best]),
        "split_half_acc": split.score,
        "null_mean": float(null.mean()) if len(null) else np.nan,
        "null_p95": float(np.quantile(null, 0.95)) if len(null) else np.nan,
        "adjusted_p": adjusted_p(float(acc[best]), null),
    }
    if base is not None:
        base_acc = base.mean(axis=0)
        base_split = split_half_best(items.clusters, base, np.random.default_rng([settings.seed, 2]), settings.n_splits)
        row.update(
            baseline=names[b],
            baseline_acc=float(base_acc[b]),
            baseline_split_half_acc=base_split.score,
            delta=float(acc[best] - base_acc[b]),
            delta_ci_low=float(lo[k]),
            delta_ci_high=float(hi[k]),
            beats_baseline=bool(lo[k] > 0 and split.score > base_split.score),
        )
    return row


def interval_rows(step: int, metric_of, low: np.ndarray, high: np.ndarray, n_head: int) -> list[dict]:
    """probe_heads rows (probe ``interval``): ``METRIC:low`` and ``METRIC:high`` of every column's accuracy;
    ``metric_of(column)`` gives the column's (metric, flat head)."""
    rows = []
    for col in range(len(low)):
        metric, flat = metric_of(col)
        layer, head = divmod(int(flat), n_head)
        for end, value in (("low", low[col]), ("high", high[col])):
            rows.append(
                dict(
                    step=step,
                    layer=layer,
                    head=head,
                    probe=INTERVAL_PROBE,
                    metric=f"{metric}:{end}",
                    value=float(value),
                )
            )
    return rows


def syntax_claim(
    row: dict,
    *,
    step: int,
    relation: str,
    direction: str | None,
    best_direction: str,
    flat: int,
    n_head: int,
    offset_acc: float,
    pos_acc: float,
    offset_share: float,
) -> dict:
    """A syntax relation's ``claim`` row completed with what names it and its baselines (the
    bidirectional and the causal scorer write the same columns)."""
    row.update(
        step=step,
        probe="syntax",
        relation=relation,
        direction=direction,
        best_layer=flat // n_head,
        best_head=flat % n_head,
        best_direction=best_direction,
        offset_acc=offset_acc,
        pos_acc=pos_acc,
        offset_share=offset_share,
        positional=offset_share >= POSITIONAL_SHARE,
    )
    return row


def split_claim(row: dict) -> tuple[int, np.ndarray, np.ndarray]:
    """Takes ``best`` and the column intervals out of a :func:`claim` row (which then holds table columns only)."""
    return row.pop("best"), row.pop("column_low"), row.pop("column_high")
