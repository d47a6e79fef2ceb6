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
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from aah_viz.stats.resampling import LEVEL, percentile_interval, resample_indices

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
    "retrieval",  # share of passkey questions answered (aah-viz frontier --retrieval), NaN where not asked
    "retrieval_lo",
    "retrieval_hi",
    "retrieval_n",
)


def perplexity_interval(
    block_nll: Sequence[float], tokens_per_block: int, resamples: np.ndarray | None = None, level: float = LEVEL
) -> tuple[float, float, float]:
    """(perplexity, low, high): the percentile bootstrap interval over blocks."""
    nll = np.asarray(block_nll, dtype=float)
    if nll.ndim != 1 or nll.size == 0 or tokens_per_block < 1:
        raise ValueError("perplexity needs at least one block and a positive number of tokens per block")
    ppl = math.exp(nll.sum() / (nll.size * tokens_per_block))
    idx = resample_indices(nll.size) if resamples is None else resamples
    draws = np.exp(nll[idx].sum(axis=1) / (nll.size * tokens_per_block))
    lo, hi = percentile_interval(draws, level)
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
    """``frontier_table`` of a run's ``inference`` and ``retrieval`` events (empty when it is not a frontier)."""
    return frontier_table(event_details(run.events("inference")), event_details(run.events("retrieval")))


def frontier_table(details: Sequence[dict], retrieval: Sequence[dict] = ()) -> pd.DataFrame:
    """One row per configuration from the ``inference`` details of a frontier run (COLUMNS), with the
    passkey accuracy of its ``retrieval`` detail where the configuration has one (the last one)."""
    rows = [d for d in details if d.get("configuration") and d.get("block_nll")]
    if not rows:
        return pd.DataFrame(columns=list(COLUMNS))
    asked = {r["configuration"]: r for r in retrieval if r.get("configuration") and r.get("n")}
    n_blocks = {len(d["block_nll"]) for d in rows}
    resamples = resample_indices(max(n_blocks)) if len(n_blocks) == 1 else None
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
                **retrieval_columns(asked.get(d["configuration"])),
            }
        )
    table = pd.DataFrame(out)
    table["pareto"] = pareto_front(table["acr"].astype(float), table["ppl"].astype(float))
    return table[list(COLUMNS)]


def retrieval_columns(detail: dict | None) -> dict:
    """The table's passkey columns from one ``retrieval`` detail (NaN when the configuration was not asked)."""
    if not detail:
        return {"retrieval": np.nan, "retrieval_lo": np.nan, "retrieval_hi": np.nan, "retrieval_n": 0}
    lo, hi = detail["ci95"]
    return {"retrieval": detail["accuracy"], "retrieval_lo": lo, "retrieval_hi": hi, "retrieval_n": detail["n"]}


