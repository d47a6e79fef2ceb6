"""Do head groups mean anything? Named head similarities, measured against what heads do (issue 26).

AAH groups a layer's heads by the cosine of 9 non-negative magnitudes (method §4-§5); those are
nearly parallel for every pair of heads, so most groupings are forced splits (``cluster_validity``).
This module asks which notion of head similarity makes heads cluster (the similarities are in
``similarity_measures``, the procedures that group by them in ``head_grouping``). Each similarity is a pure
function of one per-head measurement, returning the (n, n) similarity of a layer's heads with a
unit diagonal; its distance is ``1 - similarity``:

- ``method``: cosine of the method's features (the reference);
- ``zscore``: the same features standardised per feature across the layer's heads, then cosine;
- ``attention``: 1 - the Jensen-Shannon distance of the heads' attention-distance distributions
  (how far back each head looks), as Clark et al. (2019) clustered BERT's heads;
- ``span``: each head's attention mass inside every candidate window, standardised per window
  across the heads, then cosine;
- ``probe``: each head's probe scores (syntactic relations, coreference by distance),
  standardised per score across the heads, then cosine.

For every similarity and layer, the heads are grouped by the method's own level-0 procedure
(``head_grouping.method_partition``, sequential centroid assignment at the method's threshold with its forced
bipartition and small-group merge, written on the similarity matrix; equal to the model's routine on
cosine similarities) and, for comparison, by complete linkage at the same number of groups. Each
grouping gets the existing validity verdict with both nulls (``cluster_validity.judge_partition``),
its stability (the ARI between the groupings of two disjoint halves of the data, against a
permutation null) and its agreement with every other similarity's grouping (ARI, permutation null).

Pure numpy; the measurements come from ``instrumentation.measure.head_measures`` or a run's tables
(:mod:`aah_viz.probes.head_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis.head_grouping import (
    AGREE,
    DEFAULT_AGREEMENT_SAMPLES,
    PROCEDURES,
    STABLE,
    UNDEFINED,
    UNSTABLE,
    ari_against_chance,
    group,
)
from aah_viz.analysis.similarity_measures import INPUT_OF, SIMILARITIES, similarity, structureless, varies
from aah_viz.method import SIM_THRESHOLD
from aah_viz.stats.ranks import mantel
from aah_viz.stats.significance import holm

DEFAULT_MIN_GROUP_SIZE = 3


@dataclass
class HeadInput:
    """One per-head measurement of a model, (n_layer, n_head, d): on all the data and, when measured
    so, on two disjoint halves of it."""

    all: np.ndarray
    halves: tuple[np.ndarray, np.ndarray] | None = None
    source: str = ""  # where it came from, in words (goes into every row it feeds)


@dataclass(frozen=True)
class Settings:
    threshold: float = SIM_THRESHOLD
    min_group_size: int = DEFAULT_MIN_GROUP_SIZE
    null_samples: int = cv.DEFAULT_NULL_SAMPLES
    refit_samples: int = cv.DEFAULT_REFIT_SAMPLES
    agreement_samples: int = DEFAULT_AGREEMENT_SAMPLES
    seed: int = 0


COLUMNS = (
    "step", "layer", "similarity", "procedure", "other", "n_heads", "n_groups", "origin", "threshold",
    "sim_min", "sim_median", "sim_max", "silhouette", "null_mean", "null_p95", "null_p_value", "refit_mean",
    "refit_p95", "refit_p_value", "verdict", "stability_ari", "stability_null_p95", "stability_p_value",
    "stability", "ari", "ari_null_mean", "ari_null_p95", "ari_p_value", "agreement", "mantel_rho",
    "mantel_null_p95", "mantel_p_value", "mantel_p_holm", "mantel_exact", "labels", "source", "reason",
)  # fmt: skip


def _seed(settings: Settings, layer: int, *parts: str) -> int:
    """A seed per (layer, similarity, procedure, ...): a row never depends on which others were computed."""
    text = "/".join(parts)
    return int(settings.seed) * 1_000_003 + int(layer) * 7919 + sum((i + 1) * ord(c) for i, c in enumerate(text))


def _grouping_row(layer: int, name: str, procedure: str, inp: HeadInput, settings: Settings) -> dict:
    x = np.asarray(inp.all[layer], dtype=np.float64)
    row = dict.fromkeys(COLUMNS)
    row.update(layer=layer, similarity=name, procedure=procedure, source=inp.source, labels=[], reason="")
    if not varies(name, x):
        row.update(n_heads=x.shape[0], verdict=UNDEFINED, stability=UNDEFINED, reason="the heads do not differ")
        return row
    sim = similarity(name, x)
    labels, origin = group(sim, procedure, threshold=settings.threshold, min_group_size=settings.min_group_size)

    def surrogates(rng):
        return structureless(name, x, settings.refit_samples, rng)

    judged = cv.judge_partition(
        sim, labels, surrogates, threshold=settings.threshold, origin=origin, null_samples=settings.null_samples,
        seed=_seed(settings, layer, name, procedure),
    )  # fmt: skip
    row.update(judged.as_row(), labels=[int(v) for v in labels])
    if judged.verdict == UNDEFINED:
        row["reason"] = "one group or every head alone: silhouette undefined"
    if inp.halves is None:
        row.update(stability=UNDEFINED, reason=_join(row["reason"], "no halves measured"))
        return row
    halves = [np.asarray(h[layer], dtype=np.float64) for h in inp.halves]
    if not all(varies(name, h) for h in halves):
        row.update(stability=UNDEFINED, reason=_join(row["reason"], "the heads do not differ in a half"))
        return row
    split = [group(similarity(name, h), procedure, threshold=settings.threshold,
                   min_group_size=settings.min_group_size)[0] for h in halves]  # fmt: skip
    rng = np.random.default_rng(_seed(settings, layer, name, procedure, "halves"))
    stable = ari_against_chance(*split, samples=settings.agreement_samples, rng=rng, yes=STABLE, no=UNSTABLE)
    row.update(stability_ari=stable.ari, stability_null_p95=stable.null_p95, stability_p_value=stable.p_value,
               stability=stable.verdict)  # fmt: skip
    if stable.verdict == UNDEFINED:
        row["reason"] = _join(row["reason"], "a half gives one group or every head alone")
    return row


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def layer_mantel(layer: int, a: str, b: str, inputs: dict[str, HeadInput], settings: Settings) -> dict:
    """The Mantel test of one layer's heads under two similarities (distance ``1 - similarity``): Spearman's
    rho over the pairs of heads, with a relabelling null (every relabelling when the heads are few)."""
    x, y = (np.asarray(inputs[INPUT_OF[s]].all[layer], dtype=np.float64) for s in (a, b))
    if not (varies(a, x) and varies(b, y)):
        return {}
    rng = np.random.default_rng(_seed(settings, layer, a, b, "mantel"))
    test = mantel(1 - similarity(a, x), 1 - similarity(b, y), settings.agreement_samples, rng)
    if not np.isfinite(test.rho):
        return {}
    return dict(
        mantel_rho=test.rho, mantel_null_p95=test.null_p95, mantel_p_value=test.p_value, mantel_exact=test.exact
    )


def _with_holm(frame: pd.DataFrame) -> pd.DataFrame:
    """``mantel_p_holm``: each pair of similarities' Mantel p-values, Holm-adjusted across the layers."""
    frame["mantel_p_holm"] = np.nan
    rows = frame[frame["other"].notna() & frame["mantel_p_value"].notna()]
    for _, pair in rows.groupby(["similarity", "other", "procedure"]):
        frame.loc[pair.index, "mantel_p_holm"] = holm(pair["mantel_p_value"].to_numpy(dtype=float))
    return frame


