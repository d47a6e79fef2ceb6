"""Are the head groups real clusters? Validity of one level-0 partition, and of a run over training.

AAH-v3 clusters heads by the cosine similarity of their routing features (method §5.1-§5.5). When
every head joins the first head's group, the method splits the heads in two around the least
similar pair (a *forced bipartition*): groups then exist whether or not the heads differ. This
module says, for one partition of one layer at one routing update:

- how similar the heads are: min, median and max pairwise cosine similarity, against the
  clustering threshold;
- how well the partition separates them: the silhouette score on cosine distance (1 - cos);
- whether that beats chance, against two nulls: random partitions with the same group sizes (the
  labels permuted), and the same number of groups fitted to structureless heads (one Gaussian
  with the heads' mean and covariance). A partition is *real* only when its silhouette is above
  both 95th percentiles. The second null matters: a partition fitted to the features beats
  random relabelings even on pure noise (a forced split of noise does in over 90% of draws).

Pure numpy: the recorder calls :func:`assess_partition` at every routing update (so a
100,000-step run never recomputes it), and the analysis helpers below summarise the rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

DEFAULT_NULL_SAMPLES = 200
DEFAULT_REFIT_SAMPLES = 50
NORM_EPS = 1e-6  # the clustering routine's norm floor
FORCED = "forced_bipartition"

# Verdicts, from the most to the least trustworthy.
REAL = "real"  # beats its null
CHANCE = "chance"  # a partition, but no better separated than random ones of the same sizes
UNDEFINED = "undefined"  # one group, every head alone, or no features: silhouette has no meaning


@dataclass(frozen=True)
class Validity:
    """The validity facts of one partition (one row of the ``cluster_validity`` table)."""

    origin: str
    n_heads: int
    n_groups: int
    threshold: float
    sim_min: float
    sim_median: float
    sim_max: float
    silhouette: float
    null_mean: float  # random partitions with the same group sizes
    null_p95: float
    null_p_value: float
    refit_mean: float  # structureless heads clustered into the same number of groups
    refit_p95: float
    refit_p_value: float
    verdict: str

    def as_row(self) -> dict:
        return asdict(self)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), NORM_EPS)


def cosine_similarity(features: np.ndarray) -> np.ndarray:
    """(n, n) cosine similarity of feature rows, norms floored as the clustering routine does."""
    u = _unit(np.asarray(features, dtype=np.float64))
    return u @ u.T


def cosine_distance(sim: np.ndarray) -> np.ndarray:
    """1 - cos, clipped at 0, with an exact zero diagonal (what silhouettes need)."""
    distance = np.clip(1.0 - sim, 0.0, None)
    idx = np.arange(distance.shape[-1])
    distance[..., idx, idx] = 0.0
    return distance


def similarity_spread(sim: np.ndarray) -> tuple[float, float, float]:
    """(min, median, max) over the pairs of distinct heads (the upper triangle)."""
    n = sim.shape[0]
    if n < 2:
        return np.nan, np.nan, np.nan
    pairs = sim[np.triu_indices(n, k=1)]
    return float(pairs.min()), float(np.median(pairs)), float(pairs.max())


def dense_labels(labels) -> np.ndarray:
    """Labels renumbered 0..k-1 in order of first appearance."""
    _, first, inverse = np.unique(np.asarray(labels), return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inverse.reshape(-1)]


def silhouettes(distance: np.ndarray, labelings: np.ndarray) -> np.ndarray:
    """Mean silhouette of each labeling on its distance matrix.

    ``distance`` is (n, n), or (P, n, n) with one matrix per labeling; ``labelings`` is (P, n)
    of dense labels. Rousseeuw's definition as scikit-learn computes it for
    ``metric="precomputed"``: a head alone in its group scores 0; a(i) is the mean distance to
    the other members of its group, b(i) the smallest mean distance to another group. Batched,
    so a null of a few hundred labelings costs one tensor product.
    """
    labelings = np.atleast_2d(labelings)
    k = int(labelings.max()) + 1
    onehot = (labelings[:, :, None] == np.arange(k)[None, None, :]).astype(np.float64)  # (P, n, k)
    if distance.ndim == 2:
        sums = np.einsum("ij,pjk->pik", distance, onehot)  # distance of head i to each group
    else:
        sums = np.einsum("pij,pjk->pik", distance, onehot)
    counts = onehot.sum(axis=1, keepdims=True)  # (P, 1, k)
    own_count = (onehot * counts).sum(axis=2)  # (P, n)
    a = (sums * onehot).sum(axis=2) / np.maximum(own_count - 1, 1)
    other = np.where(onehot.astype(bool) | (counts == 0), np.inf, sums / np.maximum(counts, 1))
    b = other.min(axis=2)
    denom = np.maximum(a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(np.isfinite(b) & (denom > 0), (b - a) / denom, 0.0)
    return np.where(own_count > 1, s, 0.0).mean(axis=1)


def structureless_heads(features: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(samples, n, d) unit rows drawn from one Gaussian with the heads' mean and covariance.

    The heads' own spread without any grouping in it: each draw mixes the centred unit rows with
    standard normal weights, so its covariance is the heads' sample covariance.
    """
    u = _unit(np.asarray(features, dtype=np.float64))
    n = u.shape[0]
    weights = rng.standard_normal((samples, n, n)) / np.sqrt(max(n - 1, 1))
    return _unit(u.mean(axis=0) + weights @ (u - u.mean(axis=0)))


