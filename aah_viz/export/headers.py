"""The LaTeX tables' short headers: a column's name as a few letters, and what they mean (the table's
notes spell out each one used, so no header is a column name broken at its underscores)."""

from __future__ import annotations

# Short LaTeX headers (column -> header); the table's notes spell out each one used.
SHORT_HEADERS = {
    "val_loss": ("val. loss", "final validation loss (nats)"),
    "val_ppl": ("ppl", "validation perplexity"),
    "acr": ("ACR", "attention coverage ratio (key-length proxy)"),
    "ACR": ("ACR", "attention coverage ratio (key-length proxy)"),
    "ACR_train_proxy": ("ACR", "attention coverage ratio (key-length proxy)"),
    "acr_causal": ("cov.", "causal-pair coverage"),
    "flops_ratio_est": ("FLOPs", "analytic FLOPs ratio estimate"),
    "flops_ratio": ("FLOPs", "analytic FLOPs ratio estimate"),
    "flops_reduction_pct": ("FLOPs red. (\\%)", "FLOPs reduction in percent"),
    "flops_reduction_percent": ("FLOPs red. (\\%)", "FLOPs reduction in percent"),
    "tokens_per_s": ("tok/s", "median tokens per second"),
    "tokens_per_second_train": ("tok/s", "median training tokens per second"),
    "tokens_per_second_infer": ("tok/s", "inference tokens per second"),
    "peak_mem_mb": ("mem (MiB)", "peak memory"),
    "peak_mem_gib": ("mem (GiB)", "peak memory"),
    "peak_gpu_alloc_GiB": ("alloc (GiB)", "peak GPU memory allocated"),
    "peak_gpu_reserved_GiB": ("resv. (GiB)", "peak GPU memory reserved"),
    "peak_reserved_gib": ("resv. (GiB)", "peak GPU memory reserved"),
    "checkpoint_step": ("ckpt", "checkpoint step"),
    "joint_scorer": ("joint", "joint scorer"),
    "elapsed_s": ("time (s)", "elapsed seconds"),
    # comparison tables (comparison.tex): words, not column names broken at their underscores
    "n_baseline": ("$n_b$", "runs of the baseline"),
    "mean_baseline": ("mean$_b$", "mean of the baseline"),
    "diff": ("diff.", "mean minus the baseline's mean"),
    "welch_t": ("$t$", "Welch's t statistic"),
    "welch_df": ("df", "Welch-Satterthwaite degrees of freedom"),
    "welch_p": ("$p_t$", "Welch's t-test p-value (two-sided)"),
    "perm_p": ("$p_\\pi$", "permutation test p-value"),
    "n_paired": ("pairs", "seed-matched pairs"),
    "paired_perm_p": ("$p_{\\pi,\\mathrm{pair}}$", "paired permutation test p-value"),
    "perm_method": ("test", "how the permutation p-values were computed"),
    # difference (per-step paired) and effect tables: intervals named, not "ci_" / "low"
    "mean_diff": ("diff.", "mean over seed pairs of the difference"),
    "ci_low": ("CI low", "lower end of the interval the caption names"),
    "ci_high": ("CI high", "upper end of the interval the caption names"),
    # the stability table
    "routing_updates": ("updates", "routing updates recorded (layer x update)"),
    "partition_agreement_ari": ("ARI", "mean adjusted Rand index of consecutive level-0 partitions"),
    "group_switch_rate": ("group sw.", "share of heads changing group between consecutive updates"),
    "window_switch_rate": ("window sw.", "share of heads changing window between consecutive updates"),
    "controller_grad_norm_mean": ("grad. mean", "mean controller gradient norm"),
    "controller_grad_norm_final": ("grad. final", "final controller gradient norm"),
    "forced_share": ("forced", "share of level-0 partitions that are forced splits"),
    "real_share": ("real", "share of level-0 partitions whose silhouette beats both nulls"),
}

# Markdown headers where the LaTeX one is markup ($n_b$, \%): the same words in plain text
PLAIN_HEADERS = {
    "n_baseline": "n (baseline)",
    "mean_baseline": "mean (baseline)",
    "welch_t": "t",
    "welch_p": "p (Welch)",
    "perm_p": "p (permutation)",
    "paired_perm_p": "p (paired permutation)",
    "flops_reduction_pct": "FLOPs red. (%)",
    "flops_reduction_percent": "FLOPs red. (%)",
}
WINDOW_PREFIX = "window_frac_"


def plain_header(col: str) -> tuple[str, str | None]:
    """(a column's Markdown header, its legend entry or None): the LaTeX table's short header in plain
    text, ``w=W`` for a window share, else the name with spaces for underscores (never a raw name)."""
    if col in SHORT_HEADERS:
        short, meaning = SHORT_HEADERS[col]
        shown = PLAIN_HEADERS.get(col, short)
        return shown, f"{shown}: {meaning}"
    if col.startswith(WINDOW_PREFIX) and col[len(WINDOW_PREFIX) :].isdigit():
        return f"w={col[len(WINDOW_PREFIX) :]}", None
    return col.replace("_", " "), None
