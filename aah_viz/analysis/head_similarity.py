"""Do head groups mean anything? Named head similarities, measured against what heads do (issue 26).

AAH groups a layer's heads by the cosine of 9 non-negative magnitudes (method §4-§5); those are
nearly parallel for every pair of heads, so most groupings are forced splits (``cluster_validity``).
This module asks which notion of head similarity makes heads cluster. Each similarity is a pure
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
(:func:`method_partition`, sequential centroid assignment at the method's threshold with its forced
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
from aah_viz.analysis.partitions import ari_rows
from aah_viz.method import SIM_THRESHOLD
from aah_viz.stats.ranks import mantel
from aah_viz.stats.significance import holm

SIMILARITIES = ("method", "zscore", "attention", "span", "probe")
PROCEDURES = ("method", "complete")  # the method's level-0 procedure; complete linkage at its group count
INPUT_OF = {"method": "features", "zscore": "features", "attention": "distance", "span": "span", "probe": "probe"}
NORM_EPS = cv.NORM_EPS  # the clustering routine's norm floor
STD_FLOOR = 1e-9  # a measurement that (almost) does not vary across the heads carries no direction
TIE_EPS = 1e-8  # the forced bipartition's tie band (instrumentation.routing.clustering)
SELF_MERGE_SCORE = -1.0  # a group's own score in the small-group merge (method §5.6)
ALPHA = 0.05  # stability and agreement: p-value at or below it

DEFAULT_MIN_GROUP_SIZE = 3
DEFAULT_AGREEMENT_SAMPLES = 999

# Words of the stability and agreement verdicts.
STABLE, UNSTABLE = "stable", "unstable"
AGREE = "agree"
UNDEFINED = cv.UNDEFINED


# ---------------------------------------------------------------------------- the similarities


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), NORM_EPS)


def _cosine(x: np.ndarray) -> np.ndarray:
    u = _unit_rows(np.asarray(x, dtype=np.float64))
    return u @ np.swapaxes(u, -1, -2)


def standardise(x: np.ndarray) -> np.ndarray:
    """Each column standardised across the heads (the second-to-last axis): mean 0, population std 1;
    a column that does not vary (std below ``STD_FLOOR``) becomes 0. Batched over leading axes."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=-2, keepdims=True)
    std = x.std(axis=-2, keepdims=True)
    return np.where(std >= STD_FLOOR, centred / np.maximum(std, STD_FLOOR), 0.0)


def method_similarity(features: np.ndarray) -> np.ndarray:
    """Cosine similarity of the method's 9-D head features (mean |x| and std of q, k, v; entropy,
    output norm, usage), norms floored as the clustering routine floors them: what AAH groups by."""
    return _cosine(features)


def zscore_similarity(features: np.ndarray) -> np.ndarray:
    """Cosine similarity of the method's features after standardising each feature across the
    layer's heads: how two heads differ from the layer's typical head, in the same direction or not
    (the raw magnitudes, shared by every head, no longer dominate)."""
    return _cosine(standardise(features))


def distributions(mass: np.ndarray) -> np.ndarray:
    """Rows as probability distributions: negative entries (a Gaussian surrogate's) clipped to 0,
    then normalised; a row without mass becomes uniform."""
    p = np.clip(np.asarray(mass, dtype=np.float64), 0.0, None)
    total = p.sum(axis=-1, keepdims=True)
    return np.where(total > 0, p / np.where(total > 0, total, 1.0), 1.0 / p.shape[-1])


def _entropy_bits(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1)


def js_distance(p: np.ndarray) -> np.ndarray:
    """(..., n, n) Jensen-Shannon distance (base 2, in [0, 1]) between the rows of ``p`` (..., n, d):
    the square root of H((p_i + p_j) / 2) - (H(p_i) + H(p_j)) / 2 (scipy's ``jensenshannon``)."""
    p = np.asarray(p, dtype=np.float64)
    mid = (p[..., :, None, :] + p[..., None, :, :]) / 2.0
    h = _entropy_bits(p)
    div = _entropy_bits(mid) - (h[..., :, None] + h[..., None, :]) / 2.0
    dist = np.sqrt(np.clip(div, 0.0, 1.0))
    idx = np.arange(p.shape[-2])
    dist[..., idx, idx] = 0.0
    return dist


def attention_similarity(distance_mass: np.ndarray) -> np.ndarray:
    """1 - the Jensen-Shannon distance between the heads' attention-distance distributions (the share
    of each head's attention at each distance, or distance bucket): heads that look equally far back
    are similar, whatever they look at."""
    return 1.0 - js_distance(distributions(distance_mass))


def span_similarity(span_mass: np.ndarray) -> np.ndarray:
    """Cosine similarity of the heads' attention mass inside each candidate window (``aah-viz profile``),
    each window's mass standardised across the heads (a window holding all the mass of every head
    says nothing): heads whose mass grows alike over the windows are similar."""
    return _cosine(standardise(span_mass))


