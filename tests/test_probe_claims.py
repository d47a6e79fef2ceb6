"""probe_claims from real probes on planted attention: the numbers against independent computations
from the CoNLL-U columns, written into a run, read back, and shown first on the Probes page."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dashboard_pages import open_page
from test_probes_causal import FIXTURE, PlantedCausalSource, column_links
from test_probes_scoring import PlantedSource
from waiting import TEST_S

from aah_viz.corpus.synthetic import generate_corpus
from aah_viz.figures.payload import figure_data
from aah_viz.probes.conllu_reader import read_conllu
from aah_viz.probes.runner import run_probes
from aah_viz.probes.store import write_probe_tables
from aah_viz.runlog import load_run, validate_run
from aah_viz.samples import make_synthetic_run

pytestmark = pytest.mark.timeout(TEST_S)


def column_upos(path):
    """[(sentence, id) -> UPOS] straight from the CoNLL-U columns."""
    upos = {}
    for s, block in enumerate(path.read_text(encoding="utf-8").strip().split("\n\n")):
        for line in block.splitlines():
            cols = line.split("\t")
            if not line.startswith("#") and cols[0].isdigit():
                upos[(s, int(cols[0]))] = cols[3]
    return upos


def expected_pos_rule():
    """(relation, direction) -> accuracy of 'the nearest earlier word of the answer's UPOS', looking back
    from the later word, computed from the columns."""
    upos = column_upos(FIXTURE)
    hits = defaultdict(list)
    for s, dep, head, rel in column_links(FIXTURE):
        later, earlier = max(dep, head), min(dep, head)
        direction = "dependent_to_head" if head < dep else "head_to_dependent"
        target = upos[(s, earlier)]
        between = [upos[(s, w)] for w in range(earlier + 1, later)]
        hits[(rel, direction)].append(target not in ("_", "") and target not in between)
    return {k: float(np.mean(v)) for k, v in hits.items()}


@pytest.fixture(scope="module")
def causal_run():
    docs = read_conllu(FIXTURE)
    return run_probes(PlantedCausalSource(docs), docs, (), min_count=3, n_boot=200, null_draws=99)


def test_causal_claims_agree_with_the_relations_table_and_the_pos_rule_from_the_columns(causal_run):
    claims = causal_run.probe_claims.set_index(["relation", "direction"])
    relations = causal_run.probe_relations.set_index(["relation", "direction"])
    assert set(claims.index) == set(relations.index)
    expected = expected_pos_rule()
    for key, row in claims.iterrows():
        rel = relations.loc[key]
        assert (row["best_layer"], row["best_head"], row["best_acc"]) == (
            rel["best_layer"],
            rel["best_head"],
            rel["best_acc"],
        )
        assert row["offset_acc"] == pytest.approx(rel["baseline_acc"])
        assert row["pos_acc"] == pytest.approx(expected[key])
        assert row["baseline_acc"] == pytest.approx(max(rel["baseline_acc"], expected[key]))
        assert row["best_ci_low"] <= row["best_acc"] <= row["best_ci_high"]
        assert 0 < row["adjusted_p"] <= 1 and row["null_p95"] <= 1
        assert row["n_columns"] == 4
    # a best head right on every link picks the word at the offset exactly where the offset is right
    perfect = claims[claims["best_acc"] == 1.0]
    assert len(perfect) >= 3
    np.testing.assert_allclose(perfect["offset_share"], perfect["offset_acc"])
    assert (perfect["positional"] == (perfect["offset_acc"] >= 0.5)).all()


def test_every_heads_interval_holds_its_accuracy(causal_run):
    ph = causal_run.probe_heads
    acc = ph[ph["probe"] == "syntax"].set_index(["layer", "head", "metric"])["value"]
    interval = ph[ph["probe"] == "interval"]
    assert len(interval) == 2 * 4 * len(causal_run.probe_claims)
    for (layer, head, metric), group in interval.groupby(["layer", "head", "metric"]):
        base, end = metric.rsplit(":", 1)
        value = acc.loc[(layer, head, base)]
        assert value >= group["value"].iloc[0] - 1e-12 if end == "low" else value <= group["value"].iloc[0] + 1e-12
    # the best head's interval in probe_claims is its own interval row: the same resamples
    ends = interval.set_index(["layer", "head", "metric"])["value"]
    for row in causal_run.probe_claims.itertuples():
        metric = f"{row.relation}:{row.direction}"
        assert ends.loc[(row.best_layer, row.best_head, f"{metric}:low")] == row.best_ci_low
        assert ends.loc[(row.best_layer, row.best_head, f"{metric}:high")] == row.best_ci_high


def test_the_planted_coreference_head_is_claimed_and_the_nearest_name_baseline_scored():
    corpus = generate_corpus(8, 5)
    docs = corpus.documents
    result = run_probes(PlantedSource(docs), docs, docs, min_count=3, n_boot=200, null_draws=99)
    row = result.probe_claims.set_index("probe").loc["coref"]
    assert (row["best_layer"], row["best_head"]) == (0, 2)  # head 2 attends to the antecedent
    assert row["best_acc"] == 1.0 and row["adjusted_p"] == pytest.approx(1 / 100)
    coref = result.probe_coref
    baselines = coref[(coref["bucket"] == "all") & coref["layer"].isna()].set_index("method")["accuracy"]
    assert {"nearest_name", "first_name"} <= set(baselines.index)
    assert row["baseline_acc"] == pytest.approx(baselines.max())
    assert row["n_clusters"] == len(docs)  # documents are resampled, not queries


def test_claims_are_written_read_back_and_lead_the_probes_page(causal_run, tmp_path, monkeypatch):
    root = tmp_path / "logs"
    run_dir = make_synthetic_run(root / "probed", n_layer=1, n_head=4, steps=3)
    write_probe_tables(run_dir, causal_run.tables(), 2)
    assert not [p for p in validate_run(run_dir) if "probe_claims" in str(p)]
    stored = load_run(run_dir).table("probe_claims")
    assert len(stored) == len(causal_run.probe_claims)
    at = open_page("probes", root, tmp_path, monkeypatch)
    subheaders = [h.value for h in at.subheader]
    assert subheaders[0] == "Best heads, selection-aware"
    table = at.dataframe[0].value
    claims = causal_run.probe_claims
    expected = claims.sort_values("count", ascending=False)
    np.testing.assert_allclose(np.sort(table["split-half acc"]), np.sort(expected["split_half_acc"]))
    np.testing.assert_allclose(np.sort(table["adjusted p"]), np.sort(expected["adjusted_p"]))
    # one number format a column (never 0.481 beside 0.6739): fixed decimals, at least 3, and enough that the
    # column's smallest value that is not 0 never reads as 0.000
    formats = {c: v.get("type_config", {}).get("format") for c, v in json.loads(at.dataframe[0].proto.columns).items()}
    for column in ("split-half acc", "null 95th pct", "best acc", "baseline acc", "adjusted p"):
        values = table[column].dropna().to_numpy(float)
        fmt = formats[column]
        assert re.fullmatch(r"%\.[3-6]f|%d", fmt or ""), (column, fmt)
        assert fmt != "%d" or np.all(values == np.round(values)), column
        assert all(float(fmt % v) != 0 for v in values if v != 0), (column, fmt)
    figure = figure_data(at.get("plotly_chart")[0].proto.spec)
    assert figure["layout"]["title"]["text"] == "best heads once their choice is accounted for"
    null_bar = figure["data"][0]
    assert sorted(null_bar["x"]) == pytest.approx(sorted(claims["null_p95"]))


def test_a_run_probed_before_probe_claims_still_shows_its_tables(causal_run, tmp_path, monkeypatch):
    root = tmp_path / "logs"
    run_dir = make_synthetic_run(root / "old", n_layer=1, n_head=4, steps=3)
    old = {k: v for k, v in causal_run.tables().items() if k != "probe_claims"}
    write_probe_tables(run_dir, old, 2)
    assert "probe_claims" not in load_run(run_dir).tables()
    at = open_page("probes", root, tmp_path, monkeypatch)
    assert any("written before `probe_claims`" in c.value for c in at.caption)
    assert "Syntactic relations: best head against the best fixed-offset baseline" in [h.value for h in at.subheader]


def test_claims_columns_match_the_contract(causal_run):
    from aah_viz.schema import PROBE_TABLES

    assert list(causal_run.probe_claims.columns) == list(PROBE_TABLES["probe_claims"])
    assert isinstance(causal_run.probe_claims, pd.DataFrame)


def test_the_exported_probes_tables_start_with_the_claims(causal_run, tmp_path):
    from aah_viz.export.runs import collect_runs
    from aah_viz.export.tables import build_table

    run_dir = make_synthetic_run(tmp_path / "logs" / "probed", n_layer=1, n_head=4, steps=3)
    write_probe_tables(run_dir, causal_run.tables(), 2)
    from aah_viz.export.records import PROBE_PARTS

    assert list(PROBE_PARTS)[0] == "claims"
    table = build_table("probes", collect_runs([run_dir]), part="claims").df
    claims = causal_run.probe_claims
    assert len(table) == len(claims)
    got = table.set_index(["relation", "direction"])["adjusted_p"].sort_index()
    want = claims.set_index(["relation", "direction"])["adjusted_p"].sort_index()
    np.testing.assert_allclose(got.to_numpy(dtype=float), want.to_numpy(dtype=float))


def test_a_head_similarity_table_written_before_the_mantel_columns_still_validates_and_loads():
    import pyarrow.parquet as pq

    from aah_viz.analysis import head_similarity as hs

    run_dir = Path(__file__).resolve().parents[1] / "sample_logs" / "smollm2_wikitext" / "probes"
    segments = sorted((run_dir / "head_similarity").glob("part-*.parquet"))
    if not segments:
        pytest.skip("no head_similarity table in sample_logs/smollm2_wikitext/probes")
    assert all("mantel_rho" not in pq.read_schema(p).names for p in segments)  # an older writer's table
    assert validate_run(run_dir) == []
    table = load_run(run_dir).table("head_similarity")
    assert table["mantel_rho"].isna().all() and len(hs.summary(table))
    assert hs.mantel_view(table).empty


def test_encoder_claims_score_the_nearest_word_of_the_heads_category_either_side_as_the_columns_say():
    docs = read_conllu(FIXTURE)
    result = run_probes(PlantedSource(docs), docs, (), min_count=3, n_boot=100, null_draws=49)
    upos = column_upos(FIXTURE)
    hits = defaultdict(list)
    for s, dep, head, rel in column_links(FIXTURE):
        words = [w for (t, w) in upos if t == s and w != dep and upos[(s, w)] == upos[(s, head)]]
        nearest = min(words, key=lambda w: (abs(w - dep), w > dep))  # the earlier of two at one distance
        hits[rel].append(nearest == head)
    claims = result.probe_claims.set_index("relation")
    assert len(claims) >= 3
    for rel, row in claims.iterrows():
        assert row["pos_acc"] == pytest.approx(np.mean(hits[rel]))
        assert row["best_direction"] in ("dep2head", "head2dep") and row["n_columns"] == 8
