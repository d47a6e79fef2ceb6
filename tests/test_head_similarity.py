"""Head similarities (issue 26): planted groups are found and judged real, structureless heads are not,
for every similarity; halves of planted heads agree; the agreement null has its size."""

from __future__ import annotations

import numpy as np
import pytest

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import head_grouping as hg
from aah_viz.analysis import head_similarity as hs
from aah_viz.analysis import similarity_measures as sm
from aah_viz.analysis.partitions import ari_rows

N_GROUPS, PER_GROUP = 3, 4
N = N_GROUPS * PER_GROUP
PLANTED = np.repeat(np.arange(N_GROUPS), PER_GROUP)
DRAWS = 20
DISTANCES = np.arange(10)


def planted(name: str, rng: np.random.Generator) -> np.ndarray:
    """(12, d) measurements of 3 planted groups of 4 heads, in the form each similarity reads."""
    g = PLANTED
    if name == "method":  # non-negative magnitudes, each group strong on its own three features
        centres = 0.2 + 2.0 * np.kron(np.eye(N_GROUPS), np.ones(3)) + 0.1 * rng.random((N_GROUPS, 9))
        return centres[g] + 0.05 * rng.standard_normal((N, 9))
    if name == "zscore":  # the method's failure case: large shared magnitudes, small group offsets
        return 5.0 + 0.3 * rng.standard_normal((N_GROUPS, 9))[g] + 0.02 * rng.standard_normal((N, 9))
    if name == "attention":  # short, middle and long distance profiles
        profiles = np.stack([np.exp(-DISTANCES / s) for s in (0.5, 2.0, 8.0)])
        profiles /= profiles.sum(axis=1, keepdims=True)
        return np.stack([rng.dirichlet(200 * profiles[k] + 0.01) for k in g])
    if name == "span":  # mass inside 4 candidate windows, growing at three rates
        curves = 1 - (1 - np.array([0.9, 0.5, 0.2])[:, None]) ** np.arange(1, 5)
        return np.clip(curves[g] + 0.01 * rng.standard_normal((N, 4)), 0, 1)
    if name == "probe":  # 20 probe scores, a pattern per group
        return rng.uniform(0, 1, (N_GROUPS, 20))[g] + 0.05 * rng.standard_normal((N, 20))
    raise AssertionError(name)


def structureless(name: str, rng: np.random.Generator) -> np.ndarray:
    """(12, d) heads scattered around one centre: nothing to find."""
    if name == "method":
        return np.abs(2 + rng.standard_normal(9)) + 0.3 * rng.standard_normal((N, 9))
    if name == "zscore":
        return 5.0 + 0.3 * rng.standard_normal((N, 9))
    if name == "attention":
        profile = np.exp(-DISTANCES / 2.0)
        return np.stack([rng.dirichlet(30 * profile / profile.sum() + 0.01) for _ in range(N)])
    if name == "span":
        return np.clip(1 - 0.5 ** np.arange(1, 5) + 0.05 * rng.standard_normal((N, 4)), 0, 1)
    if name == "probe":
        return rng.uniform(0, 1, 20) + 0.1 * rng.standard_normal((N, 20))
    raise AssertionError(name)


def grouping(name: str, x: np.ndarray, halves=None, procedure: str = "method") -> dict:
    inp = hs.HeadInput(x[None], None if halves is None else tuple(h[None] for h in halves))
    return hs._grouping_row(0, name, procedure, inp, hs.Settings(null_samples=200, agreement_samples=199))


@pytest.mark.parametrize("name", hs.SIMILARITIES)
def test_planted_groups_are_found_and_judged_real(name):
    found = real = 0
    for draw in range(DRAWS):
        row = grouping(name, planted(name, np.random.default_rng(draw)))
        found += ari_rows(np.array(row["labels"])[None], PLANTED[None])[0] == 1.0
        real += row["verdict"] == cv.REAL
    assert found >= DRAWS - 1 and real >= DRAWS - 1, (found, real)


@pytest.mark.parametrize("name", hs.SIMILARITIES)
def test_structureless_heads_are_judged_chance(name):
    verdicts = [grouping(name, structureless(name, np.random.default_rng(1000 + d)))["verdict"] for d in range(DRAWS)]
    assert verdicts.count(cv.REAL) <= 2, verdicts  # the verdict's nulls are 95th percentiles