def probe_similarity(scores: np.ndarray) -> np.ndarray:
    """Cosine similarity of the heads' probe scores (per syntactic relation and direction, and
    coreference accuracy per antecedent distance), each score standardised across the heads:
    heads that are good and bad at the same things are similar. Scores missing for a head are
    left out of the layer (the column is dropped)."""
    scores = np.asarray(scores, dtype=np.float64)
    keep = ~np.isnan(scores).any(axis=tuple(range(scores.ndim - 1)))
    return _cosine(standardise(scores[..., keep]))


SIMILARITY_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "method": method_similarity,
    "zscore": zscore_similarity,
    "attention": attention_similarity,
    "span": span_similarity,
    "probe": probe_similarity,
}


def similarity(name: str, measurement: np.ndarray) -> np.ndarray:
    """The named similarity of a layer's heads from their (n, d) measurement (see the module doc)."""
    if name not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"unknown head similarity {name!r}; allowed: {', '.join(SIMILARITIES)}")
    return SIMILARITY_FUNCTIONS[name](measurement)


def usable_columns(name: str, measurement: np.ndarray) -> np.ndarray:
    """The measurement as its similarity reads it: the probe's missing scores dropped, and for
    ``method`` unit rows (the scale the method ignores), so that structureless surrogates match."""
    x = np.asarray(measurement, dtype=np.float64)
    if name == "probe":
        x = x[:, ~np.isnan(x).any(axis=0)]
    if name == "method":
        x = _unit_rows(x)
    return x


def varies(name: str, measurement: np.ndarray) -> bool:
    """Whether the heads differ at all in what the similarity reads (else no grouping means anything)."""
    x = usable_columns(name, measurement)
    if x.size == 0 or x.shape[0] < 2:
        return False
    if name == "attention":
        x = distributions(x)
    return bool(np.any(x.std(axis=0) >= STD_FLOOR))


