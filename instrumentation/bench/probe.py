"""What the probes cost over the model's own forward passes (``aah-viz bench probe``).

Two sides, paired and interleaved (``aah_viz.paired_timing``):

- ``probe``: ``run_probes`` on the documents, everything included (tokenisation, word
  alignment, forward passes, scoring, the bootstrap intervals);
- ``forward``: the same model's forward passes with attentions on, over exactly the inputs the
  probe feeds it, batched the same way (``source.attend`` on the same id lists, so the attention
  arrays handed back are the same too); tokenised once, outside the timed region.

``ratio`` is the median per-pair ratio probe / forward (goal: at most ``GOAL``).
"""

from __future__ import annotations

import statistics

import torch

from aah_viz.paired_timing import interleave, paired_report, timed
from aah_viz.probes.coref import coref_queries
from aah_viz.probes.predict import DocumentPredictor
from aah_viz.probes.runner import plan_jobs, run_probes

GOAL = 1.5


def probe_batches(source, syntax_docs, coref_docs, context: str, batch_size: int) -> list[list[list[int]]]:
    """The id lists ``run_probes`` feeds ``source.attend``, in its batches (across documents)."""
    requests = []
    for syn_doc, cor_doc in plan_jobs(syntax_docs, coref_docs, context, int(source.max_len)):
        doc = syn_doc if syn_doc is not None else cor_doc
        queries = coref_queries(cor_doc) if cor_doc is not None else None
        requests += DocumentPredictor(doc, source, queries=queries, need_syntax=syn_doc is not None).requests
    return [requests[i : i + batch_size] for i in range(0, len(requests), batch_size)]


def bench_probe(
    source,
    syntax_docs,
    coref_docs,
    *,
    context: str = "sentence",
    relations: str = "universal",
    batch_size: int = 16,
    n_boot: int = 1000,
    min_count: int = 100,
    pairs: int = 5,
    clock: str = "cpu",
    progress=None,
) -> dict:
    """Paired times of the probe and of the plain forward passes on the same inputs."""
    batches = probe_batches(source, syntax_docs, coref_docs, context, batch_size)
    windows = source.windows

    def probe():
        run_probes(
            source,
            syntax_docs,
            coref_docs,
            windows=windows,
            candidate_windows=source.candidate_windows,
            min_count=min_count,
            context=context,
            relations=relations,
            batch_size=batch_size,
            n_boot=n_boot,
        )

    @torch.no_grad()
    def forward():
        for batch in batches:
            source.attend(batch)

    raw = interleave({"probe_vs_forward": (timed(probe), timed(forward))}, pairs=pairs, progress=progress)
    report = paired_report(raw, sides={"probe_vs_forward": ("probe", "forward")}, clock=clock)
    figure = report["ratios"]["probe_vs_forward"]
    seconds = report["raw_s"]["probe_vs_forward"][clock]
    return {
        "ratio": figure["median"],
        "ci95": figure["ci95"],
        "goal": GOAL,
        "within_goal": bool(figure["median"] <= GOAL),
        "probe_s": round(statistics.median(seconds["probe"]), 4),
        "forward_s": round(statistics.median(seconds["forward"]), 4),
        "inputs": sum(len(b) for b in batches),
        "tokens": sum(len(ids) for b in batches for ids in b),
        "syntax_docs": len(syntax_docs),
        "coref_docs": len(coref_docs),
        "context": context,
        "batch_size": batch_size,
        "bootstrap": n_boot,
        **{k: report[k] for k in ("clock", "ratios_by_clock", "raw_s", "warnings")},
    }
