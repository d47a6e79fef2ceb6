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


def factorial_effects(
    frame: pd.DataFrame, factors: Mapping[str, Sequence[str]], metric: str, *, level: float = LEVEL
) -> pd.DataFrame:
    """One row per main effect (each non-reference level) and per two-way interaction, for ``metric``.

    ``frame`` has a column per factor (its level names), ``seed`` and ``metric`` (one row per run; rows
    without a finite value are left out). ``factors`` maps each factor to its levels, the first the reference.
    """
    import statsmodels.api as sm
    from statsmodels.stats.multitest import multipletests

    data = frame[list(factors) + [metric]].copy()
    data[metric] = pd.to_numeric(data[metric], errors="coerce")
    data = data[np.isfinite(data[metric].to_numpy(dtype=float))].reset_index(drop=True)
    factors = {f: [lv for lv in levels if (data[f] == lv).any()] for f, levels in factors.items()}
    factors = {f: lv for f, lv in factors.items() if len(lv) >= 2}
    if data.empty or not factors:
        return pd.DataFrame(columns=EFFECT_COLUMNS)
    matrix, _, aliased = design_matrix(data, factors)
    fit = sm.OLS(data[metric].to_numpy(dtype=float), matrix).fit()
    cells = data[list(factors)].drop_duplicates().reset_index(drop=True)
    cell_rows = _cell_rows_like(data, cells, matrix, factors)
    per_cell = data.groupby(list(factors), sort=False).size()
    one_seed = bool((per_cell <= 1).all())

    def mean_row(mask) -> np.ndarray | None:
        return cell_rows[mask].mean(axis=0) if mask.any() else None

    rows = []
    for f, levels in factors.items():
        ref = mean_row(cells[f].to_numpy() == levels[0])
        for lv in levels[1:]:
            at = mean_row(cells[f].to_numpy() == lv)
            n = int((data[f] == lv).sum() + (data[f] == levels[0]).sum())
            rows.append(_contrast(fit, at - ref, metric, "main", f, f"{lv} vs {levels[0]}", n, level))
    for f, g in itertools.combinations(factors, 2):
        for lf, lg in itertools.product(factors[f][1:], factors[g][1:]):
            label = f"{lf} x {lg}"
            parts = []
            for a, b in ((lf, lg), (lf, factors[g][0]), (factors[f][0], lg), (factors[f][0], factors[g][0])):
                parts.append(mean_row((cells[f].to_numpy() == a) & (cells[g].to_numpy() == b)))
            n = int(data[f].isin([lf, factors[f][0]]).mul(data[g].isin([lg, factors[g][0]])).sum())
            if (f, g) in aliased or any(p is None for p in parts):
                rows.append(_row(metric, "interaction", f"{f} x {g}", label, n=n, note=ALIASED))
                continue
            c = parts[0] - parts[1] - parts[2] + parts[3]
            rows.append(_contrast(fit, c, metric, "interaction", f"{f} x {g}", label, n, level))
    out = pd.DataFrame(rows, columns=EFFECT_COLUMNS)
    finite = out["p"].notna()
    if finite.any():
        out.loc[finite, "p_holm"] = multipletests(out.loc[finite, "p"].to_numpy(), method="holm")[1]
    if fit.df_resid > 0 and one_seed:
        out["note"] = out["note"].where(out["note"] != "", ONE_SEED)
    return out


def _cell_rows_like(data, cells, matrix, factors) -> np.ndarray:
    """Model rows of the cells, taken from the data's own rows (same columns as the fitted matrix)."""
    keys = list(factors)
    first = data.reset_index(drop=True).drop_duplicates(subset=keys)
    index = {tuple(r): i for i, r in zip(first.index, first[keys].itertuples(index=False, name=None))}
    return np.vstack([matrix[index[tuple(r)]] for r in cells[keys].itertuples(index=False, name=None)])


def _row(
    metric,
    term,
    factors,
    levels,
    *,
    effect=math.nan,
    lo=math.nan,
    hi=math.nan,
    se=math.nan,
    df=math.nan,
    p=math.nan,
    n=0,
    note="",
) -> dict:
    return {
        "metric": metric,
        "term": term,
        "factors": factors,
        "levels": levels,
        "effect": effect,
        "ci_low": lo,
        "ci_high": hi,
        "se": se,
        "df": df,
        "p": p,
        "p_holm": math.nan,
        "n": n,
        "note": note,
    }


def _contrast(fit, c: np.ndarray, metric, term, factors, levels, n, level) -> dict:
    effect = float(c @ fit.params)
    if fit.df_resid <= 0:
        return _row(metric, term, factors, levels, effect=effect, n=n, note=TOO_FEW_SEEDS)
    test = fit.t_test(c.reshape(1, -1))
    lo, hi = (float(v) for v in np.asarray(test.conf_int(alpha=1 - level)).ravel())
    return _row(
        metric,
        term,
        factors,
        levels,
        effect=effect,
        lo=lo,
        hi=hi,
        se=float(np.ravel(test.sd)[0]),
        df=float(fit.df_resid),
        p=float(np.ravel(test.pvalue)[0]),
        n=n,
    )


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