@pytest.mark.parametrize("name", hs.SIMILARITIES)
def test_complete_linkage_finds_the_planted_groups_at_the_methods_count(name):
    row = grouping(name, planted(name, np.random.default_rng(7)), procedure="complete")
    assert row["n_groups"] == N_GROUPS and ari_rows(np.array(row["labels"])[None], PLANTED[None])[0] == 1.0
    assert row["verdict"] == cv.REAL


@pytest.mark.parametrize("name", hs.SIMILARITIES)
def test_halves_of_planted_heads_give_stable_groups(name):
    rng = np.random.default_rng(11)
    halves = planted(name, rng), planted(name, rng)  # the same groups, new noise (and new centres)
    row = grouping(name, planted(name, rng), halves=halves)
    assert row["stability"] == hs.STABLE and row["stability_ari"] == 1.0


def test_halves_of_structureless_heads_are_not_stable():
    verdicts = []
    for d in range(DRAWS):
        rng = np.random.default_rng(2000 + d)
        halves = structureless("attention", rng), structureless("attention", rng)
        row = grouping("attention", structureless("attention", rng), halves=halves)
        verdicts.append(row["stability"])
    assert verdicts.count(hs.STABLE) <= 2, verdicts


def test_agreement_null_has_its_size():
    """Independent groupings of 12 heads are called "agree" in about 5% of draws (p <= 0.05): 3000
    draws put the rate within [0.035, 0.065] unless the null is wrong (the binomial sd is 0.004)."""
    rng = np.random.default_rng(26)
    agree = judged = 0
    for _ in range(3000):
        a, b = (rng.integers(0, int(rng.integers(2, 6)), size=N) for _ in range(2))
        result = hg.ari_against_chance(a, b, samples=199, rng=rng)
        judged += result.verdict != hs.UNDEFINED
        agree += result.verdict == hs.AGREE
    assert judged > 2900
    assert 0.035 <= agree / judged <= 0.065, agree / judged


def test_agreement_of_planted_groupings_beats_chance():
    rng = np.random.default_rng(3)
    a = grouping("attention", planted("attention", rng))
    b = grouping("probe", planted("probe", rng))
    result = hg.ari_against_chance(a["labels"], b["labels"], samples=999, rng=rng)
    assert result.verdict == hs.AGREE and result.ari == 1.0 and 0 < result.p_value <= 1 / 1000


def test_js_distance_is_scipys():
    from scipy.spatial.distance import jensenshannon

    p = np.random.default_rng(0).dirichlet(np.ones(10), size=6)
    ours = sm.js_distance(p)
    theirs = np.array([[jensenshannon(a, b, base=2) for b in p] for a in p])
    assert np.allclose(ours, theirs, atol=1e-12)
    assert np.allclose(sm.attention_similarity(p * 3.0), 1.0 - theirs, atol=1e-12)  # mass, not yet normalised


def test_standardised_similarities_are_cosines_of_standardised_columns():
    x = np.random.default_rng(1).random((8, 5))
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    assert np.allclose(sm.zscore_similarity(x), _cos(z), atol=1e-12)
    assert np.allclose(sm.span_similarity(x), _cos(z), atol=1e-12)
    x[2, 3] = np.nan  # a missing probe score drops its column
    keep = [0, 1, 2, 4]
    zk = (x[:, keep] - x[:, keep].mean(axis=0)) / x[:, keep].std(axis=0)
    assert np.allclose(sm.probe_similarity(x), _cos(zk), atol=1e-12)


def _cos(z):
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    return u @ u.T


def test_the_method_similarity_gets_cluster_validitys_own_verdict():
    """judge_partition with the method's surrogates is assess_partition (the recorder's verdict)."""
    x = planted("zscore", np.random.default_rng(5))
    labels, origin = hg.method_partition(sm.method_similarity(x), 0.72, min_group_size=3)
    mine = cv.judge_partition(sm.method_similarity(x), labels,
                              lambda rng: sm.structureless("method", x, 50, rng), threshold=0.72, origin=origin,
                              seed=9)  # fmt: skip
    theirs = cv.assess_partition(x, labels, threshold=0.72, origin=origin, seed=9)
    assert mine.verdict == theirs.verdict and origin == cv.FORCED
    a, b = mine.as_row(), theirs.as_row()
    assert all(a[k] == b[k] if isinstance(a[k], str) else np.isclose(a[k], b[k], atol=1e-9) for k in a)


