"""A synthetic run of ``aah-viz frontier``: configurations as inference events, and profile rows."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from aah_viz.runlog.manifest import make_manifest
from aah_viz.runlog.writer import RunWriter
from aah_viz.stats.proportions import wilson_interval


def make_synthetic_frontier_run(
    root: str | os.PathLike, seed: int = 0, n_blocks: int = 8, retrieval: bool = False
) -> Path:
    """A run as ``aah-viz frontier`` writes one: an ``inference`` event per configuration (unpatched,
    static windows, an adapted AAH) with per-block losses drawn around a perplexity that falls with ACR;
    with ``retrieval``, a ``retrieval`` event each too (five passkey questions, answered more often at
    a larger ACR), as ``--retrieval 1`` writes them."""
    rng = np.random.RandomState(seed)
    manifest = make_manifest(
        run_id=Path(root).name, regime="frontier", seed=seed, config={"kind": "frontier"}, windows=[8, 16, 32],
        seq_len=32, n_layer=2, n_head=4, max_depth=1,
    )  # fmt: skip
    writer = RunWriter.create(root, manifest)
    configurations = [("unpatched", "unpatched", 1.0), ("sliding_window_8", "sliding_window", 0.25)]
    configurations += [("sliding_window_16", "sliding_window", 0.5), ("full_adaptive_adapted", "adapted", 0.3)]
    for i, (name, family, acr) in enumerate(configurations):
        mean_nll = 32 * (3.0 + 0.4 * (1.0 - acr) - (0.2 if family == "adapted" else 0.0))  # nats per block
        writer.event(
            0, "inference", configuration=name, family=family, acr=acr, acr_causal=acr, tokens_per_block=32,
            block_nll=(mean_nll + rng.normal(0.0, 1.0, n_blocks)).tolist(),
            speed_vs_unpatched={
                "median": 1.0 + 0.5 * i, "ci95": [0.9 + 0.5 * i, 1.1 + 0.5 * i], "n_pairs": 2,
                "warning": "only 2 pairs (at least 9 recommended)",
            },
        )  # fmt: skip
        if retrieval:
            correct = int(rng.binomial(5, acr))
            writer.event(
                0, "retrieval", configuration=name, family=family, accuracy=correct / 5, correct=correct, n=5,
                ci95=list(wilson_interval(correct, 5)), by_depth={"0.50": [correct, 5]},
            )  # fmt: skip
    writer.append("head_spans", _head_spans(rng, n_layer=2, n_head=4, windows=(8, 16, 32)))
    writer.close("finished")
    return Path(root)


def _head_spans(rng, n_layer: int, n_head: int, windows) -> dict:
    """``aah-viz profile`` rows: per head a share of mass that grows with the window (all of it at the
    largest), its 95% and 99% spans, and a random executed candidate."""
    rows = {c: [] for c in ("step", "layer", "head", "window", "mass_share", "needed_95", "needed_99")}
    rows["executed_window"] = []
    for layer in range(n_layer):
        for head in range(n_head):
            shares = np.sort(rng.uniform(0.5, 1.0, len(windows)))
            shares[-1] = 1.0
            needed = int(rng.randint(1, windows[-1] + 1))
            executed = int(windows[rng.randint(len(windows))])
            for w, share in zip(windows, shares):
                for col, value in (
                    ("step", 0),
                    ("layer", layer),
                    ("head", head),
                    ("window", int(w)),
                    ("mass_share", float(share)),
                    ("needed_95", needed),
                    ("needed_99", min(windows[-1], needed + 2)),
                    ("executed_window", executed),
                ):
                    rows[col].append(value)  # fmt: skip
    return rows
