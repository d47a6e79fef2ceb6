"""The kinds of table, ``TABLE_KINDS``: where each kind's rows come from, its value columns and caption.

A kind's ``rows`` turns the runs of one configuration into records (one per run, or per run and
key: layer, probe target, ...); :func:`aah_viz.export.tables.build_table` does the rest (summary
per regime, layout, notes) the same way for every kind. A kind whose rows are not summarised per
regime (a frontier's configurations, head similarities) gives ``own_table`` instead, which makes its
whole table. Adding a kind is one entry in ``TABLE_KINDS`` (and its name in the CLI's ``--table``
choices).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from aah_viz.export import frontier, head_similarity, paper_layout, records
from aah_viz.export.columns import window_columns
from aah_viz.export.table import Table

PROBE_PARTS = tuple(records.PROBE_PARTS)


@dataclass
class Rows:
    """A kind's records for some runs, and what the table says about them."""

    records: list[dict]
    values: list[str]  # value columns, in order
    caption: str
    keys: tuple[str, ...] = ()  # who a row is beyond run, regime and seed; regimes are summarised per key
    extra: tuple[str, ...] = ()  # more numbers summarised per regime (columns of the paper's layout)
    empty_message: str = "no rows: the runs recorded nothing for this table"
    lead_notes: list[str] = field(default_factory=list)  # what the numbers are, first under the table
    tail_notes: list[str] = field(default_factory=list)  # last, before any comparison with a baseline


@dataclass(frozen=True)
class TableKind:
    # rows(runs, windows, part=..., source=...): the runs in the paper's order, their candidate windows
    rows: Callable[..., Rows] | None = None
    own_table: Callable[..., Table] | None = None  # own_table(runs): the kind's whole table, no regime summary
    paper: paper_layout.PaperLayout | None = None  # the reference publishes this table (layout="paper")
    baseline_notes: bool = False  # with baseline=..., notes on each regime's final val_loss against it
    parts: tuple[str, ...] = ()  # the sub-tables chosen with part=...
    part_noun: str = "part"
    # windows(runs, candidates, source=...): the window columns, where they are not the candidate windows
    windows: Callable[..., list[int]] | None = None


def _coverage_notes(recs: list[dict], *, training: bool) -> list[str]:
    notes = [
        "FLOPs ratio is the analytic estimate of method section 11.1 (attention share of an analytic budget), "
        "not a measured FLOP count."
    ]
    if training:
        notes.append(
            "ACR and window fractions are those of the final recorded step; tokens/s is the median over "
            "recorded steps; peak memory is the maximum recorded."
        )
    imported = [rec["run"] for rec in recs if rec["imported"]]
    if imported:
        notes.append("Imported (published) numbers: " + ", ".join(imported) + ".")
    return notes


def training_rows(runs, windows, **_) -> Rows:
    recs = [records.training_record(r, windows) for r in runs]
    for rec in recs:
        rec["peak_mem_gib"] = rec["peak_mem_mb"] / 1024.0
        rec["peak_reserved_gib"] = rec["peak_reserved_mb"] / 1024.0
    return Rows(
        recs,
        ["val_loss", "val_ppl", "acr", "acr_causal", "flops_ratio_est", "tokens_per_s", "peak_mem_mb"]
        + window_columns(windows),
        "Training: final validation loss and perplexity, ACR (key-length proxy) and causal-pair coverage at the "
        "final step, FLOPs ratio (analytic estimate, not a measurement), median training tokens/s, peak memory, "
        "window-bucket fractions at the final step.",
        extra=("peak_mem_gib", "peak_reserved_gib", "peak_reserved_mb"),
        lead_notes=_coverage_notes(recs, training=True),
    )


def inference_rows(runs, windows, **_) -> Rows:
    recs = [records.inference_record(r, windows) for r in runs]
    tail = []
    if any(r.get("source") == "eval" for r in recs):
        tail.append(
            "Runs without an inference record report their last training-time evaluation; its ACR, "
            "coverage and window fractions are those of the routing state at that step."
        )
    return Rows(
        recs,
        [k for k in records.INFERENCE_KEYS if k != "peak_mem_mb"] + window_columns(windows),
        "Inference: validation loss and perplexity, ACR and causal-pair coverage, FLOPs ratio (analytic estimate), "
        "tokens/s and wall time of the evaluation, window-bucket fractions, from each run's last inference "
        "(else evaluation) record.",
        lead_notes=_coverage_notes(recs, training=False),
        tail_notes=tail,
    )


