"""What each head needs: its attention mass by distance under full attention (``aah-viz profile``).

Every batch runs once routed (frozen, as ``evaluate`` runs it: the windows each head executes) and
once with every attention layer at full causal attention (routing bypassed, the model's own
scaling), and per head the mass at distance d = mean over (batch, query) of
P[t, t-d] is accumulated. From it: the share of the mass inside each candidate window (a window
W covers distances 0..W-1, the band the backends execute) and the smallest window that keeps 95%
and 99% of it. Beside the window routing executes, this shows where routing cuts what a head
uses (the question MoA and DuoAttention answer by profiling).

Also per head, the share of attention on the block's first token from the queries beyond the
smallest candidate window: the mass a window of that size takes away from a head that uses the
first position as an attention sink (as pretrained decoders do, StreamingLLM's observation). With
``sink_tokens`` (k, one or more), each head's needed window when the first k positions are kept
besides the window (``sink_tokens``, method §10.4): the window W keeps the mass at distances below W
plus all the mass on the first k keys, so the needed window with sinks is at most the one without.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable

import numpy as np
import torch

from instrumentation.backends.dense_masked import dense_masked_attention


def distance_mass(probs: torch.Tensor) -> torch.Tensor:
    """(H, T) mass at distance d (mean over batch and the T queries) of causal probabilities (B, H, T, T)."""
    B, H, T, _ = probs.shape
    out = torch.zeros(H, T, dtype=torch.float64)
    p = probs.detach().double()
    for d in range(T):
        out[:, d] = torch.diagonal(p, offset=-d, dim1=-2, dim2=-1).sum(dim=(0, 2)).cpu()
    return out / (B * T)


def first_token_mass(probs: torch.Tensor, start: int) -> torch.Tensor:
    """(H,) summed attention on key 0 of the queries ``start..T-1`` (summed over the batch too), and
    their count is ``B * (T - start)``."""
    return probs.detach()[:, :, start:, 0].double().sum(dim=(0, 2)).cpu()


def sink_distance_mass(probs: torch.Tensor, sinks: int) -> torch.Tensor:
    """(H, T) mass at distance d on the first ``sinks`` keys only (mean over batch and the T queries)."""
    B, H, T, _ = probs.shape
    out = torch.zeros(H, T, dtype=torch.float64)
    p = probs.detach().double()
    for j in range(min(int(sinks), T)):  # key j seen by query t at distance t - j
        out[:, : T - j] += p[:, :, j:, j].sum(dim=0).cpu()
    return out / (B * T)


def needed_window(mass: np.ndarray, share: float, sink_mass: np.ndarray | None = None) -> np.ndarray:
    """Per head, the smallest window (tokens) whose distances 0..W-1 hold ``share`` of the mass; with
    ``sink_mass`` (the part of ``mass`` on the first k keys, by distance), the mass on those keys counts
    as kept at every window (they stay visible besides it)."""
    total = np.maximum(mass.sum(axis=-1, keepdims=True), 1e-300)
    if sink_mass is None:
        cum = np.cumsum(mass, axis=-1)
    else:
        cum = np.cumsum(mass - sink_mass, axis=-1) + sink_mass.sum(axis=-1, keepdims=True)
    return (cum / total < share - 1e-12).sum(axis=-1) + 1


@contextlib.contextmanager
def dense_attention(routed, windows_of, on_probs=None, sinks: int = 0):
    """Run every attention layer of ``routed`` through the dense masked backend with the per-head windows
    ``windows_of(layer_index, n_head, T)`` (the model's own scaling, routing state untouched), the first
    ``sinks`` positions kept by the heads it cuts; with ``on_probs``, each forward's probabilities
    (B, H, T, T) go to ``on_probs(layer_index, probs)``. Restores the layers on exit."""
    layers = routed.attention_layers()

    def make(layer):
        def attend(q, k, v, *, need_probs: bool = False, scale: float | None = None, mask=None):
            T = q.shape[2]
            wins = [min(T, int(w)) for w in windows_of(layer.layer_index, q.shape[1], T)]
            keep = int(sinks) if any(w < T for w in wins) else 0
            want = need_probs or on_probs is not None
            res = dense_masked_attention(q, k, v, wins, scale=scale, need_probs=want, mask=mask, sinks=keep)
            if on_probs is not None:
                on_probs(layer.layer_index, res.probs)
            return res.out, (res.probs if need_probs else None)

        return attend

    try:
        for layer in layers:
            layer.attend = make(layer)  # the instance attribute shadows the class's attend
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("attend", None)


def full_attention(routed, on_probs):
    """Every attention layer of ``routed`` at full causal attention (``dense_attention``), each forward's
    probabilities (B, H, T, T) handed to ``on_probs(layer_index, probs)``."""
    return dense_attention(routed, lambda _layer, n_head, T: [T] * n_head, on_probs)


@contextlib.contextmanager
def full_attention_capture(
    routed,
    sink: dict[int, torch.Tensor],
    first: dict | None = None,
    first_from: int = 1,
    on_sinks: dict | None = None,
    sink_tokens: tuple[int, ...] = (),
):
    """Full causal attention in every layer of ``routed`` (``full_attention``), adding each forward's
    distance mass into ``sink[layer]``; with ``first``, also each forward's (first-token mass of the
    queries from ``first_from`` on, their count) into ``first[layer]``; with ``on_sinks``, for each k of
    ``sink_tokens`` the distance mass on the first k keys into ``on_sinks[(layer, k)]``."""

    def add(into: dict, key, mass: torch.Tensor) -> None:
        prev = into.get(key)
        if prev is not None and prev.shape[1] < mass.shape[1]:
            prev = torch.nn.functional.pad(prev, (0, mass.shape[1] - prev.shape[1]))
        elif prev is not None and prev.shape[1] > mass.shape[1]:
            mass = torch.nn.functional.pad(mass, (0, prev.shape[1] - mass.shape[1]))
        into[key] = mass if prev is None else prev + mass

    def collect(index: int, probs: torch.Tensor) -> None:
        T = probs.shape[-1]
        add(sink, index, distance_mass(probs))
        if on_sinks is not None:
            for k in sink_tokens:
                add(on_sinks, (index, k), sink_distance_mass(probs, k))
        if first is not None and T > first_from:
            got, count = first.get(index, (0.0, 0))
            first[index] = (got + first_token_mass(probs, first_from), count + probs.shape[0] * (T - first_from))

    with full_attention(routed, collect):
        yield sink


def profile_heads(
    model, routed, batches: Iterable, *, logits_fn, step: int | None = None, sink_tokens=()
) -> tuple[dict, dict]:
    """Rows of the ``head_spans`` table and a summary detail, from full-attention forwards over ``batches``.

    With ``sink_tokens`` (k values), the detail's ``needed_with_sinks[str(k)]`` holds each head's needed
    window at 95% and 90% of its mass with the first k positions kept ([layer][head] each), beside
    ``needed_95`` and ``needed_90`` without them.
    """
    sink_tokens = tuple(sorted({int(k) for k in sink_tokens if int(k) > 0}))
    sink: dict[int, torch.Tensor] = {}
    on_sinks: dict[tuple, torch.Tensor] = {}
    first: dict[int, tuple] = {}
    first_from = min(int(w) for w in routed.cfg.windows)  # queries a window of the smallest size cuts off key 0
    n = 0
    was = model.training
    model.eval()
    try:
        with routed.routing_mode("frozen"), torch.no_grad():
            for x, _ in batches:
                logits_fn(model, x)  # routed as evaluate runs it: what each head executes on this batch
                with full_attention_capture(routed, sink, first, first_from, on_sinks, sink_tokens):
                    logits_fn(model, x)
                n += 1
    finally:
        model.train(was)
    executed = routed.current_windows().numpy()  # the last batch's (a never-trained model decides per forward)
    cands = [int(w) for w in routed.cfg.windows]
    rows: dict[str, list] = {k: [] for k in ("step", "layer", "head", "window", "mass_share")}
    rows.update(needed_95=[], needed_99=[], executed_window=[])
    cut = []
    first_share = {layer: (got / count).numpy() for layer, (got, count) in first.items() if count}
    needed: dict[str, list] = {"needed_95": [], "needed_90": []}
    with_sinks = {str(k): {"needed_95": [], "needed_90": []} for k in sink_tokens}
    for layer in sorted(sink):
        mass = (sink[layer] / n).numpy()
        n95, n99 = needed_window(mass, 0.95), needed_window(mass, 0.99)
        needed["needed_95"].append(n95.astype(int).tolist())
        needed["needed_90"].append(needed_window(mass, 0.90).astype(int).tolist())
        for k in sink_tokens:
            on_k = (on_sinks[(layer, k)] / n).numpy()[:, : mass.shape[1]]
            for share, key in ((0.95, "needed_95"), (0.90, "needed_90")):
                with_sinks[str(k)][key].append(needed_window(mass, share, on_k).astype(int).tolist())
        cum = np.cumsum(mass, axis=-1)
        for h in range(mass.shape[0]):
            exe = int(executed[layer, h])
            cut.append(exe < n95[h])
            for w in cands:
                rows["step"].append(int(step or 0))
                rows["layer"].append(layer)
                rows["head"].append(h)
                rows["window"].append(w)
                rows["mass_share"].append(float(cum[h, min(w, mass.shape[1]) - 1]))
                rows["needed_95"].append(int(n95[h]))
                rows["needed_99"].append(int(n99[h]))
                rows["executed_window"].append(exe)
    detail = dict(
        n_batches=n,
        heads=len(cut),
        heads_cut_below_95=int(sum(cut)),
        share_cut_below_95=float(np.mean(cut)) if cut else math.nan,
    )
    if sink_tokens:
        detail.update(needed, sink_tokens=list(sink_tokens), needed_with_sinks=with_sinks)
        detail["needed_mean"] = {
            "none": {key: float(np.mean(v)) for key, v in needed.items()},
            **{k: {key: float(np.mean(v)) for key, v in d.items()} for k, d in with_sinks.items()},
        }
    if first_share:
        shares = np.stack([first_share[layer] for layer in sorted(first_share)])
        detail.update(
            first_token_from=first_from,
            first_token_share=[[round(float(v), 6) for v in row] for row in shares],  # [layer][head]
            first_token_share_mean=float(shares.mean()),
            heads_first_token_over_half=int((shares > 0.5).sum()),
        )
    return rows, detail
