"""The run-directory contract: schema version, table names and their columns.

A run directory holds ``manifest.json`` and one folder per table of Parquet segments.
``docs/log-format.md`` documents every field; this module is the single source the writer,
the reader, ``aah-viz validate`` and the tests share. Columns listed here are required;
a table may carry more (readers ignore unknown columns). ``group_l{i}`` columns in ``heads``
are one per hierarchy level that the run can have (``i`` from 0 to ``max_depth - 1``).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1.0"  # major.minor; a reader refuses a newer major
MANIFEST = "manifest.json"

# status values in the manifest
STATUS_RUNNING, STATUS_FINISHED, STATUS_FAILED, STATUS_IMPORTED = "running", "finished", "failed", "imported"
STATUS_STOPPED = "stopped"  # a signal ended training after a step: its rows and checkpoint saved, ready to resume

LIST_INT = pa.list_(pa.int32())
LIST_FLOAT = pa.list_(pa.float32())

TABLES: dict[str, dict[str, pa.DataType]] = {
    # one row per (step, layer, head) for every recorded training step
    "heads": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "head": pa.int16(),
        "window_idx": pa.int8(),  # executed candidate index
        "window": pa.int32(),  # executed window in tokens (the raw candidate, not W_min-clamped)
        "raw_idx": pa.int8(),  # level-0 argmax before the parent constraint; null on cached steps
        # + group_l0 ... group_l{max_depth-1}: pa.int16(), null where the level does not exist
    },
    # one row per node of the hierarchy of one layer at one routing update (or warm-up shadow build)
    "tree": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "level": pa.int8(),
        "node": pa.int16(),  # group index at this level
        "parent": pa.int16(),  # node index at level+1; null at the top level
        "members": LIST_INT,  # member heads (leaves), ascending
        "children": LIST_INT,  # node indices at level-1 (level 0: the member heads)
        "logits": LIST_FLOAT,  # final logits per candidate (after the joint scorer / sibling bias)
        "base_logits": LIST_FLOAT,  # the controller's own logits before any pairwise term
        "margin": pa.float32(),  # top-1 minus top-2 of the final logits
        "raw_idx": pa.int8(),  # argmax before the parent constraint
        "final_idx": pa.int8(),  # after the parent constraint
        "joint_paired": pa.bool_(),  # scored jointly with a sibling
        "joint_delta": pa.float32(),  # L2 norm of (final logits - base logits); 0 when unpaired
        "shadow": pa.bool_(),  # decision computed but not executed (warm-up / control off)
        "origin": pa.string(),  # clustering origin of this level: natural, forced_bipartition, collapsed, ...
        "forced_split": pa.bool_(),
        "merged": pa.int16(),  # small groups merged at this level
        "sim_mean": pa.float32(),
        "sim_std": pa.float32(),
        "sim_min": pa.float32(),
        "sim_max": pa.float32(),
        "features": LIST_FLOAT,  # the node's feature row (9-D); empty unless detail="full"
    },
    # window-bucket shares per layer and step (the paper's "branch frequencies")
    "branch": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "window": pa.int32(),
        "fraction": pa.float32(),
    },
    # named scalars; layer is null for model-wide values
    "scalars": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "name": pa.string(),
        "value": pa.float64(),
    },
    # validity of the level-0 partition of one layer at one routing update (aah_viz.analysis.cluster_validity)
    "cluster_validity": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "origin": pa.string(),  # natural, forced_bipartition, frozen, fixed, collapsed, ungrouped, ...
        "shadow": pa.bool_(),  # built but not executed (warm-up, control off)
        "n_heads": pa.int16(),
        "n_groups": pa.int16(),
        "threshold": pa.float32(),  # the level-0 similarity threshold
        "sim_min": pa.float32(),  # pairwise cosine similarity of the heads' routing features
        "sim_median": pa.float32(),
        "sim_max": pa.float32(),
        "silhouette": pa.float32(),  # of the partition, on cosine distance
        "null_mean": pa.float32(),  # random partitions with the same group sizes
        "null_p95": pa.float32(),
        "null_p_value": pa.float32(),
        "refit_mean": pa.float32(),  # structureless heads clustered into the same number of groups
        "refit_p95": pa.float32(),
        "refit_p_value": pa.float32(),
        "verdict": pa.string(),  # real, chance, undefined
    },
    # written by ``aah-viz profile``: per head, the share of its full-attention mass inside each candidate
    # window and the smallest window that keeps 95% / 99% of it, beside the window it executes
    "head_spans": {
        "step": pa.int64(),  # the checkpoint step profiled (0 for a model folder)
        "layer": pa.int16(),
        "head": pa.int16(),
        "window": pa.int32(),  # a candidate window (tokens)
        "mass_share": pa.float64(),  # mean over queries of the attention mass on the last `window` keys
        "needed_95": pa.int32(),  # smallest window (tokens) keeping 95% of the mass, any size
        "needed_99": pa.int32(),
        "executed_window": pa.int32(),  # the window routing executes for this head
    },
    # written by ``aah-viz profile --retrieval N``: per head, the passkey questions answered with that head
    # alone cut to ``window`` (and the first ``sink_tokens`` positions), every other head at full attention
    "head_retrieval": {
        "step": pa.int64(),  # the checkpoint step profiled (0 for a model folder)
        "layer": pa.int16(),
        "head": pa.int16(),
        "window": pa.int32(),  # the window (tokens) this head alone was cut to
        "sink_tokens": pa.int32(),  # first positions it kept besides the window
        "asked": pa.int32(),  # passkey questions
        "retrieved": pa.int32(),  # answered (every answer token the model's argmax)
        "lost": pa.int32(),  # answered with every head at full attention, not with this head cut
        "answer_nll": pa.float64(),  # mean negative log-likelihood of the answer tokens (nats)
    },
    # discrete events: routing_update, warmup_end, freeze, eval, checkpoint, resume, fallback, ...
    "events": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "kind": pa.string(),
        "detail": pa.string(),  # JSON object
    },
}

# Scalar names with a fixed meaning (others may be added; docs/log-format.md lists them all).
SCALAR_NAMES = {
    "acr": "ACR, the paper's key-length proxy: sum of T*w over heads / (H*T^2)",
    "acr_causal": "causal-pair coverage: attended causal (query,key) pairs / all T(T+1)/2 causal pairs",
    "realised_work": "query-key score elements the backend actually computed / the T(T+1)/2 per "
    "head of full causal attention (dense masked: about 2)",
    "loss": "training loss of the step's batch (nats)",
    "val_loss": "mean validation loss (nats)",
    "val_ppl": "exp(val_loss)",
    "lr": "learning rate",
    "tokens_per_s": "training tokens per second over the step",
    "step_time_s": "wall time of the step",
    "peak_mem_mb": "peak memory (CUDA allocated, or CPU max RSS) in MiB",
    "controller_grad_norm": "L2 norm of the controller and joint-scorer gradients (0 when none reach them)",
    "controller_weight_drift": "L2 distance of controller and joint-scorer weights from their initial values",
    "flops_ratio_est": "analytic FLOPs ratio estimate (section 11.1), not a measurement",
}

# Probe tables written by ``aah-viz probe`` / ``aah-viz compare`` (issue: probes).
PROBE_TABLES: dict[str, dict[str, pa.DataType]] = {
    "probe_heads": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "head": pa.int16(),
        "probe": pa.string(),  # syntax, positional, coref, sufficiency, distance, attention_js
        "metric": pa.string(),
        "value": pa.float64(),
        "window": pa.int32(),
    },
    "probe_relations": {
        "step": pa.int64(),
        "relation": pa.string(),
        "count": pa.int64(),
        "best_layer": pa.int16(),
        "best_head": pa.int16(),
        "direction": pa.string(),
        "best_acc": pa.float64(),
        "baseline_offset": pa.int16(),
        "baseline_acc": pa.float64(),
        "delta": pa.float64(),  # best_acc - baseline_acc
        "delta_ci_low": pa.float64(),  # 95 % bootstrap interval over sentences
        "delta_ci_high": pa.float64(),
        "positional": pa.bool_(),  # the best head's predictions sit mostly at one fixed offset
        "positional_offset": pa.int16(),  # that offset (the modal one)
        "positional_share": pa.float64(),  # share of its predictions at that offset
        "n_sentences": pa.int64(),  # sentences holding the relation
        "labels": pa.string(),  # universal or full relation labels
        "context": pa.string(),  # sentence or document inputs
    },
    "probe_coref": {
        "step": pa.int64(),
        "layer": pa.int16(),  # null for baselines
        "head": pa.int16(),
        "method": pa.string(),  # "head" or a baseline name
        "bucket": pa.string(),  # antecedent-distance bucket, e.g. "1-3", "256+", "all"
        "bucket_lo": pa.int32(),
        "bucket_hi": pa.int32(),
        "correct": pa.int64(),
        "count": pa.int64(),
        "accuracy": pa.float64(),
        "window": pa.int32(),
    },
    # selection-aware statistics of each probe target's best head (docs/probes.md, aah_viz.probes.claims)
    "probe_claims": {
        "step": pa.int64(),
        "probe": pa.string(),  # syntax or coref
        "relation": pa.string(),  # the relation; "all" for coreference
        "direction": pa.string(),  # causal: dependent_to_head / head_to_dependent; encoder and coref: null
        "count": pa.int64(),  # items (links, queries)
        "n_clusters": pa.int64(),  # sentences (documents for coreference) the bootstrap resamples
        "n_columns": pa.int32(),  # heads (times directions on an encoder) the best is chosen among
        "best_layer": pa.int16(),
        "best_head": pa.int16(),
        "best_direction": pa.string(),
        "best_acc": pa.float64(),
        "best_ci_low": pa.float64(),  # 95 % bootstrap over clusters
        "best_ci_high": pa.float64(),
        "split_half_acc": pa.float64(),  # chosen on half the clusters, scored on the other half
        "null_mean": pa.float64(),  # best of all heads with the answer moved at random within each item
        "null_p95": pa.float64(),
        "adjusted_p": pa.float64(),  # (1 + #null >= best_acc) / (1 + draws)
        "baseline": pa.string(),  # the strongest baseline: offset:K, pos, or a coreference baseline
        "baseline_acc": pa.float64(),
        "baseline_split_half_acc": pa.float64(),
        "delta": pa.float64(),  # best_acc - baseline_acc
        "delta_ci_low": pa.float64(),
        "delta_ci_high": pa.float64(),
        "beats_baseline": pa.bool_(),  # delta_ci_low > 0 and split_half_acc > baseline_split_half_acc
        "offset_acc": pa.float64(),  # syntax: the best fixed offset
        "pos_acc": pa.float64(),  # syntax: the nearest word of the answer's UPOS
        "offset_share": pa.float64(),  # syntax: share of the relation's items the best head answers at that offset
        "positional": pa.bool_(),  # offset_share >= 0.5
    },
    # written by ``aah-viz compare``: AAH groups against probe clusters, per level and layer
    # (layer null: pooled over the layer's non-degenerate rows, layer-stratified null)
    "comparisons": {
        "step": pa.int64(),
        "level": pa.int8(),
        "layer": pa.int16(),
        "target": pa.string(),  # kmeans:profile, agglomerative:profile, js_agglomerative
        "ari": pa.float64(),
        "nmi": pa.float64(),
        "v_measure": pa.float64(),
        "null_mean": pa.float64(),  # mean ARI under the permutation null
        "null_p95": pa.float64(),  # its 95th percentile
        "p_value": pa.float64(),  # (1 + #null ARI >= observed) / (1 + permutations)
        "nmi_null_mean": pa.float64(),
        "v_measure_null_mean": pa.float64(),
        "window_ari": pa.float64(),  # window classes against the same probe clusters
        "n_heads": pa.int32(),
        "n_groups": pa.int16(),
        "n_probe_clusters": pa.int16(),
        "n_layers": pa.int16(),
        "degenerate": pa.bool_(),
        "reason": pa.string(),  # why a degenerate row cannot say anything ("; "-separated)
        "partition_verdict": pa.string(),  # cluster validity of the compared level-0 partition: real, chance, undefined
    },
    # written by ``aah-viz compare``: Spearman's rho of window against probe score within layers
    "window_association": {
        "step": pa.int64(),
        "layer": pa.int16(),  # null: head-weighted mean over layers
        "target": pa.string(),  # spearman:syntax, spearman:coref, spearman:coref_reachable
        "rho": pa.float64(),
        "null_mean": pa.float64(),
        "p_value": pa.float64(),  # two-sided, windows permuted within layers
        "ci_low": pa.float64(),  # 95 % bootstrap over heads within layers
        "ci_high": pa.float64(),
        "n_heads": pa.int32(),
        "n_layers": pa.int16(),
        "degenerate": pa.bool_(),
        "reason": pa.string(),
    },
}

# Written into a run by ``aah-viz head-similarity`` (aah_viz.analysis.head_similarity): per layer, the heads
# grouped by each named similarity and two procedures, with validity, split-half stability and agreement
HEAD_SIMILARITY_TABLES: dict[str, dict[str, pa.DataType]] = {
    "head_similarity": {
        "step": pa.int64(),  # the checkpoint step measured (0 for a model folder or a probed model)
        "layer": pa.int16(),
        "similarity": pa.string(),  # method, zscore, attention, span, probe
        "procedure": pa.string(),  # method (the method's level-0 procedure) or complete (linkage, same count)
        "other": pa.string(),  # agreement rows: the other similarity; null on grouping rows
        "n_heads": pa.int16(),
        "n_groups": pa.int16(),
        "origin": pa.string(),  # natural, forced_bipartition, complete_linkage
        "threshold": pa.float32(),  # the method's threshold the procedure used
        "sim_min": pa.float32(),  # pairwise similarity of the layer's heads under this similarity
        "sim_median": pa.float32(),
        "sim_max": pa.float32(),
        "silhouette": pa.float32(),  # of the grouping, on 1 - similarity
        "null_mean": pa.float32(),  # random groupings with the same group sizes
        "null_p95": pa.float32(),
        "null_p_value": pa.float32(),
        "refit_mean": pa.float32(),  # structureless heads grouped into the same number of groups
        "refit_p95": pa.float32(),
        "refit_p_value": pa.float32(),
        "verdict": pa.string(),  # real, chance, undefined
        "stability_ari": pa.float64(),  # ARI of the groupings of two disjoint halves of the data
        "stability_null_p95": pa.float64(),
        "stability_p_value": pa.float64(),
        "stability": pa.string(),  # stable, unstable, undefined
        "ari": pa.float64(),  # agreement rows: ARI of the two similarities' groupings
        "ari_null_mean": pa.float64(),
        "ari_null_p95": pa.float64(),
        "ari_p_value": pa.float64(),
        "agreement": pa.string(),  # agree, chance, undefined
        "mantel_rho": pa.float64(),  # agreement rows: Spearman's rho of the two distances (1 - similarity)
        "mantel_null_p95": pa.float64(),  # over the heads' pairs, against heads relabelled at random
        "mantel_p_value": pa.float64(),  # one-sided; exact (every relabelling) when mantel_exact
        "mantel_p_holm": pa.float64(),  # Holm-adjusted across the layers of the same pair and procedure
        "mantel_exact": pa.bool_(),
        "labels": LIST_INT,  # grouping rows: every head's group; empty on agreement rows
        "source": pa.string(),  # what the similarity was measured on, in words
        "reason": pa.string(),  # why something is undefined ("; "-separated)
    },
}

# Written into a run by ``aah-viz lens`` (docs/lens.md): a few documents run through the run's model; per
# (layer, head, query) the strongest keys under full attention, the executed window and what it cuts
LENS_TABLES: dict[str, dict[str, pa.DataType]] = {
    "lens_tokens": {
        "step": pa.int64(),  # the checkpoint or adapter step
        "doc": pa.int32(),  # document number within the lens
        "doc_id": pa.string(),  # the document's name in its source (sentence id, GAP id, file#paragraph)
        "source": pa.string(),  # text, syntax, coref
        "position": pa.int32(),  # token position in the model's input
        "token": pa.string(),  # the token's text (its characters in the document, or a special token's name)
        "word": pa.int32(),  # the word it belongs to (-1: none, or a special token)
        "special": pa.bool_(),  # a token the tokenizer adds (BOS), not part of the text
    },
    "lens_links": {
        "step": pa.int64(),
        "doc": pa.int32(),
        "kind": pa.string(),  # dep (a gold dependency arc) or coref (the pronoun and a candidate name)
        "label": pa.string(),  # the relation (deprel) or the candidate's role (A, B)
        "query": pa.int32(),  # the later end's first token (the query that can see the other end)
        "key": pa.int32(),  # the earlier end's first token
        "gold": pa.bool_(),  # dep: always; coref: the pronoun refers to this candidate
        "query_is_head": pa.bool_(),  # dep: the query's word is the syntactic head
    },
    "attention_samples": {
        "step": pa.int64(),
        "doc": pa.int32(),
        "layer": pa.int16(),
        "head": pa.int16(),
        "query": pa.int32(),
        "keys": LIST_INT,  # the strongest keys under full attention, largest weight first
        "weights": LIST_FLOAT,  # their weights
        "window": pa.int32(),  # the window (tokens) the head executes on this document
        "mass_outside": pa.float32(),  # full-attention mass on keys the window cuts (distance >= window)
        "mass_sink": pa.float32(),  # full-attention mass on the sink positions (the first token)
    },
}

# Summaries the run writer derives from the rows it is given, so that no figure has to scan every
# head row of a long run. A run whose manifest says ``"update_summaries": true`` has them from its
# first step; readers compute the same rows on the fly for any other run.
MANIFEST_FLAG = "update_summaries"  # the manifest field saying so
SUMMARY_TABLES: dict[str, dict[str, pa.DataType]] = {
    # one row per (layer, routing update), compared with the layer's previous update
    "updates": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "prev_step": pa.int64(),  # null at a layer's first update
        "ari": pa.float64(),  # level-0 partition vs the previous update
        "group_switch_share": pa.float64(),  # heads whose level-0 group-mates changed / H
        "window_switch_share": pa.float64(),  # heads whose executed window changed / H
        "topology_changed": pa.bool_(),  # any level's partition or the number of levels changed
        "n_groups": pa.int16(),  # level-0 groups
        "n_levels": pa.int8(),
        "window_idx": pa.list_(pa.int8()),  # executed candidate index per head at the update
        "window_switched": pa.list_(pa.int16()),  # heads whose window changed
        "group_switched": pa.list_(pa.int16()),  # heads whose level-0 group-mates changed
        "flipped": pa.list_(pa.int16()),  # heads back at the window of two updates ago
    },
    # one row per (step, layer) with executed tree rows: their decision margins
    "margins": {
        "step": pa.int64(),
        "layer": pa.int16(),
        "groups": pa.int32(),  # non-shadow tree nodes
        "margin_mean": pa.float64(),  # their mean top-1 minus top-2 logit
    },
}

ALL_TABLES = {**TABLES, **PROBE_TABLES, **HEAD_SIMILARITY_TABLES, **LENS_TABLES, **SUMMARY_TABLES}

# Columns added to a table after runs were already written with it: a segment without them is an older
# writer's, read with the column empty and not a problem for ``aah-viz validate``.
LATER_COLUMNS: dict[str, frozenset[str]] = {
    "head_similarity": frozenset({"mantel_rho", "mantel_null_p95", "mantel_p_value", "mantel_p_holm", "mantel_exact"}),
}


def group_column(level: int) -> str:
    return f"group_l{level}"


def parse_version(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)
