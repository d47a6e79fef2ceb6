"""A synthetic token lens added to a run (the tables ``aah-viz lens`` writes)."""

from __future__ import annotations

import os

import numpy as np


def add_synthetic_lens(run_dir: str | os.PathLike, step: int, n_layer: int, n_head: int, T: int = 14) -> None:
    """A token lens of one syntax document, as ``aah-viz lens`` writes it: random causal attention
    (seeded), every head at a 4-token window, a dependency arc from token 9 to token 5."""
    import pandas as pd

    from aah_viz.analysis.lens import attention_rows
    from aah_viz.runlog.rewrite import rewrite_step

    rng = np.random.RandomState(1)
    probs = np.tril(rng.random_sample((n_layer, n_head, T, T)) ** 3)
    probs /= probs.sum(-1, keepdims=True)
    samples = pd.DataFrame(attention_rows(probs, np.full((n_layer, n_head), 4)))
    text = "The <b>cat</b> sat on it"
    tokens = pd.DataFrame({"position": range(T), "token": [text[i] if i < len(text) else "." for i in range(T)]})
    links = pd.DataFrame({"kind": ["dep"], "label": ["nsubj"], "query": [9], "key": [5], "gold": [True]})
    tables = {
        "attention_samples": samples.assign(doc=0, step=step),
        "lens_tokens": tokens.assign(word=-1, special=False, doc=0, doc_id="d1", source="syntax", step=step),
        "lens_links": links.assign(query_is_head=True, doc=0, step=step),
    }
    rewrite_step(run_dir, tables, step, purpose="writing a synthetic lens")
