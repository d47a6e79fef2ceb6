"""Runs grouped by regime: mean, sample standard deviation and count over seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd


def regime_summary(per_run: pd.DataFrame, value_columns: list[str]) -> pd.DataFrame:
    """One row per regime with ``n``, ``<col>`` (mean) and ``<col>_std`` (sample std, NaN for n = 1)."""
    rows = []
    for regime, part in per_run.groupby("regime", sort=True, dropna=False):
        row = {"regime": regime, "n": int(len(part))}
        for col in value_columns:
            values = pd.to_numeric(part[col], errors="coerce").to_numpy(dtype=np.float64)
            values = values[np.isfinite(values)]
            row[col] = float(values.mean()) if values.size else np.nan
            row[f"{col}_std"] = float(values.std(ddof=1)) if values.size > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def mean_pm(summary: pd.DataFrame, value_columns: list[str], digits: int = 4) -> pd.DataFrame:
    """The summary as display strings ``mean ± sd`` (``mean (n = 1)`` without a spread)."""
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
