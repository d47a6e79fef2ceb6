"""The routing scalars a trainer's logger receives, under one prefix (``aah/``), from routing rows.

One pure function (``routing_scalars``) turns what the recorder already holds for a block of steps
(``RoutingRows``: executed windows per head, groups per level, the recorder's coverage scalars, each
layer's latest routing update) into named series. The live callbacks hand it the last closed step;
``aah-viz export tensorboard`` hands it every step of a finished run, read back from its tables.
ACR and causal-pair coverage come from ``aah_viz.runlog.rows.layer_coverage``, the formulas the
recorder writes, so a logged value equals the run directory's.

Names (``SCALAR_DOCS`` says what each means):

- ``aah/acr``, ``aah/causal_coverage``, ``aah/realised_work``, ``aah/controller_grad_norm``
- ``aah/window_share/w{W}``: share of all heads executing candidate window W
- ``aah/groups/l{i}``: level-i groups, mean over the layers whose level i merges groups of level i-1
- ``aah/group_change_rate``: each layer's latest routing update, mean over layers
- ``aah/forced_share``: layers whose latest level-0 grouping is a forced bipartition / layers grouped
- ``aah/mean_window/layer{l:02d}``: a layer's mean executed window in tokens (``per_layer=True``)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aah_viz.runlog.rows import layer_coverage

PREFIX = "aah/"
FORCED_ORIGIN = "forced_bipartition"

SCALAR_DOCS = {
    "aah/acr": "ACR, the paper's key-length proxy (the run's acr scalar)",
    "aah/causal_coverage": "attended causal query-key pairs / all causal pairs (the run's acr_causal)",
    "aah/realised_work": "score elements the backend computed / full causal attention's (the run's realised_work)",
    "aah/controller_grad_norm": "L2 norm of the controller and joint-scorer gradients",
    "aah/window_share/w{W}": "share of all heads (layers x heads) executing candidate window W",
    "aah/groups/l{i}": "groups at hierarchy level i, mean over the layers whose level i merges groups of level i-1",
    "aah/group_change_rate": "group change rate of each layer's latest routing update, mean over layers",
    "aah/forced_share": "share of grouped layers whose latest level-0 grouping is a forced bipartition",
    "aah/mean_window/layer{l:02d}": "mean executed window of a layer's heads in tokens (per-layer keys)",
}


@dataclass(frozen=True)
class RoutingRows:
    """A block of S steps of what the recorder holds; every field but ``steps`` may be missing (None).

    Per-layer arrays hold NaN where a layer has no value (no update yet, a backend without work).
    """

    steps: np.ndarray  # (S,) int
    candidates: tuple[int, ...] = ()
    windows: np.ndarray | None = None  # (S, L, H) executed windows in tokens
    seq_len: np.ndarray | None = None  # (S,) sequence length of each step
    w_min: int = 0
    sinks: int = 0  # the config's sink_tokens: the first positions every query keeps (counted in ACR)
    groups: np.ndarray | None = None  # (S, L, depth, H) group id per head and level, -1 where none
    acr: np.ndarray | None = None  # (S,) given values win over ones computed from ``windows``
    causal_coverage: np.ndarray | None = None  # (S,)
    realised_work: np.ndarray | None = None  # (S,) model-wide, or None to average ``layer_work``
    layer_work: np.ndarray | None = None  # (S, L)
    controller_grad_norm: np.ndarray | None = None  # (S,)
    group_change_rate: np.ndarray | None = None  # (S, L) of each layer's latest routing update
    level0_forced: np.ndarray | None = None  # (S, L) 1.0 forced bipartition, 0.0 other grouping, NaN none


def _layer_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN; NaN where a row has no value (no warning)."""
    values = np.asarray(values, dtype=np.float64)
    ok = ~np.isnan(values)
    n = ok.sum(axis=-1)
    total = np.where(ok, values, 0.0).sum(axis=-1)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def group_counts(groups: np.ndarray) -> np.ndarray:
    """(S, L, depth) distinct non-negative group ids per layer and level, from (S, L, depth, H)."""
    groups = np.asarray(groups, dtype=np.int64)
    n_ids = max(int(groups.max(initial=-1)) + 1, 1)
    present = (groups[..., None] == np.arange(n_ids)).any(axis=-2)  # (S, L, depth, ids)
    return present.sum(axis=-1)


def routing_scalars(rows: RoutingRows, per_layer: bool = False) -> dict[str, np.ndarray]:
    """Named (S,) float series, NaN where a step has no value; names in this module's docstring."""
    S = len(rows.steps)
    out: dict[str, np.ndarray] = {}

    def put(name: str, values) -> None:
        values = np.asarray(values, dtype=np.float64).reshape(S)
        if not np.isnan(values).all():
            out[PREFIX + name] = values

    acr, causal = rows.acr, rows.causal_coverage
    if rows.windows is not None and rows.seq_len is not None and (acr is None or causal is None):
        layer_acr, layer_causal = layer_coverage(
            np.asarray(rows.windows), np.asarray(rows.seq_len), rows.w_min, rows.sinks
        )
        acr = layer_acr.mean(axis=1) if acr is None else acr
        causal = layer_causal.mean(axis=1) if causal is None else causal
    for name, values in (("acr", acr), ("causal_coverage", causal)):
        if values is not None:
            put(name, values)
    work = rows.realised_work
    if work is None and rows.layer_work is not None:
        work = _layer_mean(rows.layer_work)
    if work is not None:
        put("realised_work", work)
    if rows.controller_grad_norm is not None:
        put("controller_grad_norm", rows.controller_grad_norm)
    if rows.windows is not None:
        win = np.asarray(rows.windows)
        for w in rows.candidates:
            put(f"window_share/w{int(w)}", (win == int(w)).mean(axis=(1, 2)))
        if per_layer:
            means = win.mean(axis=2)
            for layer in range(win.shape[1]):
                put(f"mean_window/layer{layer:02d}", means[:, layer])
    if rows.groups is not None and np.asarray(rows.groups).shape[2]:
        counts = group_counts(rows.groups).astype(np.float64)
        counts[counts == 0] = np.nan  # a layer without that level
        # levels are nested: a level with as many groups as the one below is that level again (a hierarchy
        # that merged nothing), not a level of its own; TensorBoard would show it as one more identical card
        repeats = counts[:, :, 1:] == counts[:, :, :-1]
        counts[:, :, 1:][repeats] = np.nan
        for level in range(counts.shape[2]):
            put(f"groups/l{level}", _layer_mean(counts[:, :, level]))
    if rows.group_change_rate is not None:
        put("group_change_rate", _layer_mean(rows.group_change_rate))
    if rows.level0_forced is not None:
        put("forced_share", _layer_mean(rows.level0_forced))
    return out


def scalars_at(series: dict[str, np.ndarray], index: int) -> dict[str, float]:
    """One step of ``routing_scalars``' series as plain floats, the step's missing values left out."""
    values = {name: float(v[index]) for name, v in series.items()}
    return {name: v for name, v in values.items() if np.isfinite(v)}


def step_scalars(rows: RoutingRows, per_layer: bool = False) -> dict[str, float]:
    """The scalars of the last step of ``rows`` (what a trainer's logger receives)."""
    return scalars_at(routing_scalars(rows, per_layer=per_layer), -1) if len(rows.steps) else {}
