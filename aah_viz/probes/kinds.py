"""The probes one pass of the model feeds, in one table (:data:`PROBE_KINDS`): a new probe is its scorer
module and one entry here (docs/internals.md, "Adding a probe").

Each :class:`ProbeKind` names an accumulator (the name is also its key in a saved, interrupted probe),
says how it is built (:class:`Setup`), what it takes from each scored model input (:class:`ScoredInput`)
and, at the end (:class:`Finish`), its ``probe_heads`` rows and its ``probe_claims`` table, if any. The
runner (:func:`aah_viz.probes.runner.run_probes`) goes through the table in order: the rows of
``probe_heads`` come in that order. Accumulators only accumulate, so what they hold after the first
inputs is all a saved probe needs (:mod:`aah_viz.probes.progress`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from aah_viz.corpus.document import Document
from aah_viz.probes.claims import Settings
from aah_viz.probes.coref import CorefScorer, cataphoric_pronouns
from aah_viz.probes.distance import DistanceProfile
from aah_viz.probes.predict import JSAccumulator
from aah_viz.probes.sufficiency import dependency_lengths, sufficiency_rows
from aah_viz.probes.syntax import SyntaxScorer
from aah_viz.probes.syntax_causal import CausalSyntaxScorer


@dataclass(frozen=True)
class Setup:
    """What every accumulator is built from."""

    n_layer: int
    n_head: int
    relations: str  # "universal" or "full"
    context: str  # "sentence" or "document"
    causal: bool  # probed looking back
    edges: Sequence[int]  # distance bucket edges
    coref_docs: Sequence[Document]


@dataclass(frozen=True)
class ScoredInput:
    """One model input and what the model's attention predicts on it (``aah_viz.probes.predict``)."""

    index: int  # its place among the planned inputs
    syntax: Document | None  # the syntax document it reads, if any
    coref: Document | None  # the coreference document it reads, if any
    preds: Any  # the DocumentPredictor: dep2head, head2dep, coref, alignment
    first_sentence: int  # the number of its first sentence among all syntax inputs (for the bootstrap)


@dataclass(frozen=True)
class Finish:
    """What the rows at the end are built with."""

    step: int
    windows: np.ndarray  # (n_layer, n_head) the window each head had
    n_head: int
    min_count: int
    claims: Settings
    has_syntax: bool
    has_coref: bool


Rows = tuple[list[dict], pd.DataFrame | None]  # probe_heads rows, a probe_claims table or None


@dataclass(frozen=True)
class ProbeKind:
    name: str  # the accumulator's key among the others and in a saved probe
    build: Callable[[Setup], Any]
    add: Callable[[Any, ScoredInput], None] | None  # None: the predictor feeds it (attention profiles)
    rows: Callable[[Any, Finish, Mapping[str, Any]], Rows]  # the third: every accumulator, by name


def with_window(rows: list[dict], windows: np.ndarray) -> list[dict]:
    return [dict(r, window=int(windows[r["layer"], r["head"]])) for r in rows]


def _syntax(s: Setup):
    return (CausalSyntaxScorer if s.causal else SyntaxScorer)(s.n_layer, s.n_head, s.relations, s.context)


def _add_syntax(syntax, x: ScoredInput) -> None:
    if x.syntax is None:
        return
    if isinstance(syntax, CausalSyntaxScorer):
        syntax.add(x.syntax, x.preds.dep2head, x.first_sentence)  # each word's most-attended earlier word
    else:
        syntax.add(x.syntax, x.preds.dep2head, x.preds.head2dep, x.first_sentence)


def _syntax_rows(syntax, f: Finish, _) -> Rows:
    if not f.has_syntax:
        return [], None
    table, intervals = syntax.claims(f.step, f.min_count, f.claims)
    return with_window(syntax.head_rows(f.step, f.min_count) + intervals, f.windows), table


def _coref(s: Setup) -> CorefScorer:
    coref = CorefScorer(s.n_layer, s.n_head, s.edges)
    if s.causal:
        coref.cataphora_left_out = sum(cataphoric_pronouns(doc) for doc in s.coref_docs)
    return coref


def _add_coref(coref, x: ScoredInput) -> None:
    if x.coref is not None:
        coref.add(x.coref, x.preds, x.index)


def _coref_rows(coref, f: Finish, _) -> Rows:
    if not f.has_coref:
        return [], None
    table, intervals = coref.claims(f.step, f.claims)
    return coref.head_rows(f.step, f.windows) + with_window(intervals, f.windows), table


class Tally:
    """The runner's own sums: dependency lengths (sufficiency) and coreference documents scored."""

    def __init__(self):
        self.lengths: list[np.ndarray] = []
        self.n_coref = 0


def _add_tally(tally: Tally, x: ScoredInput) -> None:
    if x.syntax is not None:
        tally.lengths.append(dependency_lengths(x.syntax, x.preds.alignment))
    if x.coref is not None:
        tally.n_coref += 1


def _sufficiency_rows(tally: Tally, f: Finish, scorers: Mapping[str, Any]) -> Rows:
    lengths = np.concatenate(tally.lengths) if tally.lengths else np.zeros(0, dtype=np.int64)
    distances = np.array(scorers["coref"].distances, dtype=np.int64)
    return sufficiency_rows(f.step, f.windows, lengths, distances), None


def _distance_rows(distance: DistanceProfile, f: Finish, _) -> Rows:
    return distance.head_rows(f.step, f.n_head, f.windows), None


def js_rows(step: int, js: np.ndarray, n_head: int, windows: np.ndarray) -> list[dict]:
    """probe_heads rows (probe ``attention_js``, metric ``js:LAYER:HEAD``): the mean Jensen-Shannon
    divergence from this head's attention to that head's, what Clark's head clustering uses."""
    rows = []
    n = js.shape[0]
    for i in range(n):
        li, hi = divmod(i, n_head)
        for j in range(n):
            lj, hj = divmod(j, n_head)
            rows.append(
                {
                    "step": step,
                    "layer": li,
                    "head": hi,
                    "probe": "attention_js",
                    "metric": f"js:{lj}:{hj}",
                    "value": float(js[i, j]),
                    "window": int(windows[li, hi]),
                }
            )
    return rows


def _js_rows(js: JSAccumulator, f: Finish, _) -> Rows:
    return (js_rows(f.step, js.mean(), f.n_head, f.windows) if js.count else []), None


PROBE_KINDS: tuple[ProbeKind, ...] = (
    ProbeKind("syntax", _syntax, _add_syntax, _syntax_rows),  # Clark et al.'s probe per relation, claims
    ProbeKind("coref", _coref, _add_coref, _coref_rows),  # antecedent per distance bucket, claims
    ProbeKind("tally", lambda s: Tally(), _add_tally, _sufficiency_rows),  # window sufficiency
    ProbeKind("distance", lambda s: DistanceProfile(s.n_layer * s.n_head), None, _distance_rows),
    ProbeKind("js", lambda s: JSAccumulator(s.n_layer * s.n_head), None, _js_rows),  # head-to-head JS
)
