"""The per-head measurements the head similarities read, from a run's tables or from raw masses.

- ``probe``: every head's probe scores, from ``probe_heads`` (``aah-viz probe``): the syntactic
  accuracy per relation and direction (``REL:dep2head``, ``REL:head2dep``; a causal model's
  ``REL:dependent_to_head``, ``REL:head_to_dependent``) and the coreference
  accuracy per antecedent-distance bucket (``acc:BUCKET``); a score a head lacks is nan;
- ``distance``: every head's share of attention per distance bucket, from the probe's ``distance``
  rows (on the probe inputs, under the windows the heads executed) or from a full-attention mass;
- ``span``: every head's mass inside each candidate window, from ``head_spans`` (``aah-viz profile``)
  or from a full-attention mass.

Pure numpy and pandas; the measurement on two halves of the data is ``instrumentation.measure.head_measures``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from aah_viz.analysis.head_similarity import HeadInput
from aah_viz.probes.distance import DISTANCE_EDGES, distance_labels
from aah_viz.probes.syntax_causal import SYNTAX_DIRECTIONS

SYNTAX_METRIC = re.compile(f"^(?!all:).+:({'|'.join(SYNTAX_DIRECTIONS)})$")
COREF_METRIC = re.compile(r"^acc:")


def bucket_distance_mass(mass: np.ndarray) -> np.ndarray:
    """(..., T) mass at each distance -> (..., buckets) mass per ``DISTANCE_EDGES`` bucket (the probe's)."""
    mass = np.asarray(mass, dtype=np.float64)
    distances = np.arange(mass.shape[-1])
    bucket = np.searchsorted(DISTANCE_EDGES, distances, side="right") - 1
    out = np.zeros(mass.shape[:-1] + (len(DISTANCE_EDGES),))
    for b in range(len(DISTANCE_EDGES)):
        out[..., b] = mass[..., bucket == b].sum(axis=-1)
    return out


def span_from_mass(mass: np.ndarray, windows: Sequence[int]) -> np.ndarray:
    """(..., T) mass at each distance -> (..., K) share of it inside each window (distances 0..W-1),
    as ``aah-viz profile`` computes ``head_spans.mass_share``."""
    mass = np.asarray(mass, dtype=np.float64)
    total = np.maximum(mass.sum(axis=-1, keepdims=True), 1e-300)
    cum = np.cumsum(mass, axis=-1) / total
    return np.stack([cum[..., min(int(w), mass.shape[-1]) - 1] for w in windows], axis=-1)


def _wide(rows: pd.DataFrame, n_layer: int, n_head: int, columns: list[str]) -> np.ndarray:
    out = np.full((n_layer, n_head, len(columns)), np.nan)
    if rows.empty or not columns:
        return out
    wide = rows.pivot_table(index=["layer", "head"], columns="metric", values="value", aggfunc="mean", dropna=False)
    wide = wide.reindex(columns=columns)
    layer = wide.index.get_level_values("layer").to_numpy(dtype=int)
    head = wide.index.get_level_values("head").to_numpy(dtype=int)
    ok = (layer >= 0) & (layer < n_layer) & (head >= 0) & (head < n_head)
    out[layer[ok], head[ok]] = wide.to_numpy(dtype=np.float64)[ok]
    return out


def probe_inputs(probe_heads: pd.DataFrame, n_layer: int, n_head: int) -> dict[str, tuple[np.ndarray, list[str]]]:
    """``{"probe": (array, columns), "distance": (array, columns)}`` from ``probe_heads`` rows at their
    newest step; a kind without rows is left out."""
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    if probe_heads is None or probe_heads.empty:
        return out
    rows = probe_heads[probe_heads["step"] == probe_heads["step"].max()]
    syntax = rows[(rows["probe"] == "syntax") & rows["metric"].str.match(SYNTAX_METRIC)]
    coref = rows[(rows["probe"] == "coref") & rows["metric"].str.match(COREF_METRIC)]
    scores = pd.concat([syntax, coref])
    if len(scores):
        columns = sorted(syntax["metric"].unique()) + list(dict.fromkeys(coref["metric"]))
        out["probe"] = (_wide(scores, n_layer, n_head, columns), columns)
    distance = rows[rows["probe"] == "distance"]
    if len(distance):
        columns = [f"mass:{label}" for label in distance_labels()]
        out["distance"] = (np.nan_to_num(_wide(distance, n_layer, n_head, columns)), columns)
    return out


def span_input(head_spans: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray | None:
    """(n_layer, n_head, K) ``mass_share`` per candidate window at the newest profiled step; None without rows."""
    if head_spans is None or head_spans.empty:
        return None
    rows = head_spans[head_spans["step"] == head_spans["step"].max()]
    windows = sorted(int(w) for w in rows["window"].unique())
    out = np.full((n_layer, n_head, len(windows)), np.nan)
    for (layer, head, window), share in rows.groupby(["layer", "head", "window"])["mass_share"].mean().items():
        if 0 <= layer < n_layer and 0 <= head < n_head:
            out[int(layer), int(head), windows.index(int(window))] = share
    return np.nan_to_num(out)


def inputs_from_tables(tables: dict[str, pd.DataFrame], n_layer: int, n_head: int) -> dict[str, HeadInput]:
    """What a run's own tables give (no halves): probe scores and attention by distance from
    ``probe_heads``, spans from ``head_spans``."""
    out: dict[str, HeadInput] = {}
    found = probe_inputs(tables.get("probe_heads"), n_layer, n_head)
    if "probe" in found:
        out["probe"] = HeadInput(found["probe"][0], source="probe_heads table")
    if "distance" in found:
        out["distance"] = HeadInput(found["distance"][0], source="probe_heads distance rows (executed windows)")
    span = span_input(tables.get("head_spans"), n_layer, n_head)
    if span is not None:
        out["span"] = HeadInput(span, source="head_spans table")
    return out