def structureless(name: str, measurement: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(samples, n, n) similarities of heads without groups: each set drawn from one Gaussian with the
    mean and covariance of the heads' own measurement (as ``cluster_validity.structureless_heads``
    does for the method's unit rows), then measured by the same similarity."""
    x = usable_columns(name, measurement)
    n = x.shape[0]
    weights = rng.standard_normal((samples, n, n)) / np.sqrt(max(n - 1, 1))
    draws = x.mean(axis=0) + weights @ (x - x.mean(axis=0))
    return similarity(name, draws)


# ---------------------------------------------------------------------------- the groupings


def _centroid_score(sim: np.ndarray, i: int, members: list[int]) -> float:
    """u_i . unit(mean of the members' u), from the similarity matrix alone (a kernel form of the
    centroid cosine): mean_m S[i, m] / |mean u|, with |mean u|^2 = mean_{m, m'} S[m, m']. A group of
    one keeps its member's own row as its centroid, as the routine does."""
    if len(members) == 1:
        return float(sim[i, members[0]])
    norm = np.sqrt(max(float(sim[np.ix_(members, members)].mean()), 0.0))
    return float(sim[i, members].mean() / max(norm, NORM_EPS))


def _forced_bipartition(sim: np.ndarray) -> list[list[int]]:
    """Split around the least similar pair (method §5.5): every other head joins the anchor it is
    more similar to; ties (within ``TIE_EPS``) go to the smaller group."""
    n = sim.shape[0]
    s = np.array(sim, dtype=np.float64, copy=True)
    np.fill_diagonal(s, 2.0)
    i0, i1 = divmod(int(np.argmin(s)), n)  # the first minimum in row-major order
    g0, g1 = [i0], [i1]
    for j in range(n):
        if j in (i0, i1):
            continue
        d = sim[j, i0] - sim[j, i1]
        if d > TIE_EPS:
            g0.append(j)
        elif d < -TIE_EPS:
            g1.append(j)
        elif len(g0) <= len(g1):
            g0.append(j)
        else:
            g1.append(j)
    return [g0, g1]


def _merge_small(groups: list[list[int]], sim: np.ndarray, threshold: float, min_group_size: int) -> list[list[int]]:
    """The small-group merge of method §5.6 with the reference's quirks: groups below the minimum
    size, in order, join the group whose (not re-normalised) mean row has the largest dot product
    with theirs if it reaches the threshold and more than two groups remain; an emptied group keeps
    its stale mean (the members it had when its mean was last set)."""
    groups = [list(g) for g in groups]
    mean_of = [list(g) for g in groups]  # the members each group's mean was computed from
    small = [gid for gid, g in enumerate(groups) if len(g) < min_group_size]
    for gid in small:
        if len(groups[gid]) >= min_group_size:
            continue
        scores = [float(sim[np.ix_(m, mean_of[gid])].mean()) for m in mean_of]
        scores[gid] = SELF_MERGE_SCORE
        best = max(range(len(scores)), key=scores.__getitem__)
        if scores[best] < threshold or sum(1 for g in groups if g) <= 2:
            continue
        groups[best].extend(groups[gid])
        groups[gid] = []
        mean_of[best] = list(groups[best])
    return [g for g in groups if g]


def method_partition(
    sim: np.ndarray, threshold: float = SIM_THRESHOLD, *, min_group_size: int = 1, allow_forced: bool = True
) -> tuple[np.ndarray, str]:
    """The method's level-0 grouping (method §5.1, §5.5, §5.6; no churn) of the items of ``sim``.

    Items in index order join the most similar existing group (first on ties) if its centroid
    score reaches ``threshold``, else open a new group; one group out of two or more items becomes a
    forced bipartition (``allow_forced``) or stays collapsed; small groups are then merged. Written
    on the similarity matrix, so it groups by any similarity; on cosine similarities it is the model's
    ``instrumentation.routing.clustering.cluster`` (tests compare them). Returns dense labels and the
    origin (``natural``, ``forced_bipartition``, ``collapsed``, ``single_item``).
    """
    sim = np.asarray(sim, dtype=np.float64)
    n = sim.shape[0]
    if n <= 1:
        return np.zeros(n, dtype=np.int64), "single_item"
    groups: list[list[int]] = [[0]]
    for i in range(1, n):
        scores = [_centroid_score(sim, i, g) for g in groups]
        best = max(range(len(scores)), key=scores.__getitem__)
        if scores[best] >= threshold:
            groups[best].append(i)
        else:
            groups.append([i])
    origin = "natural"
    if len(groups) == 1:
        if not allow_forced:
            return np.zeros(n, dtype=np.int64), "collapsed"
        groups, origin = _forced_bipartition(sim), cv.FORCED
    elif min_group_size > 1 and len(groups) > 2 and any(len(g) < min_group_size for g in groups):
        groups = _merge_small(groups, sim, threshold, min_group_size)
    labels = np.empty(n, dtype=np.int64)
    for gid, members in enumerate(groups):
        labels[members] = gid
    return cv.dense_labels(labels), origin


def complete_partition(sim: np.ndarray, n_groups: int) -> np.ndarray:
    """Complete linkage on ``1 - sim`` into ``n_groups`` groups (``cluster_validity``'s batched routine)."""
    return cv.complete_linkage_labels(cv.cosine_distance(np.asarray(sim, dtype=np.float64))[None], n_groups)[0]


def group(sim: np.ndarray, procedure: str, *, threshold: float, min_group_size: int) -> tuple[np.ndarray, str]:
    """Both procedures: the method's, and complete linkage at the method's group count."""
    labels, origin = method_partition(sim, threshold, min_group_size=min_group_size)
    if procedure == "method":
        return labels, origin
    if procedure != "complete":
        raise ValueError(f"unknown grouping procedure {procedure!r}; allowed: {', '.join(PROCEDURES)}")
    return complete_partition(sim, int(labels.max()) + 1), "complete_linkage"


# ---------------------------------------------------------------------------- ARI against chance


@dataclass(frozen=True)
class Agreement:
    """The ARI of two groupings of the same heads against a permutation null."""

    ari: float
    null_mean: float
    null_p95: float
    p_value: float
    verdict: str  # agree (or stable) when p <= ALPHA, else chance (unstable); undefined for trivial groupings


def _trivial(labels: np.ndarray) -> bool:
    k = len(np.unique(labels))
    return k < 2 or k >= len(labels)


def ari_against_chance(
    a, b, *, samples: int = DEFAULT_AGREEMENT_SAMPLES, rng: np.random.Generator, yes: str = AGREE, no: str = cv.CHANCE
) -> Agreement:
    """ARI of groupings ``a`` and ``b``, and its chance: ``b``'s labels permuted ``samples`` times
    (every grouping with ``b``'s group sizes equally likely, independent of ``a``); ``yes`` when the
    p-value is at most ``ALPHA``. ARI takes few values on a dozen heads, so many null draws tie with
    the observed one; ties are broken at random (p = (#null > observed + U (1 + #null == observed)) /
    (1 + samples), U uniform in (0, 1], from ``rng``), which gives independent groupings a false
    ``yes`` in ALPHA of cases exactly, where counting ties as exceedances gives about 3%. A grouping
    with one group or every head alone says nothing: ``undefined``."""
    a, b = np.asarray(a), np.asarray(b)
    if _trivial(a) or _trivial(b):
        return Agreement(np.nan, np.nan, np.nan, np.nan, UNDEFINED)
    observed = float(ari_rows(a[None], b[None])[0])
    permuted = np.stack([rng.permutation(b) for _ in range(samples)])
    null = ari_rows(np.broadcast_to(a, permuted.shape), permuted)
    greater = np.count_nonzero(null > observed + 1e-12)
    ties = np.count_nonzero(np.abs(null - observed) <= 1e-12)
    p_value = (greater + (1.0 - rng.random()) * (1 + ties)) / (1 + samples)
    verdict = yes if p_value <= ALPHA else no
    return Agreement(observed, float(null.mean()), float(np.quantile(null, 0.95)), float(p_value), verdict)


# ---------------------------------------------------------------------------- the table


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
    for _, group in rows.groupby(["similarity", "other", "procedure"]):
        frame.loc[group.index, "mantel_p_holm"] = holm(group["mantel_p_value"].to_numpy(dtype=float))
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
