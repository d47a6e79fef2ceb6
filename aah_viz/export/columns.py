"""The column catalogue of the tables: per value column, the decimals it prints with and which way is best."""

from __future__ import annotations

from collections.abc import Iterable

# value column -> (default decimals, direction for "best": -1 lower, +1 higher, 0 none)
COLUMN_SPEC: dict[str, tuple[int, int]] = {
    "val_loss": (4, -1),
    "val_ppl": (2, -1),
    "acr": (4, 0),
    "acr_causal": (4, 0),
    "flops_ratio_est": (4, 0),
    "flops_reduction_pct": (2, 0),
    "tokens_per_s": (1, +1),
    "elapsed_s": (2, 0),
    "peak_mem_mb": (1, -1),
    "peak_reserved_mb": (1, -1),
    "peak_mem_gib": (2, -1),
    "peak_reserved_gib": (2, -1),
    "routing_updates": (0, 0),
    "update_steps": (0, 0),
    "partition_agreement_ari": (3, 0),
    "group_switch_rate": (3, 0),
    "window_switch_rate": (3, 0),
    "controller_grad_norm_mean": (4, 0),
    "controller_grad_norm_final": (4, 0),
    "controller_weight_drift_final": (4, 0),
    "value": (3, 0),
    "ari": (3, 0),
    "nmi": (3, 0),
    "v_measure": (3, 0),
    "null_mean": (3, 0),
    "null_p95": (3, 0),
    "n_groups": (0, 0),
    "n_probe_clusters": (0, 0),
    "n_heads": (0, 0),
    "rho": (3, 0),
    "delta": (3, +1),
    "delta_ci_low": (3, 0),
    "delta_ci_high": (3, 0),
    "p_value": (4, 0),
    "ci_low": (3, 0),
    "ci_high": (3, 0),
    "n": (0, 0),
    "count": (0, 0),
    "correct": (0, 0),
    "accuracy": (3, +1),
    "best_acc": (3, +1),
    "baseline_acc": (3, 0),
    "checkpoint_step": (0, 0),
    "n_batches": (0, 0),
}
WINDOW_DECIMALS = 4
WINDOW_PREFIX = "window_frac_"  # window_frac_<w>: the share of heads at candidate window w


def window_columns(windows: Iterable[int]) -> list[str]:
    return [f"{WINDOW_PREFIX}{w}" for w in windows]


def decimals(col: str) -> int:
    """Decimals of a column in Markdown and LaTeX (where no uncertainty sets them)."""
    if col.startswith(WINDOW_PREFIX):
        return WINDOW_DECIMALS
    return COLUMN_SPEC.get(col, (4, 0))[0]


def direction(col: str) -> int:
    """-1: lower is better, +1: higher is better, 0: neither (never bold)."""
    return COLUMN_SPEC.get(col, (4, 0))[1]
