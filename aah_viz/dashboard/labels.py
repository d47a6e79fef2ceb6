"""Words on screen for the names in the run's tables: column headers, scalar names, tree rows.

The tables keep their names (the CSV downloads and the command line use them); what the pages show
reads as words, with the name in parentheses where a reader may look it up (a scalar's TensorBoard tag).
"""

from __future__ import annotations

import pandas as pd

COLUMN_LABELS = {
    "ari": "ARI",
    "nmi": "NMI",
    "v_measure": "V-measure",
    "null_mean": "null mean",
    "null_p95": "null 95th pct",
    "p_value": "p",
    "n_groups": "AAH groups",
    "n_probe_clusters": "probe clusters",
    "partition_verdict": "partition validity",
    "n_heads": "heads",
    "n_layers": "layers",
    "ci_low": "CI low",
    "ci_high": "CI high",
    "rho": "Spearman's rho",
    "final_idx": "window (after parent)",
    "raw_idx": "window (own choice)",
    "joint_paired": "scored with sibling",
    "joint_delta": "joint change of logits",
}
SCALAR_LABELS = {
    "loss": "training loss",
    "val_loss": "validation loss",
    "val_ppl": "validation perplexity",
    "acr": "ACR",
    "acr_causal": "causal-pair coverage",
    "realised_work": "realised work",
    "flops_ratio_est": "FLOPs ratio (analytic estimate)",
    "controller_grad_norm": "controller gradient norm",
    "controller_weight_drift": "controller weight drift",
    "tokens_per_s": "tokens/s",
    "step_time_s": "step time (s)",
    "peak_mem_mb": "peak memory (MiB)",
    "lr": "learning rate",
    "score_minus_baseline": "score minus offset baseline",
    "score": "best relation score",
    "uas": "unlabelled attachment score",
    "accuracy": "accuracy",
    "reachable_accuracy": "accuracy on reachable antecedents",
    "count": "mentions scored",
    "ppl": "perplexity",
    "retrieval": "passkey accuracy",
    "syntax_beyond": "share of syntax links beyond the window",
    "coref_beyond": "share of coreference links beyond the window",
    "all_beyond": "share of all gold links beyond the window",
    "syntax_links": "syntax links",
    "coref_links": "coreference links",
}
POOLED = "pooled"


def scalar_words(name: str) -> str:
    """``validation loss`` for ``val_loss``, ``ACR, layer 3`` for ``acr/layer_3`` (a chart's title, whose y axis
    names the tag); a name without words of its own stays as it is."""
    base, _, layer = str(name).partition("/layer_")
    words = SCALAR_LABELS.get(base)
    return str(name) if words is None else f"{words}{f', layer {layer}' if layer else ''}"


def metric_words(name: str) -> str:
    """:func:`scalar_words`, and a frontier sweep's per-configuration metric ``ppl@w64`` as ``perplexity, w64``."""
    base, at, configuration = str(name).partition("@")
    if at and base in SCALAR_LABELS:
        return f"{SCALAR_LABELS[base]}, {configuration}"
    return scalar_words(name)


def scores_words(metrics, values) -> str:
    """A head's probe scores in one line, ``score minus offset baseline 0.120, best relation score 0.410``:
    the summary metrics first, in words, then the per-relation ones (``acl:dep2head``) as logged."""
    pairs = [(str(m), float(v)) for m, v in zip(metrics, values) if pd.notna(v)]
    pairs.sort(key=lambda p: (":" in p[0], p[0] not in SCALAR_LABELS))
    return ", ".join(f"{metric_words(m)} {v:.3f}" for m, v in pairs)


def scalar_label(name: str) -> str:
    """``validation loss (val_loss)``; a per-layer name ``acr/layer_3`` as ``ACR, layer 3 (acr/layer_3)``;
    a name without words of its own stays as it is."""
    base, _, layer = str(name).partition("/layer_")
    words = SCALAR_LABELS.get(base)
    if words is None:
        return str(name)
    return f"{words}{f', layer {layer}' if layer else ''} ({name})"


def readable(frame: pd.DataFrame, keep=("degenerate",)) -> pd.DataFrame:
    """``frame`` with words for its column names (``keep``: columns a styler still reads by name); a layer
    column with gaps (the pooled rows) as whole numbers and "pooled", never 0.000000."""
    out = frame.copy()
    if "layer" in out and out["layer"].isna().any():
        out["layer"] = [POOLED if pd.isna(v) else str(int(v)) for v in out["layer"]]
    return out.rename(columns={c: w for c, w in COLUMN_LABELS.items() if c not in keep})


def tree_rows(tree: pd.DataFrame, windows) -> pd.DataFrame:
    """The hierarchy's tree rows as a reader takes them: the chosen candidate as its window in tokens
    (``final_idx`` 2 of windows 16/32/64/128 is 64), then :func:`readable` names."""
    out = tree.copy()
    windows = [int(w) for w in windows or ()]
    for col in ("final_idx", "raw_idx"):
        if col in out and windows:
            out[col] = [None if pd.isna(i) or not 0 <= int(i) < len(windows) else windows[int(i)] for i in out[col]]
    return readable(out)
