"""The named head similarities (``docs/head-groups.md``): each a pure function of one per-head
measurement, returning the (n, n) similarity of a layer's heads with a unit diagonal; its distance is
``1 - similarity``. ``structureless`` draws heads without groups measured the same way (the refit null).
The table that groups heads by them is :mod:`aah_viz.analysis.head_similarity`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aah_viz.analysis import cluster_validity as cv

SIMILARITIES = ("method", "zscore", "attention", "span", "probe")
INPUT_OF = {"method": "features", "zscore": "features", "attention": "distance", "span": "span", "probe": "probe"}
NORM_EPS = cv.NORM_EPS  # the clustering routine's norm floor
STD_FLOOR = 1e-9  # a measurement that (almost) does not vary across the heads carries no direction


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