def _agreement_row(layer: int, a: dict, b: dict, settings: Settings) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(layer=layer, similarity=a["similarity"], other=b["similarity"], procedure=a["procedure"],
               n_heads=a["n_heads"], labels=[], source=_join(a["source"], b["source"]), reason="")  # fmt: skip
    if not a["labels"] or not b["labels"]:
        row.update(agreement=UNDEFINED, reason="a similarity gives no grouping")
        return row
    rng = np.random.default_rng(_seed(settings, layer, a["similarity"], b["similarity"], a["procedure"]))
    agreed = ari_against_chance(a["labels"], b["labels"], samples=settings.agreement_samples, rng=rng)
    row.update(ari=agreed.ari, ari_null_mean=agreed.null_mean, ari_null_p95=agreed.null_p95,
               ari_p_value=agreed.p_value, agreement=agreed.verdict)  # fmt: skip
    if agreed.verdict == UNDEFINED:
        row["reason"] = "one group or every head alone in a grouping"
    return row


def head_similarity_rows(
    inputs: dict[str, HeadInput],
    *,
    step: int = 0,
    settings: Settings | None = None,
    similarities: Iterable[str] = SIMILARITIES,
    progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Rows of the ``head_similarity`` table from the measurements in ``inputs`` (keyed by
    ``INPUT_OF``'s values: features, distance, span, probe; any may be missing).

    Per layer: a grouping row per (similarity, procedure) with its validity and stability, then an
    agreement row per pair of similarities and procedure (``other`` set). ``progress`` is called
    with 1 after each layer.
    """
    settings = settings or Settings()
    names = [s for s in similarities if INPUT_OF.get(s) in inputs]
    unknown = [s for s in similarities if s not in INPUT_OF]
    if unknown:
        raise ValueError(f"unknown head similarity {unknown[0]!r}; allowed: {', '.join(SIMILARITIES)}")
    n_layer = min((np.asarray(inputs[INPUT_OF[s]].all).shape[0] for s in names), default=0)
    rows = []
    for layer in range(n_layer):
        mantels: dict[tuple[str, str], dict] = {}  # one test per pair of similarities, whatever the procedure
        for procedure in PROCEDURES:
            groupings = [_grouping_row(layer, s, procedure, inputs[INPUT_OF[s]], settings) for s in names]
            rows += groupings
            for i, a in enumerate(groupings):
                for b in groupings[i + 1 :]:
                    pair = (a["similarity"], b["similarity"])
                    if pair not in mantels:
                        mantels[pair] = layer_mantel(layer, *pair, inputs, settings)
                    rows.append({**_agreement_row(layer, a, b, settings), **mantels[pair]})
        if progress is not None:
            progress(1)
    frame = _with_holm(pd.DataFrame(rows, columns=list(COLUMNS)))
    frame["step"] = int(step)
    return frame


# ---------------------------------------------------------------------------- reading the table


def groupings(table: pd.DataFrame) -> pd.DataFrame:
    """The grouping rows (one per layer, similarity and procedure)."""
    return table[table["other"].isna()]


def agreements(table: pd.DataFrame) -> pd.DataFrame:
    """The agreement rows (one per layer, pair of similarities and procedure)."""
    return table[table["other"].notna()]


def mantel_view(table: pd.DataFrame, procedure: str = "method") -> pd.DataFrame:
    """The Mantel rows of the newest step against the probe similarity, one per layer and similarity: rho,
    its null's 95th percentile, p, Holm's p, and the groupings' ARI where both groupings are real."""
    if table.empty or "mantel_rho" not in table:
        return pd.DataFrame()
    table = table[(table["step"] == table["step"].max()) & (table["procedure"] == procedure)]
    real = {(int(r.layer), r.similarity) for r in groupings(table).itertuples() if r.verdict == cv.REAL}
    agree = agreements(table)
    agree = agree[((agree["other"] == "probe") | (agree["similarity"] == "probe")) & agree["mantel_rho"].notna()]
    rows = []
    for r in agree.itertuples():
        other = r.other if r.similarity == "probe" else r.similarity
        both_real = (int(r.layer), r.similarity) in real and (int(r.layer), r.other) in real
        rows.append(
            {
                "layer": int(r.layer),
                "similarity": other,
                "rho": r.mantel_rho,
                "null 95th pct": r.mantel_null_p95,
                "p": r.mantel_p_value,
                "p (Holm, layers)": r.mantel_p_holm,
                "exact": bool(r.mantel_exact),
                "ARI (both real)": r.ari if both_real else np.nan,
            }
        )
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame, procedure: str = "method") -> pd.DataFrame:
    """Per similarity over the layers: layers judged, real groupings, stable groupings, real and
    stable, the median silhouette minus its chance bar, and the layers whose grouping agrees with the
    span and with the probe grouping."""
    rows = groupings(table)
    rows = rows[rows["procedure"] == procedure]
    agree = agreements(table)
    agree = agree[agree["procedure"] == procedure]
    out = []
    for name in [s for s in SIMILARITIES if s in set(rows["similarity"])]:
        mine = rows[rows["similarity"] == name]
        judged = mine[mine["verdict"] != UNDEFINED]
        bar = judged.apply(cv.chance_bar, axis=1) if len(judged) else pd.Series(dtype=float)
        entry = {
            "similarity": name,
            "layers": int(len(mine)),
            "judged": int(len(judged)),
            "real": int((mine["verdict"] == cv.REAL).sum()),
            "stable": int((mine["stability"] == STABLE).sum()),
            "stability_judged": int((mine["stability"] != UNDEFINED).sum()),
            "real_and_stable": int(((mine["verdict"] == cv.REAL) & (mine["stability"] == STABLE)).sum()),
            "median_margin": float(np.median(judged["silhouette"] - bar)) if len(judged) else np.nan,
        }
        for target in ("span", "probe"):
            pair = agree[((agree["similarity"] == name) & (agree["other"] == target))
                         | ((agree["similarity"] == target) & (agree["other"] == name))]  # fmt: skip
            known = name != target and len(pair) > 0
            entry[f"agrees_with_{target}"] = int((pair["agreement"] == AGREE).sum()) if known else np.nan
        out.append(entry)
    return pd.DataFrame(out)
