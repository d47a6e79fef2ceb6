"""Window sufficiency: the share of a head's gold links that are longer than its window.

A link joins an earlier word (the key) to a later one (the query), in the causal direction. Its
length is the distance in tokens between the two words' first tokens; a head with window ``w``
cannot see the key's first token from the query's first token when the length is ``>= w``.
Dependency links are every gold dependency except ``root`` and ``punct``; coreference links join
each mention to the nearest earlier mention of its chain.
"""

from __future__ import annotations

import numpy as np

from aah_viz.probes.syntax import gold_links, is_excluded


def dependency_lengths(doc, alignment) -> np.ndarray:
    gold = gold_links(doc)
    keep = np.array([not is_excluded(r) for r in gold.relation], dtype=bool)
    first = alignment.word_first_token
    a, b = first[gold.dependent[keep]], first[gold.head[keep]]
    ok = (a >= 0) & (b >= 0)
    return np.abs(a[ok] - b[ok])


def sufficiency_rows(
    step: int, windows: np.ndarray, syntax_lengths: np.ndarray, coref_lengths: np.ndarray
) -> list[dict]:
    """probe_heads rows (probe ``sufficiency``): ``syntax_beyond``, ``coref_beyond``, ``all_beyond``
    (shares of links of length >= window) and the link counts ``syntax_links``, ``coref_links``."""
    syntax_lengths = np.asarray(syntax_lengths, dtype=np.int64)
    coref_lengths = np.asarray(coref_lengths, dtype=np.int64)
    both = np.concatenate([syntax_lengths, coref_lengths])
    rows = []
    n_layer, n_head = windows.shape
    for layer in range(n_layer):
        for head in range(n_head):
            w = int(windows[layer, head])
            values = {
                "syntax_beyond": (syntax_lengths >= w).mean() if len(syntax_lengths) else np.nan,
                "coref_beyond": (coref_lengths >= w).mean() if len(coref_lengths) else np.nan,
                "all_beyond": (both >= w).mean() if len(both) else np.nan,
                "syntax_links": len(syntax_lengths),
                "coref_links": len(coref_lengths),
            }
            for metric, value in values.items():
                rows.append(
                    {
                        "step": step,
                        "layer": layer,
                        "head": head,
                        "probe": "sufficiency",
                        "metric": metric,
                        "value": float(value),
                        "window": w,
                    }
                )
    return rows