def complete_linkage_labels(distance: np.ndarray, n_groups: int) -> np.ndarray:
    """Complete-linkage clustering of each (n, n) matrix in ``distance`` (P, n, n) into ``n_groups``.

    Batched over the P matrices: each of the n - n_groups merges joins, in every matrix at once,
    the two closest clusters, whose distance to the others becomes the larger of theirs.
    Returns (P, n) dense labels.
    """
    dist = np.array(distance, dtype=np.float64, copy=True)
    count, n, _ = dist.shape
    idx, rows = np.arange(n), np.arange(count)
    dist[:, idx, idx] = np.inf
    owner = np.tile(idx, (count, 1))  # each head's cluster, named by one member
    for _ in range(max(n - n_groups, 0)):
        i, j = np.divmod(dist.reshape(count, -1).argmin(axis=1), n)
        keep, gone = np.minimum(i, j), np.maximum(i, j)
        merged = np.maximum(dist[rows, keep], dist[rows, gone])
        dist[rows, keep], dist[rows, :, keep] = merged, merged
        dist[rows, keep, keep] = np.inf
        dist[rows, gone], dist[rows, :, gone] = np.inf, np.inf
        owner = np.where(owner == gone[:, None], keep[:, None], owner)
    return np.stack([dense_labels(o) for o in owner])


def _null_facts(observed: float, null: np.ndarray) -> tuple[float, float, float]:
    p_value = (1 + np.count_nonzero(null >= observed - 1e-12)) / (1 + null.size)
    return float(null.mean()), float(np.quantile(null, 0.95)), float(p_value)


def assess_partition(
    features,
    labels,
    *,
    threshold: float,
    origin: str = "natural",
    null_samples: int = DEFAULT_NULL_SAMPLES,
    refit_samples: int = DEFAULT_REFIT_SAMPLES,
    seed: int = 0,
) -> Validity:
    """Validity of one partition of heads (``labels``, one per head) on their ``features``.

    Two nulls, both from a generator seeded by ``seed``:

    - *random partitions*: the labels permuted (same group sizes), ``null_samples`` times; the
      right chance level for a partition that was not fitted to these features (fixed, frozen);
    - *refit*: ``refit_samples`` sets of structureless heads (:func:`structureless_heads`), each
      clustered by complete linkage into the same number of groups. A partition fitted to the
      features (natural, forced) always beats random relabelings, even on pure noise; it must also
      beat what clustering finds where there are no clusters.

    The partition is ``real`` only when its silhouette is above both 95th percentiles.
    """
    if features is None:
        labels = dense_labels(labels)
        return _without_features(origin, int(labels.size), int(labels.max()) + 1 if labels.size else 0, threshold)

    def structureless(rng: np.random.Generator) -> np.ndarray:
        heads = structureless_heads(features, refit_samples, rng)
        return heads @ heads.transpose(0, 2, 1)

    return judge_partition(
        cosine_similarity(features), labels, structureless, threshold=threshold, origin=origin,
        null_samples=null_samples, seed=seed,
    )  # fmt: skip


