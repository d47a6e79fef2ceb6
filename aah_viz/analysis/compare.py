"""Regime summaries (``aah_viz.export.stats.group_summaries``) as text for display."""

from __future__ import annotations

import numpy as np
import pandas as pd


def mean_pm(summary: pd.DataFrame, value_columns: list[str], digits: int = 4) -> pd.DataFrame:
    """A summary's ``<col>`` and ``<col>_std`` as display strings ``mean ± sd`` (the mean alone without a spread)."""
    out = summary[["regime", "n"]].copy()
    for col in value_columns:
        texts = []
        for mean, std in zip(summary[col], summary.get(f"{col}_std", pd.Series(np.nan, index=summary.index))):
            if mean is None or not np.isfinite(mean):
                texts.append("–")
            elif std is None or not np.isfinite(std):
                texts.append(f"{mean:.{digits}f}")
            else:
                texts.append(f"{mean:.{digits}f} ± {std:.{digits}f}")
        out[col] = texts
    return out
