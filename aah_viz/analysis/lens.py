"""The token lens: what a head reads under full attention, and what its executed window cuts.

Pure functions on arrays and tables. ``attention_rows`` turns one document's full causal attention
(layers x heads x queries x keys) and the executed windows into the rows of the
``attention_samples`` table: per (layer, head, query) its strongest keys with their weights, the
window it executes, the mass outside that window and the mass on the sink positions (the first
tokens, which pretrained decoders use as an attention sink). The rest reads those tables back for
the dashboard page and the ``tokens`` figure.

A window of W tokens covers the distances 0..W-1: query t keeps keys t-W+1..t (the band every
execution backend runs), so the mass it loses is that of keys 0..t-W; with ``sink_tokens = k`` the
first k keys stay visible besides the window, so it loses keys k..t-W only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEFAULT_TOP_K = 8
DISTANCE_BINS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # left edges, tokens


def attention_rows(
    probs: np.ndarray, windows: np.ndarray, top_k: int = DEFAULT_TOP_K, sink: int = 1, kept: int = 0
) -> dict:
    """Rows of ``attention_samples`` for one document (without ``step`` and ``doc``).

    ``probs``: (L, H, T, T) causal attention rows (each row sums to one over keys 0..t);
    ``windows``: (L, H) executed windows in tokens; ``sink``: how many first positions are the sink
    (``mass_sink``); ``kept``: how many first positions the model keeps visible besides every window
    (its ``sink_tokens``: their mass is never cut).
    The keys of a query are its ``top_k`` largest weights among keys 0..t, largest first (the
    nearer key first among equal weights)."""
    probs = np.asarray(probs, dtype=np.float64)
    L, H, T, _ = probs.shape
    windows = np.asarray(windows, dtype=np.int64).reshape(L, H)
    k = int(max(1, min(top_k, T)))
    cum = np.cumsum(probs, axis=-1)  # cum[..., t, j] = mass on keys 0..j
    t = np.arange(T)
    rows: dict[str, list] = {c: [] for c in ("layer", "head", "query", "keys", "weights")}
    rows.update(window=[], mass_outside=[], mass_sink=[])
    nearer_first = np.broadcast_to(-t[None, :], (T, T))  # among equal weights, the nearer key first
    for layer in range(L):
        for head in range(H):
            p, c = probs[layer, head], cum[layer, head]
            masked = np.where(t[None, :] <= t[:, None], p, -1.0)  # future keys never chosen
            top = np.lexsort((nearer_first, -masked), axis=-1)[:, :k]
            w = int(windows[layer, head])
            cut = t - w  # last key outside the window, per query
            outside = np.where(cut >= 0, c[t, np.clip(cut, 0, T - 1)], 0.0)
            if kept > 0:  # the first kept keys stay visible: their part of the cut mass is not lost
                on_kept = c[t, np.clip(np.minimum(cut, kept - 1), 0, T - 1)]
                outside = np.where(cut >= 0, outside - on_kept, 0.0)
            s = min(sink, T)
            on_sink = c[t, np.minimum(t, s - 1)] if s > 0 else np.zeros(T)
            for q in range(T):
                keys = [int(j) for j in top[q] if j <= q]
                rows["layer"].append(layer)
                rows["head"].append(head)
                rows["query"].append(q)
                rows["keys"].append(keys)
                rows["weights"].append([float(p[q, j]) for j in keys])
                rows["window"].append(w)
                rows["mass_outside"].append(float(outside[q]))
                rows["mass_sink"].append(float(on_sink[q]))
    return rows


def head_rows(samples: pd.DataFrame, doc: int, layer: int, head: int) -> pd.DataFrame:
    """The selected head's rows of one document, by query."""
    sel = samples[(samples["doc"] == doc) & (samples["layer"] == layer) & (samples["head"] == head)]
    return sel.sort_values("query").reset_index(drop=True)


def weight_matrix(rows: pd.DataFrame, n_tokens: int) -> np.ndarray:
    """(T, T) weights of the stored keys (zero where a key was not among a query's strongest)."""
    m = np.zeros((n_tokens, n_tokens))
    for q, keys, weights in zip(rows["query"], rows["keys"], rows["weights"]):
        if 0 <= q < n_tokens:
            for j, wt in zip(keys, weights):
                if 0 <= j < n_tokens:
                    m[q, j] = wt
    return m


