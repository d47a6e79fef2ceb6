"""The paper's table columns and ours: one map, read by the import of the published CSVs and by the
export in the paper's layout."""

from __future__ import annotations

# who a row is: (paper column, our column)
IDENTITY = [
    ("method", "method"),
    ("grouping", "grouping"),
    ("hierarchy", "hierarchy"),
    ("joint_scorer", "joint_scorer"),
    ("context", "seq_len"),
]
# Table 1 (training): (paper column, our exported column, the run-log scalar, scalar = paper value * factor)
TABLE1_METRICS = [
    ("val_loss", "val_loss", "val_loss", 1.0),
    ("val_ppl", "val_ppl", "val_ppl", 1.0),
    ("ACR_train_proxy", "acr", "acr", 1.0),
    ("flops_ratio", "flops_ratio_est", "flops_ratio_est", 1.0),
    ("tokens_per_second_train", "tokens_per_s", "tokens_per_s", 1.0),
    ("peak_gpu_alloc_GiB", "peak_mem_gib", "peak_mem_mb", 1024.0),  # a power of two: the product is exact
    ("peak_gpu_reserved_GiB", "peak_reserved_gib", "peak_reserved_mb", 1024.0),
]
# Table 2 (inference): (paper column, our column, also the key of the inference event)
TABLE2_METRICS = [
    ("val_loss", "val_loss"),
    ("val_ppl", "val_ppl"),
    ("ACR", "acr"),
    ("flops_ratio", "flops_ratio_est"),
    ("flops_reduction_percent", "flops_reduction_pct"),
    ("tokens_per_second_infer", "tokens_per_s"),
    ("elapsed_s", "elapsed_s"),
]

# the paper's layouts, in the order of the reference CSVs
PAPER_TRAINING = [*IDENTITY, ("seed", "seed"), *((paper, ours) for paper, ours, _, _ in TABLE1_METRICS)]
PAPER_INFERENCE = [*IDENTITY, ("checkpoint_step", "checkpoint_step"), ("seed", "seed"), *TABLE2_METRICS]
# import: Table 1 column -> (scalar name, factor); Table 2 column -> inference key
TABLE1_SCALARS = {paper: (scalar, factor) for paper, _, scalar, factor in TABLE1_METRICS}
TABLE2_KEYS = dict(TABLE2_METRICS)