def judge_partition(
    sim: np.ndarray,
    labels,
    structureless,
    *,
    threshold: float,
    origin: str = "natural",
    null_samples: int = DEFAULT_NULL_SAMPLES,
    seed: int = 0,
) -> Validity:
    """The verdict of :func:`assess_partition` for any similarity of the heads.

    ``sim`` is the (n, n) similarity (distance = 1 - sim), ``structureless(rng)`` returns the
    (R, n, n) similarities of R sets of structureless heads. The generator seeded by ``seed`` draws
    the permutations first, then hands itself to ``structureless``.
    """
    labels = dense_labels(labels)
    n = int(labels.size)
    k = int(labels.max()) + 1 if n else 0
    if n == 0:
        return _without_features(origin, n, k, threshold)
    lo, mid, hi = similarity_spread(sim)
    base = dict(origin=origin, n_heads=n, n_groups=k, threshold=float(threshold), sim_min=lo, sim_median=mid,
                sim_max=hi)  # fmt: skip
    if k < 2 or k >= n:  # silhouette is defined for 2 <= k <= n - 1 only
        return Validity(**base, **dict.fromkeys(_NUMBERS, np.nan), verdict=UNDEFINED)
    observed = float(silhouettes(cosine_distance(sim), labels[None, :])[0])
    rng = np.random.default_rng(seed)
    permuted = np.stack([rng.permutation(labels) for _ in range(null_samples)])
    null = _null_facts(observed, silhouettes(cosine_distance(sim), permuted))
    surrogate = cosine_distance(structureless(rng))
    refit = _null_facts(observed, silhouettes(surrogate, complete_linkage_labels(surrogate, k)))
    verdict = REAL if observed > max(null[1], refit[1]) + 1e-12 else CHANCE
    return Validity(**base, silhouette=observed, null_mean=null[0], null_p95=null[1], null_p_value=null[2],
                    refit_mean=refit[0], refit_p95=refit[1], refit_p_value=refit[2], verdict=verdict)  # fmt: skip


def partition_row(step, layer, features, labels, *, threshold: float, origin: str, shadow: bool = False) -> dict:
    """One row of the ``cluster_validity`` table. The null draws are seeded by step and layer, so a
    partition at the same place always gets the same row (a resumed run writes what an uninterrupted
    one would)."""
    judged = assess_partition(features, labels, threshold=threshold, origin=origin, seed=int(step) * 1024 + int(layer))
    return {"step": int(step), "layer": int(layer), "shadow": bool(shadow), **judged.as_row()}


_NUMBERS = ("silhouette", "null_mean", "null_p95", "null_p_value", "refit_mean", "refit_p95", "refit_p_value")


def _without_features(origin: str, n: int, k: int, threshold: float) -> Validity:
    nan = dict.fromkeys(("sim_min", "sim_median", "sim_max") + _NUMBERS, np.nan)
    return Validity(origin=origin, n_heads=n, n_groups=k, threshold=float(threshold), **nan, verdict=UNDEFINED)


# ---------------------------------------------------------------------------- words


def describe(row) -> str:
    """One sentence a reader can act on, for one partition (a ``Validity`` or a table row)."""
    get = row.get if isinstance(row, dict) else (lambda key: getattr(row, key, None))
    origin, verdict = get("origin"), get("verdict")
    threshold, lo = get("threshold"), get("sim_min")
    parts = []
    if origin == FORCED:
        text = "forced split into two groups: every head would have joined one group at the similarity threshold"
        if _finite(threshold):
            text += f" ({threshold:.2f})"
        if _finite(lo):
            text += f"; the least similar pair is {lo:.3f}"
        parts.append(text)
    elif origin in ("frozen", "fixed", "passthrough"):
        parts.append(f"{origin} partition: not re-clustered at this update")
    elif origin == "collapsed":
        parts.append("collapsed: all heads in one group")
    elif _finite(lo) and _finite(threshold):
        parts.append(f"clustered at threshold {threshold:.2f}; pairwise similarity {lo:.3f} to {get('sim_max'):.3f}")
    sil, bar = get("silhouette"), chance_bar(row)
    if verdict == REAL:
        parts.append(f"real: silhouette {sil:.3f} beats chance (95th percentile of both nulls: {bar:.3f})")
    elif verdict == CHANCE:
        parts.append(f"not better than chance: silhouette {sil:.3f}, chance reaches {bar:.3f}")
    else:
        parts.append("validity undefined (one group, every head alone, or no head features recorded)")
    return "; ".join(parts)


ORIGIN_WORDS = {
    "natural": "clustered at the threshold",
    FORCED: "forced split into two groups (every item would have joined one group at the threshold)",
    "collapsed": "collapsed into one group",
    "frozen": "frozen: carried over, not re-clustered",
    "fixed": "a fixed partition, not clustered",
    "passthrough": "passed up unchanged from the level below",
    "ungrouped": "no grouping: every head alone",
    "single_item": "a single group, nothing to cluster",
}