def windows_rows(runs, windows, *, source: str = "final", **_) -> Rows:
    wcols = window_columns(windows)
    if source == "inference":
        recs = []
        for r in runs:
            inf = records.inference_record(r, windows)
            if inf["source"] and any(not math.isnan(inf[c]) for c in wcols):
                recs.append(
                    {
                        **{k: inf[k] for k in ("run", "regime", "method", "seed", "imported", "step")},
                        "layer": "all",
                        **{c: inf[c] for c in wcols},
                    }
                )
        caption = "Window-bucket fractions at evaluation (each run's inference record, all layers and batches)."
    else:
        recs = [row for r in runs for row in records.window_records(r, windows)]
        caption = "Window-bucket fractions per layer at the final step (the row 'all' is the mean over layers)."
    return Rows(
        recs,
        wcols,
        caption,
        keys=("layer",),
        empty_message="no run here recorded window-bucket fractions (the branch table is empty)",
    )


def stability_rows(runs, windows, **_) -> Rows:
    return Rows(
        [records.stability_record(r) for r in runs],
        [
            "routing_updates",
            "partition_agreement_ari",
            "group_switch_rate",
            "window_switch_rate",
            "controller_grad_norm_mean",
            "controller_grad_norm_final",
            "forced_share",
            "real_share",
        ],
        "Routing stability: routing updates recorded (layer x update), mean adjusted Rand index of consecutive "
        "level-0 partitions, mean share of heads changing group / window between consecutive updates, "
        "controller gradient norm; share of level-0 partitions that are forced splits, and share whose "
        "silhouette beats both nulls (random relabelings, clustering of structureless heads).",
    )


PROBE_CAPTIONS = {
    "claims": "Best heads once their choice among all heads is accounted for: accuracy chosen on half the "
    "sentences (documents) and scored on the other half, the 95th percentile of the best of all heads with "
    "each item's answer shuffled and the adjusted p, the best head's accuracy with a 95% bootstrap interval, "
    "the strongest baseline (fixed offsets, nearest word of the answer's part of speech, mention baselines) "
    "and whether the head beats it.",
    "comparisons": "Learned head groups against clusters of the same layer's heads built from their "
    "probe profiles: ARI against a within-layer permutation null (mean, 95th percentile), p-value, "
    "NMI, V-measure; pooled rows (no layer) use a layer-stratified null; the compared partition's "
    "cluster-validity verdict; degenerate rows give their reason.",
    "association": "Spearman's rho of window against probe score within layers, with a permutation "
    "null, p-value and 95% bootstrap interval; pooled rows (no layer) weight layers by heads.",
    "relations": "Syntactic relations: best head and its accuracy against the best fixed-offset baseline, "
    "their difference with a 95% bootstrap interval over sentences.",
    "coref": "Coreference: accuracy by antecedent distance, heads against baselines.",
    "heads": "Per-head probe scores.",
}


def probe_rows(runs, windows, *, part: str = "comparisons", **_) -> Rows:
    table, keys, values = records.PROBE_PARTS[part]
    return Rows(
        [row for r in runs for row in records.probe_records(r, part)],
        list(values),
        PROBE_CAPTIONS[part],
        keys=tuple(keys),
        empty_message=f"no run here has a {table} table; run `aah-viz probe` (and `aah-viz compare`) on a run first",
    )


def _evaluated_windows(runs, windows, **_) -> list[int]:
    """Fractions at evaluation are over the windows it executed (a sliding window outside the candidates)."""
    return records.evaluated_windows(runs, windows)


def _windows_of_source(runs, windows, *, source: str = "final", **_) -> list[int]:
    return _evaluated_windows(runs, windows) if source == "inference" else list(windows)


TABLE_KINDS: dict[str, TableKind] = {
    "training": TableKind(training_rows, paper=paper_layout.TRAINING, baseline_notes=True),
    "inference": TableKind(
        inference_rows, paper=paper_layout.INFERENCE, baseline_notes=True, windows=_evaluated_windows
    ),
    "windows": TableKind(windows_rows, windows=_windows_of_source),
    "stability": TableKind(stability_rows),
    "probes": TableKind(probe_rows, parts=PROBE_PARTS, part_noun="probe table"),
    "head_similarity": TableKind(own_table=head_similarity.build_tables),
    "head_similarity_summary": TableKind(own_table=head_similarity.build_summary_tables),
    "frontier": TableKind(own_table=frontier.build_tables),
}
TABLE_NAMES = tuple(TABLE_KINDS)
