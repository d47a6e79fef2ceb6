"""The causal probes on SmolLM2-135M-Instruct (a Llama decoder, 30 layers x 9 query heads, 3 key/value
heads) with UD English PUD and GAP: checked against the independent computation of
``test_probes_causal``. Slow; skipped cleanly without the model (``smollm2_dir``) or the data."""

from __future__ import annotations

import csv

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_probes_causal import column_sentences, independent_causal_probe  # noqa: E402

N_SENTENCES = 40
N_GAP = 60


@pytest.mark.slow
def test_smollm2_syntax_is_probed_looking_back_as_an_independent_computation_says(smollm2_dir, pud_path):
    from transformers import LlamaForCausalLM

    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.probes.runner import run_probes, sentence_documents
    from instrumentation.measure.probe_extract import load_hf_model

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    source = load_hf_model(smollm2_dir)
    assert source.causal and (source.n_layer, source.n_head) == (30, 9)
    assert source.prefix == [source.tokenizer.bos_token_id]  # its tokenizer adds none; the probe puts BOS first
    chosen = column_sentences(pud_path, N_SENTENCES)
    ids = {sid for sid, _, _ in chosen}
    docs = [s for d in read_conllu(pud_path) for s in sentence_documents(d) if s.sentences[0].id in ids]
    assert len(docs) == N_SENTENCES
    result = run_probes(source, docs, (), min_count=1, n_boot=50, sort_by_length=True)
    model = LlamaForCausalLM.from_pretrained(smollm2_dir, local_files_only=True, attn_implementation="eager").eval()
    theirs = independent_causal_probe(smollm2_dir, chosen, model)
    heads = result.probe_heads[result.probe_heads["probe"] == "syntax"]
    table = heads.pivot_table(index="metric", columns=["layer", "head"], values="value")
    rel = result.probe_relations.set_index(["relation", "direction"])
    differences = []
    for (name, direction), (count, acc) in theirs.items():
        assert rel.loc[(name, direction), "count"] == count, (name, direction)
        differences.append(np.abs(table.loc[f"{name}:{direction}"].to_numpy() - acc))
        assert differences[-1].max() <= 1 / count + 1e-12, (name, direction)  # a near tie at most
    assert np.concatenate(differences).mean() <= 0.002  # batched and padded here, alone there
    assert set(result.probe_relations["baseline_offset"]) <= {-3, -2, -1}


@pytest.mark.slow
def test_smollm2_gap_asks_each_pronoun_about_the_names_before_it(smollm2_dir, gap_path):
    from aah_viz.probes.coref_formats import read_coref
    from aah_viz.probes.runner import run_probes
    from instrumentation.measure.probe_extract import load_hf_model

    rows = list(csv.DictReader(gap_path.open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))[:N_GAP]
    before = after = 0
    for r in rows:  # straight from the offsets: where the gold name lies against the pronoun
        gold = "A" if r["A-coref"] == "TRUE" else "B" if r["B-coref"] == "TRUE" else None
        if gold:
            before += int(r[f"{gold}-offset"]) < int(r["Pronoun-offset"])
            after += int(r[f"{gold}-offset"]) > int(r["Pronoun-offset"])
    assert before and after
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    result = run_probes(load_hf_model(smollm2_dir), (), read_coref(gap_path, N_GAP), sort_by_length=True)
    assert result.causal and result.n_cataphora_left_out == after and result.n_coref_queries == before
    coref = result.probe_coref[result.probe_coref["bucket"] == "all"]
    best = coref[coref["method"] == "head"]["accuracy"].max()
    nearest = coref.loc[coref["method"] == "nearest_mention", "accuracy"].item()
    assert 0.0 < nearest < 1.0 and 0.0 < best <= 1.0


@pytest.mark.slow
def test_smollm2_query_heads_share_the_features_of_their_key_value_head(smollm2_dir, pud_path):
    from transformers import AutoModel, AutoTokenizer

    from instrumentation.measure.probe_groups import head_group_labels, qkv_head_features

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    model = AutoModel.from_pretrained(smollm2_dir, local_files_only=True, attn_implementation="eager").eval()
    texts = [text for _, text, _ in column_sentences(pud_path, 20)]
    features = qkv_head_features(model, tokenizer, texts, batch_size=8)
    assert features.shape == (30, 9, 9) and np.isfinite(features).all()
    for kv in range(3):  # query heads 3kv .. 3kv+2 read key/value head kv
        block = features[:, 3 * kv : 3 * kv + 3, 2:6]
        assert (block == block[:, :1]).all()
    assert not (features[:, 0, :2] == features[:, 1, :2]).all()  # their own queries differ
    groups = head_group_labels(features)
    assert len(groups) == 30 and all(len(g.levels[0]) == 9 for g in groups)