def similarity_words(metric: str | None, normdiff_scale: float = 16.0) -> tuple[str, str]:
    """(name, definition) of a level's logged similarities, by the clustering metric that made it (method
    §5.1): level 0 clusters heads by cosine; upper levels by the config's ``upper_cluster_metric``, whose
    default ``cosine_normdiff`` subtracts a norm penalty, so its scores run below -1."""
    if metric == "cosine_normdiff":
        return "score", (
            f"cosine_normdiff: cosine minus {normdiff_scale:g} x the relative difference of the two rows' norms, "
            f"from {-(1 + normdiff_scale):g} to 1"
        )
    if metric == "l2":
        return "score", "l2: minus the Euclidean distance between the two feature rows, at most 0"
    if metric == "centered_cosine":
        return "cosine similarity", "after centring the rows"
    return "cosine similarity", ""


def describe_level(row, metric: str | None = "cosine", normdiff_scale: float = 16.0) -> str:
    """A tree level in words from its logged facts: its origin and the pairwise scores of the items it
    clustered (``metric``: the clustering metric of that level, :func:`similarity_words`); one value when
    its items were a single pair (or all pairs scored alike), else the range."""
    get = row.get if isinstance(row, dict) else (lambda key: getattr(row, key, None))
    origin = get("origin")
    text = ORIGIN_WORDS.get(origin, str(origin or "origin not logged"))
    lo, hi = get("sim_min"), get("sim_max")
    if _finite(lo) and _finite(hi) and origin not in ("frozen", "fixed", "passthrough"):
        name, definition = similarity_words(metric, normdiff_scale)
        value = f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f} to {hi:.3f}"
        text += f"; pairwise {name} of its items: {value}" + (f" ({definition})" if definition else "")
    return text


def chance_bar(row) -> float:
    """The silhouette a partition must exceed: the larger 95th percentile of the two nulls."""
    get = row.get if isinstance(row, dict) else (lambda key: getattr(row, key, None))
    values = [v for v in (get("null_p95"), get("refit_p95")) if _finite(v)]
    return max(values) if values else np.nan


def _finite(value) -> bool:
    return value is not None and bool(np.isfinite(value))


# ---------------------------------------------------------------------------- over training


def real_share(verdicts: pd.Series) -> float:
    """Share of the assessed partitions (verdict not ``undefined``) that beat their nulls; nan with none."""
    assessed = verdicts[verdicts != UNDEFINED]
    return float((assessed == REAL).mean()) if len(assessed) else np.nan


def shares_by_layer(validity: pd.DataFrame) -> pd.DataFrame:
    """Per layer: partitions, share forced, share of the assessed ones beating the null, median similarity."""
    if validity.empty:
        cols = ["layer", "partitions", "forced_share", "real_share", "median_similarity"]
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    df = validity.assign(forced=validity["origin"] == FORCED)
    out = df.groupby("layer").agg(
        partitions=("step", "size"),
        forced_share=("forced", "mean"),
        median_similarity=("sim_median", "median"),
    )
    out.insert(2, "real_share", df.groupby("layer")["verdict"].agg(real_share))
    return out.reset_index()


def run_shares(validity: pd.DataFrame) -> dict[str, float]:
    """Whole-run shares: forced partitions, and assessed partitions beating their null (nan with none)."""
    if validity.empty:
        return {"partitions": 0, "forced_share": np.nan, "real_share": np.nan}
    return {
        "partitions": int(len(validity)),
        "forced_share": float((validity["origin"] == FORCED).mean()),
        "real_share": real_share(validity["verdict"]),
    }


def groups_in_doubt(validity: pd.DataFrame) -> str | None:
    """The banner text when most of a run's partitions are forced or do not beat their null."""
    return doubt_from_shares(run_shares(validity))


def doubt_in_brief(shares: dict) -> str:
    """The shares that put a run's groups in doubt, the deciding one first: "0% beat their nulls, 2% forced"
    (a low forced share alone would read as evidence for clusters)."""
    forced, real = shares["forced_share"], shares["real_share"]
    parts = [f"{forced:.0%} forced"]
    if not np.isnan(real):
        beat = f"{real:.0%} beat their nulls"
        parts = [beat, *parts] if forced <= 0.5 else [*parts, beat]
    return ", ".join(parts)


def doubt_from_shares(shares: dict) -> str | None:
    """``groups_in_doubt`` from the run's ``run_shares`` (kept in the run's summary: no rows read)."""
    if not shares["partitions"]:
        return None
    forced, real = shares["forced_share"], shares["real_share"]
    if forced <= 0.5 and not real < 0.5:  # a nan real share (nothing assessed) leaves it to the forced share
        return None
    beats = "" if np.isnan(real) else f" and {real:.0%} of those assessed beat their nulls"
    return (
        f"Head groups in this run are mostly not clusters: {forced:.0%} of {shares['partitions']} level-0 "
        f"partitions are forced splits{beats}. Read the groups (and comparisons of them with probes) as an "
        "artefact of the method, not as structure."
    )