def distance_map(samples: pd.DataFrame, doc: int, n_layer: int, n_head: int) -> tuple[np.ndarray, list[str]]:
    """(n_layer * n_head, bins) mean weight per query that the stored keys put at each distance bin
    (bins start at ``DISTANCE_BINS``), for picking a head: rows are heads, layer by layer."""
    sel = samples[samples["doc"] == doc]
    longest = int(sel["query"].max()) + 1 if len(sel) else 1
    edges = [b for b in DISTANCE_BINS if b < longest] or [0]
    out = np.zeros((n_layer * n_head, len(edges)))
    counts = np.zeros(n_layer * n_head)
    for layer, head, q, keys, weights in zip(sel["layer"], sel["head"], sel["query"], sel["keys"], sel["weights"]):
        row = int(layer) * n_head + int(head)
        if row >= out.shape[0]:
            continue
        counts[row] += 1
        d = int(q) - np.asarray(keys, dtype=np.int64)
        if d.size:
            np.add.at(out[row], np.searchsorted(edges, d, side="right") - 1, np.asarray(weights, dtype=np.float64))
    out /= np.maximum(counts, 1)[:, None]
    labels = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in zip(edges, list(edges[1:]) + [longest])]
    return out, labels


def head_summary(samples: pd.DataFrame, doc: int) -> pd.DataFrame:
    """Per (layer, head) of one document: executed window, mean mass outside it and on the sink."""
    sel = samples[samples["doc"] == doc]
    if sel.empty:
        return pd.DataFrame(columns=["layer", "head", "window", "mass_outside", "mass_sink"])
    return (
        sel.groupby(["layer", "head"], as_index=False)
        .agg(window=("window", "first"), mass_outside=("mass_outside", "mean"), mass_sink=("mass_sink", "mean"))
        .sort_values(["layer", "head"])
        .reset_index(drop=True)
    )


LENS_TABLE_NAMES = ("lens_tokens", "lens_links", "attention_samples")


def lens_tables(run) -> dict[str, pd.DataFrame]:
    """The run's lens tables at the newest step that has them (``{}`` without a lens)."""
    present = set(run.tables())
    if "attention_samples" not in present or "lens_tokens" not in present:
        return {}
    out = {name: run.table(name) if name in present else pd.DataFrame() for name in LENS_TABLE_NAMES}
    if out["attention_samples"].empty:
        return {}
    step = int(out["attention_samples"]["step"].max())
    return {name: (t[t["step"] == step].reset_index(drop=True) if len(t) else t) for name, t in out.items()}


def doc_names(tokens: pd.DataFrame) -> dict[int, str]:
    """Document number -> its name and source, for pickers."""
    firsts = tokens.drop_duplicates("doc").sort_values("doc")
    return {int(r.doc): f"{r.doc}: {r.doc_id} ({r.source})" for r in firsts.itertuples()}


def doc_tokens(tables: dict[str, pd.DataFrame], doc: int) -> pd.DataFrame:
    t = tables["lens_tokens"]
    return t[t["doc"] == doc].sort_values("position").reset_index(drop=True)


def doc_links(tables: dict[str, pd.DataFrame], doc: int) -> pd.DataFrame:
    links = tables.get("lens_links")
    if links is None or links.empty:
        return pd.DataFrame(columns=["kind", "label", "query", "key", "gold", "query_is_head"])
    return links[links["doc"] == doc].reset_index(drop=True)


def query_row(samples: pd.DataFrame, doc: int, layer: int, head: int, query: int) -> dict | None:
    sel = samples[
        (samples["doc"] == doc) & (samples["layer"] == layer) & (samples["head"] == head) & (samples["query"] == query)
    ]
    return None if sel.empty else sel.iloc[0].to_dict()


def relation_arcs(links: pd.DataFrame, relation: str) -> pd.DataFrame:
    """The gold links of one relation (a dependency label, or ``coref``: a pronoun and its antecedent)."""
    if links is None or not len(links):
        return pd.DataFrame(columns=["query", "key", "label", "kind"])
    if relation == "coref":
        chosen = links[(links["kind"] == "coref") & links["gold"].astype(bool)]
    else:
        chosen = links[(links["kind"] == "dep") & (links["label"] == relation)]
    return chosen.reset_index(drop=True)


def arc_agreement(rows: pd.DataFrame, arcs: pd.DataFrame) -> tuple[int, int]:
    """(arcs whose query puts its largest recorded weight on the arc's key, arcs whose query was recorded):
    how often a head reads along a relation on this document."""
    first = {int(q): int(keys[0]) for q, keys in zip(rows["query"], rows["keys"]) if len(keys)}
    seen = [(int(q), int(k)) for q, k in zip(arcs["query"], arcs["key"]) if int(q) in first]
    return sum(first[q] == k for q, k in seen), len(seen)
