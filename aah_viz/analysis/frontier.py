"""Quality against compute: perplexity intervals over blocks and the Pareto front (pure, no torch).

A frontier run (``aah-viz frontier``) evaluates many configurations of one model on the same
blocks. Each ``inference`` event carries the configuration's name and, per block, the summed
negative log-likelihood (``block_nll``) of its ``tokens_per_block`` targets. Perplexity is
exp(sum NLL / tokens); its interval comes from resampling whole blocks with replacement (blocks,
not tokens, are the independent units of text), with the same resampled blocks for every
configuration so that their intervals are comparable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

N_BOOT = 2000
LEVEL = 0.95
SEED = 0

# Columns of the frontier table, in order (export, dashboard and docs read these).
COLUMNS = (
    "configuration",
    "family",
    "adapt_steps",
    "sink_tokens",
    "ppl",
    "ppl_lo",
    "ppl_hi",
    "acr",
    "acr_causal",
    "realised_work",
    "speed_vs_unpatched",
    "speed_lo",
    "speed_hi",
    "pareto",
    "n_blocks",
)


def block_resamples(n_blocks: int, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """(n_boot, n_blocks) indices of blocks drawn with replacement; seeded, shared by all rows."""
    return np.random.default_rng(seed).integers(0, n_blocks, size=(n_boot, n_blocks))


def perplexity_interval(
    block_nll: Sequence[float], tokens_per_block: int, resamples: np.ndarray | None = None, level: float = LEVEL
) -> tuple[float, float, float]:
    """(perplexity, low, high): the percentile bootstrap interval over blocks."""
    nll = np.asarray(block_nll, dtype=float)
    if nll.ndim != 1 or nll.size == 0 or tokens_per_block < 1:
        raise ValueError("perplexity needs at least one block and a positive number of tokens per block")
    ppl = math.exp(nll.sum() / (nll.size * tokens_per_block))
    idx = block_resamples(nll.size) if resamples is None else resamples
    draws = np.exp(nll[idx].sum(axis=1) / (nll.size * tokens_per_block))
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return ppl, float(lo), float(hi)


def pareto_front(cost: Sequence[float], loss: Sequence[float]) -> np.ndarray:
    """True where no other point has cost <= and loss <=, one of them strictly lower.

    Points with a missing cost or loss are never on the front.
    """
    c = np.asarray(cost, dtype=float)
    y = np.asarray(loss, dtype=float)
    ok = np.isfinite(c) & np.isfinite(y)
    front = np.zeros(c.size, dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (c <= c[i]) & (y <= y[i]) & ((c < c[i]) | (y < y[i]))
        front[i] = not dominated.any()
    return front


def event_details(events: pd.DataFrame) -> list[dict]:
    """The ``detail`` of each row of an events table (stored as JSON text), in row order."""
    if events is None or not len(events) or "detail" not in events:
        return []
    return [json.loads(d) if isinstance(d, str) else dict(d) for d in events["detail"]]


def run_frontier_table(run) -> pd.DataFrame:
    """``frontier_table`` of a run's ``inference`` events (empty when it is not a frontier)."""
    return frontier_table(event_details(run.events("inference")))


def frontier_table(details: Sequence[dict]) -> pd.DataFrame:
    """One row per configuration from the ``inference`` details of a frontier run (COLUMNS)."""
    rows = [d for d in details if d.get("configuration") and d.get("block_nll")]
    if not rows:
        return pd.DataFrame(columns=list(COLUMNS))
    n_blocks = {len(d["block_nll"]) for d in rows}
    resamples = block_resamples(max(n_blocks)) if len(n_blocks) == 1 else None
    out = []
    for d in rows:
        ppl, lo, hi = perplexity_interval(d["block_nll"], int(d["tokens_per_block"]), resamples)
        speed = d.get("speed_vs_unpatched") or {}
        ci = speed.get("ci95") or [None, None]
        out.append(
            {
                "configuration": d["configuration"],
                "family": d.get("family"),
                "adapt_steps": d.get("adapt_steps"),
                "sink_tokens": int(d.get("sink_tokens") or 0),  # the first positions every query keeps
                "ppl": ppl,
                "ppl_lo": lo,
                "ppl_hi": hi,
                "acr": d.get("acr"),
                "acr_causal": d.get("acr_causal"),
                "realised_work": d.get("realised_work"),
                "speed_vs_unpatched": speed.get("median"),
                "speed_lo": ci[0],
                "speed_hi": ci[1],
                "n_blocks": len(d["block_nll"]),
            }
        )
    table = pd.DataFrame(out)
    table["pareto"] = pareto_front(table["acr"].astype(float), table["ppl"].astype(float))
    return table[list(COLUMNS)]