def test_heads_that_do_not_differ_get_no_grouping():
    row = grouping("span", np.ones((N, 4)))
    assert row["verdict"] == hs.UNDEFINED and row["labels"] == [] and "do not differ" in row["reason"]


def test_the_table_has_a_grouping_row_per_similarity_and_an_agreement_row_per_pair():
    rng = np.random.default_rng(0)
    layers = 2
    inputs = {
        "features": hs.HeadInput(np.stack([planted("zscore", rng) for _ in range(layers)]), source="test"),
        "distance": hs.HeadInput(np.stack([planted("attention", rng) for _ in range(layers)]), source="test"),
        "probe": hs.HeadInput(np.stack([planted("probe", rng) for _ in range(layers)]), source="test"),
    }
    ticks = []
    table = hs.head_similarity_rows(inputs, step=7, settings=hs.Settings(agreement_samples=99), progress=ticks.append)
    assert len(ticks) == layers and set(table["step"]) == {7}
    rows = hs.groupings(table)
    assert len(rows) == layers * 4 * 2  # method, zscore, attention, probe (no span measured) x 2 procedures
    assert set(rows["similarity"]) == {"method", "zscore", "attention", "probe"}
    pairs = hs.agreements(table)
    assert len(pairs) == layers * 6 * 2
    # the planted groups are the same in every input: zscore, attention and probe agree, in every layer
    for a, b in (("zscore", "attention"), ("attention", "probe"), ("zscore", "probe")):
        got = pairs[(pairs["similarity"] == a) & (pairs["other"] == b)]
        assert (got["agreement"] == hs.AGREE).all(), got
    summary = hs.summary(table)
    assert summary.set_index("similarity").loc["attention", "real"] == layers
    assert summary.set_index("similarity").loc["attention", "agrees_with_probe"] == layers
    assert np.isnan(summary.set_index("similarity").loc["probe", "agrees_with_probe"])


def test_method_partition_is_the_models_clustering_routine():
    """On cosine similarities the numpy procedure gives the model's groups: natural groupings whose
    decisions are clear of float rounding (margin above 1e-4), and forced bipartitions whose anchor
    pair and assignments are clear of ties."""
    torch = pytest.importorskip("torch")
    from instrumentation.routing.clustering import cluster, labels_from_groups

    rng = np.random.default_rng(0)
    compared = {"natural": 0, cv.FORCED: 0}
    for t in range(300):
        n = int(rng.integers(4, 17))
        if t % 2:
            x = rng.standard_normal((3, 9))[rng.integers(0, 3, n)] + 0.6 * rng.standard_normal((n, 9))
        else:  # near-parallel magnitudes: forced bipartitions
            x = np.abs(rng.standard_normal((n, 9))) * 0.3 + 2.0 + rng.standard_normal(9) * 0.3
        x = x.astype(np.float32)
        theirs = cluster(torch.from_numpy(x), threshold=0.72, allow_forced_bipartition=True, min_group_size=3)
        sim = sm.method_similarity(x.astype(np.float64))
        if theirs.origin == "natural" and theirs.decision_margin < 1e-4:
            continue
        if theirs.origin == cv.FORCED and not _clear_anchor(sim):
            continue
        labels, origin = hg.method_partition(sim, 0.72, min_group_size=3)
        assert origin == theirs.origin
        assert ari_rows(labels[None], np.array(labels_from_groups(theirs.groups, n))[None])[0] == 1.0
        compared[origin] += 1
    assert compared["natural"] >= 100 and compared[cv.FORCED] >= 50, compared


def _clear_anchor(sim: np.ndarray) -> bool:
    iu = np.triu_indices(len(sim), k=1)
    pairs = np.sort(sim[iu])
    i0, i1 = iu[0][np.argmin(sim[iu])], iu[1][np.argmin(sim[iu])]
    delta = np.delete(sim[:, i0] - sim[:, i1], [i0, i1])
    return pairs[1] - pairs[0] > 1e-4 and np.abs(delta).min() > 1e-4
