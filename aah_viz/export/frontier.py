"""The ``frontier`` export: a frontier run's configurations, perplexity (with its block-bootstrap
interval) against ACR and measured speed, and which of them lie on the Pareto front
(``aah-viz frontier``)."""

from __future__ import annotations

import pandas as pd

from aah_viz.analysis.frontier import COLUMNS, run_frontier_table
from aah_viz.export.frontier_form import frontier_form

NAME = "frontier"
ID_COLUMNS = ["run", "configuration", "family", "adapt_steps", "sink_tokens", "pareto"]
VALUE_COLUMNS = [c for c in COLUMNS if c not in ID_COLUMNS]
DECIMALS = {
    "ppl": 3,
    "ppl_lo": 3,
    "ppl_hi": 3,
    "acr": 4,
    "acr_causal": 4,
    "realised_work": 4,
    "n_blocks": 0,
    "retrieval_n": 0,
}
NOTES = [
    "ppl: perplexity over the evaluated tokens; ppl_lo, ppl_hi: its 95% interval from a bootstrap over "
    "evaluation blocks (the same resamples for every configuration of a run, so differences are paired).",
    "acr: mean key length over the sequence length (the paper's ACR); acr_causal: share of causal pairs kept; "
    "speed_vs_unpatched: median ratio of the unpatched model's forward time to this configuration's, measured "
    "side by side (speed_lo, speed_hi: its 95% interval).",
    "pareto: no other configuration of the run has both a lower ACR and a lower perplexity.",
    "retrieval: share of the retrieval_n passkey questions answered (a key hidden at five depths of filler, "
    "prompts as long as the blocks; retrieval_lo, retrieval_hi: Wilson's 95% interval); empty where not asked.",
]


def build_tables(runs, **_opts) -> list:
    """The export table of ``runs`` (``aah_viz.runlog.Run``); runs that are not frontiers add no rows."""
    from aah_viz.export.table import Table

    frames = []
    for run in runs:
        table = run_frontier_table(run)
        if len(table):
            frames.append(table.assign(run=str(run.run_id)))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS) + ["run"])
    table = Table(
        name=NAME,
        df=df[ID_COLUMNS + VALUE_COLUMNS].reset_index(drop=True),
        caption="Perplexity against compute: each configuration's perplexity with its 95% interval, ACR "
        "and measured speed, and the Pareto front",
        label="tab:frontier",
        notes=list(NOTES),
        id_columns=list(ID_COLUMNS),
        value_columns=list(VALUE_COLUMNS),
        decimals={c: DECIMALS.get(c, 3) for c in VALUE_COLUMNS},
        empty_message="no frontier in these runs: run aah-viz frontier MODEL first",
    )
    if not table.is_empty:
        table.latex_form = frontier_form(table)
    return [table]
