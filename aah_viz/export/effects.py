"""Main effects and two-way interactions of a factorial design, from a linear model fitted over seeds.

The model (ordinary least squares, statsmodels) has an intercept, every factor's main effect and every
two-way interaction, with sum-to-zero (effect) coding, so each effect averages over the other factors'
levels. An effect is a contrast of the model's cell means:

- main effect of factor F at level L: mean over the design's cells with F = L minus mean over those with
  F at its first (reference) level; for a two-level factor, the classic factorial effect;
- interaction of F and G at levels (L, M): the difference of differences
  (F=L, G=M) - (F=L, G=ref) - (F=ref, G=M) + (F=ref, G=ref), each cell-group averaged over the other factors.

Intervals and p-values are statsmodels' t-tests of those contrasts (residual degrees of freedom of the
model); p-values are Holm-corrected across every effect of one metric. In a fraction, a two-way interaction
aliased with a term already in the model is left out and reported as aliased. When the model leaves no
residual degrees of freedom there is no interval, and the table says so. Pure: frames in, frames out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

LEVEL = 0.95
TOO_FEW_SEEDS = "too few seeds for an interval: the model leaves no residual degrees of freedom (run 2+ seeds a cell)"
ONE_SEED = "one seed a cell: the interval rests on the interactions the model leaves out, not on seed variation"
ALIASED = "aliased in this fraction: not estimable apart from the terms in the model"
EFFECT_COLUMNS = [
    "metric",
    "term",
    "factors",
    "levels",
    "effect",
    "ci_low",
    "ci_high",
    "se",
    "df",
    "p",
    "p_holm",
    "n",
    "note",
]


def _coding(values: pd.Series, levels: Sequence[str]) -> np.ndarray:
    """Sum-to-zero coding of one factor: a column per non-reference level (1 at it, -1 at the reference)."""
    cols = np.zeros((len(values), len(levels) - 1))
    v = values.to_numpy()
    for j, level in enumerate(levels[1:]):
        cols[:, j] = np.where(v == level, 1.0, np.where(v == levels[0], -1.0, 0.0))
    return cols


def design_matrix(frame: pd.DataFrame, factors: Mapping[str, Sequence[str]]) -> tuple[np.ndarray, list[str], list]:
    """Columns: intercept, the main effects, then the estimable two-way interactions.

    Returns the matrix, the term of each column, and the interactions left out as aliased ((F, G) pairs).
    """
    blocks = {f: _coding(frame[f], levels) for f, levels in factors.items()}
    cols = [np.ones((len(frame), 1))]
    terms = ["Intercept"]
    for f, block in blocks.items():
        cols.append(block)
        terms += [f] * block.shape[1]
    matrix = np.hstack(cols)
    aliased = []
    for f, g in itertools.combinations(factors, 2):
        product = np.hstack(
            [
                blocks[f][:, [i]] * blocks[g][:, [j]]
                for i in range(blocks[f].shape[1])
                for j in range(blocks[g].shape[1])
            ]
        )
        trial = np.hstack([matrix, product])
        if np.linalg.matrix_rank(trial) == trial.shape[1]:
            matrix = trial
            terms += [f"{f}:{g}"] * product.shape[1]
        else:
            aliased.append((f, g))
    return matrix, terms, aliased


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment (what statsmodels' ``multipletests(method="holm")`` returns, without the
    full garbage collection it runs on every call, which dominates a table's time)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * np.arange(len(p), 0, -1)
    out = np.empty_like(p)
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def factorial_effects(
    frame: pd.DataFrame, factors: Mapping[str, Sequence[str]], metric: str, *, level: float = LEVEL
) -> pd.DataFrame:
    """One row per main effect (each non-reference level) and per two-way interaction, for ``metric``.

    ``frame`` has a column per factor (its level names), ``seed`` and ``metric`` (one row per run; rows
    without a finite value are left out). ``factors`` maps each factor to its levels, the first the reference.
    """
    import statsmodels.api as sm

    data = frame[list(factors) + [metric]].copy()
    data[metric] = pd.to_numeric(data[metric], errors="coerce")
    data = data[np.isfinite(data[metric].to_numpy(dtype=float))].reset_index(drop=True)
    factors = {f: [lv for lv in levels if (data[f] == lv).any()] for f, levels in factors.items()}
    factors = {f: lv for f, lv in factors.items() if len(lv) >= 2}
    if data.empty or not factors:
        return pd.DataFrame(columns=EFFECT_COLUMNS)
    matrix, _, aliased = design_matrix(data, factors)
    fit = sm.OLS(data[metric].to_numpy(dtype=float), matrix).fit()
    keys = list(factors)
    first = data.drop_duplicates(subset=keys)  # one row of the model per cell present
    cell_rows = matrix[first.index.to_numpy()]
    at = {f: first[f].to_numpy() for f in keys}
    runs = {f: data[f].to_numpy() for f in keys}
    one_seed = bool((data.groupby(keys, sort=False).size() <= 1).all())

    def mean_row(mask) -> np.ndarray | None:
        return cell_rows[mask].mean(axis=0) if mask.any() else None

    rows, contrasts = [], []
    for f, levels in factors.items():
        ref = mean_row(at[f] == levels[0])
        for lv in levels[1:]:
            n = int(np.isin(runs[f], [lv, levels[0]]).sum())
            rows.append(_row(metric, "main", f, f"{lv} vs {levels[0]}", n=n))
            contrasts.append(mean_row(at[f] == lv) - ref)
    for f, g in itertools.combinations(factors, 2):
        rf, rg = factors[f][0], factors[g][0]
        for lf, lg in itertools.product(factors[f][1:], factors[g][1:]):
            parts = [mean_row((at[f] == a) & (at[g] == b)) for a, b in ((lf, lg), (lf, rg), (rf, lg), (rf, rg))]
            n = int((np.isin(runs[f], [lf, rf]) & np.isin(runs[g], [lg, rg])).sum())
            row = _row(metric, "interaction", f"{f} x {g}", f"{lf} x {lg}", n=n)
            if (f, g) in aliased or any(p is None for p in parts):
                rows.append({**row, "note": ALIASED})
                continue
            rows.append(row)
            contrasts.append(parts[0] - parts[1] - parts[2] + parts[3])
    estimable = [r for r in rows if r["note"] != ALIASED]
    if contrasts:
        c = np.vstack(contrasts)
        effects = c @ fit.params
        for r, e in zip(estimable, effects):
            r["effect"] = float(e)
        if fit.df_resid > 0:
            test = fit.t_test(c)  # every contrast at once: statsmodels' t-tests with the model's residual df
            ci = np.asarray(test.conf_int(alpha=1 - level))
            se, p = np.ravel(test.sd), np.ravel(test.pvalue)
            for i, r in enumerate(estimable):
                r.update(ci_low=float(ci[i, 0]), ci_high=float(ci[i, 1]), se=float(se[i]), p=float(p[i]))
                r["df"] = float(fit.df_resid)
            adjusted = holm([r["p"] for r in estimable])
            for r, q in zip(estimable, adjusted):
                r["p_holm"] = float(q)
                r["note"] = ONE_SEED if one_seed else ""
        else:
            for r in estimable:
                r["note"] = TOO_FEW_SEEDS
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def _row(metric, term, factors, levels, *, n=0) -> dict:
    nan = math.nan
    return {"metric": metric, "term": term, "factors": factors, "levels": levels, "effect": nan, "ci_low": nan,
            "ci_high": nan, "se": nan, "df": nan, "p": nan, "p_holm": nan, "n": n, "note": ""}  # fmt: skip


def cell_means(frame: pd.DataFrame, factors: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Per cell (in order of first appearance): its levels, the runs, and each metric's mean and std over seeds."""
    rows = []
    for key, part in frame.groupby(list(factors), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = {**dict(zip(factors, key)), "n": int(len(part))}
        for m in metrics:
            values = pd.to_numeric(part[m], errors="coerce").to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            row[m] = float(values.mean()) if values.size else math.nan
            row[f"{m}_std"] = float(values.std(ddof=1)) if values.size >= 2 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def interaction_means(
    frame: pd.DataFrame, factors: Mapping[str, Sequence[str]], pair: tuple[str, str], metric: str
) -> pd.DataFrame:
    """The data of a two-way interaction plot: for each level of the first factor (x) and of the second
    (one line each), the mean of the cell means there, so each point averages over the other factors'
    cells as the effects do (not over runs, which would weigh a cell by its seeds). Columns: the two
    factors, ``mean``, ``cells`` (the design's cells averaged) and ``n`` (their runs); a combination with
    no finished run is left out."""
    f, g = pair
    data = frame[list(factors) + [metric]].copy()
    data[metric] = pd.to_numeric(data[metric], errors="coerce")
    data = data[np.isfinite(data[metric].to_numpy(dtype=float))]
    cells = data.groupby(list(factors), sort=False)[metric].agg(["mean", "size"]).reset_index()
    rows = []
    for a, b in itertools.product(factors[f], factors[g]):
        part = cells[(cells[f] == a) & (cells[g] == b)]
        if len(part):
            mean, n = float(part["mean"].mean()), int(part["size"].sum())
            rows.append({f: a, g: b, "mean": mean, "cells": len(part), "n": n})
    return pd.DataFrame(rows, columns=[f, g, "mean", "cells", "n"])