def paired_ratio(
    block_nll_a: Sequence[float],
    block_nll_b: Sequence[float],
    tokens_per_block: int,
    resamples: np.ndarray | None = None,
    level: float = LEVEL,
) -> tuple[float, float, float]:
    """(perplexity of a / perplexity of b, low, high) on the same blocks: each resample draws the
    same blocks for both, so the interval is that of the paired difference, not of two intervals."""
    a = np.asarray(block_nll_a, dtype=float)
    b = np.asarray(block_nll_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0 or tokens_per_block < 1:
        raise ValueError("a paired ratio needs the same blocks, at least one, and tokens per block")
    scale = a.size * tokens_per_block
    idx = resample_indices(a.size) if resamples is None else resamples
    draws = np.exp((a[idx].sum(axis=1) - b[idx].sum(axis=1)) / scale)
    lo, hi = percentile_interval(draws, level)
    return math.exp((a.sum() - b.sum()) / scale), float(lo), float(hi)


SEED_SUFFIX = re.compile(r"_seed\d+$")  # a further adaptation seed's row: REGIME_adapted[_sinkK]_seedS
ROUTED_FAMILIES = ("zero_shot", "adapted")  # the AAH configurations of a frontier
STATIC_FAMILY = "sliding_window"


def against_nearest_static(details: Sequence[dict]) -> list[dict]:
    """For each AAH configuration: the static sliding window of nearest ACR (the lower one on a tie),
    among those keeping as many sink tokens when the frontier has any, and the paired perplexity ratio
    AAH / static with its 95% interval. Rows in the run's order: ``configuration, acr, ppl, static,
    static_acr, static_ppl, ratio, ratio_lo, ratio_hi, n_blocks``."""
    rows = [d for d in details if d.get("configuration") and d.get("block_nll")]
    static = [d for d in rows if d.get("family") == STATIC_FAMILY and d.get("acr") is not None]
    out = []
    for d in rows:
        if d.get("family") not in ROUTED_FAMILIES or d.get("acr") is None or not static:
            continue
        sinks = int(d.get("sink_tokens") or 0)
        alike = [s for s in static if int(s.get("sink_tokens") or 0) == sinks] or static  # the same sinks first
        near = min(alike, key=lambda s: (abs(float(s["acr"]) - float(d["acr"])), float(s["acr"])))
        if len(near["block_nll"]) != len(d["block_nll"]) or near["tokens_per_block"] != d["tokens_per_block"]:
            continue  # not the same blocks: no paired comparison
        tokens = int(d["tokens_per_block"])
        ratio, lo, hi = paired_ratio(d["block_nll"], near["block_nll"], tokens, resample_indices(len(d["block_nll"])))
        out.append(
            {
                "configuration": d["configuration"],
                "acr": float(d["acr"]),
                "ppl": math.exp(float(np.sum(d["block_nll"])) / (len(d["block_nll"]) * tokens)),
                "static": near["configuration"],
                "static_acr": float(near["acr"]),
                "static_ppl": math.exp(float(np.sum(near["block_nll"])) / (len(near["block_nll"]) * tokens)),
                "ratio": ratio,
                "ratio_lo": lo,
                "ratio_hi": hi,
                "n_blocks": len(d["block_nll"]),
            }
        )
    return out


def window_shares(details: Sequence[dict]) -> dict[str, dict[int, float]]:
    """configuration -> {window: share of heads executing it} for the AAH configurations that logged it."""
    out = {}
    for d in details:
        frac = d.get("window_frac")
        if d.get("family") in ROUTED_FAMILIES and isinstance(frac, dict) and frac:
            out[d["configuration"]] = {int(w): float(v) for w, v in sorted(frac.items(), key=lambda kv: int(kv[0]))}
    return out


def first_token_profile(profile_details: Sequence[dict]) -> dict | None:
    """The last ``profile`` event that measured the first token's share of attention (``aah-viz
    profile``): ``share`` (mean over heads), ``from`` (queries beyond this many tokens), ``heads``,
    ``heads_over_half``, ``seq_len``; None when the run has none."""
    found = [d for d in profile_details if d.get("first_token_share_mean") is not None]
    if not found:
        return None
    d = found[-1]
    return {
        "share": float(d["first_token_share_mean"]),
        "from": d.get("first_token_from"),
        "heads": d.get("heads"),
        "heads_over_half": d.get("heads_first_token_over_half"),
        "seq_len": d.get("seq_len"),
    }


SETTLED_WITHIN = 0.01  # an adaptation has stopped improving: its last evaluation within 1% of the one before


def adaptation_curves(details: Sequence[dict]) -> dict[str, dict]:
    """configuration -> ``curve`` ([step, validation loss] of its adaptation run), ``settled`` (the last
    evaluation's perplexity within 1% of the one before: still falling means more steps would change the
    row), ``first`` and ``last`` perplexity, ``improved`` (last below first) and ``seed``, for each adapted
    configuration whose detail records its curve."""
    out = {}
    for d in details:
        curve = d.get("adapt_curve")
        if d.get("family") != "adapted" or not curve:
            continue
        settled = len(curve) >= 2 and math.exp(float(curve[-2][1]) - float(curve[-1][1])) < 1 + SETTLED_WITHIN
        first, last = math.exp(float(curve[0][1])), math.exp(float(curve[-1][1]))
        out[d["configuration"]] = {
            "curve": curve,
            "settled": bool(settled),
            "seed": d.get("adapt_seed"),
            "first": first,  # perplexity at the first and the last evaluation
            "last": last,
            "improved": bool(last < first),  # a curve that ends at or above its start never improved
        }
    return out


def seed_spread(table: pd.DataFrame) -> list[dict]:
    """Per adapted configuration measured from more than one seed (``REGIME_adapted[_sinkK]`` and its
    ``_seedS`` rows): the seeds' perplexities, their mean, standard deviation (n - 1) and range."""
    rows = table[table["family"] == "adapted"]
    groups: dict[str, list[tuple[str, float]]] = {}
    for name, ppl in zip(rows["configuration"], rows["ppl"]):
        base = SEED_SUFFIX.sub("", name)
        groups.setdefault(base, []).append((name, float(ppl)))
    out = []
    for base, members in groups.items():
        if len(members) < 2:
            continue
        values = np.array([p for _, p in members])
        out.append(
            {
                "configuration": base,
                "n_seeds": len(values),
                "ppl": values.tolist(),
                "mean": float(values.mean()),
                "sd": float(values.std(ddof=1)),
                "min": float(values.min()),
                "max": float(values.max()),
            }
        )
    return out


def sink_effects(table: pd.DataFrame) -> list[dict]:
    """For each static or profiled configuration measured both without and with k sink tokens: both
    perplexities and ACRs, each perplexity also as a multiple of the full-attention patch's (``unpatched``
    where there is no patch row). Rows: ``configuration, sinks, ppl, ppl_sinks, acr, acr_sinks, x_full,
    x_full_sinks``."""
    if table.empty or "sink_tokens" not in table:
        return []
    full = table[table["configuration"].isin(["full_attention", "unpatched"])]
    if full.empty:
        return []
    full_ppl = float(full.sort_values("configuration")["ppl"].iloc[0])  # full_attention sorts first
    by_name = {c: r for c, r in zip(table["configuration"], table.to_dict("records"))}
    out = []
    for row in table.to_dict("records"):
        k = int(row["sink_tokens"] or 0)
        if not k or row["family"] not in ("sliding_window", "head_windows"):
            continue
        base = by_name.get(str(row["configuration"]).removesuffix(f"_sink{k}"))
        if base is None or int(base["sink_tokens"] or 0):
            continue
        out.append(
            {
                "configuration": base["configuration"],
                "sinks": k,
                "ppl": float(base["ppl"]),
                "ppl_sinks": float(row["ppl"]),
                "acr": float(base["acr"]),
                "acr_sinks": float(row["acr"]),
                "x_full": float(base["ppl"]) / full_ppl,
                "x_full_sinks": float(row["ppl"]) / full_ppl,
            }
        )
    return out
