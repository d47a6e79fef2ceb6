"""AAH head groups of a pretrained encoder: features from its Q/K/V activations, the default hierarchy."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_probes_cli import _encoder_tokenizer  # noqa: E402  (tests/ is on sys.path under pytest)

from aah_viz.errors import ConfigError  # noqa: E402
from instrumentation.measure.probe_groups import group_tables, head_group_labels, qkv_head_features  # noqa: E402

TEXTS = ["the dog saw a cat .", "a cat ran .", "the old man saw the dog and the cat ."]


def tiny_bert(tmp_path):
    fast = _encoder_tokenizer(tmp_path, "[CLS]", "[SEP]")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    return transformers.BertModel(config).eval(), fast


def test_features_are_the_moments_of_each_heads_q_k_v_over_the_text_tokens(tmp_path):
    model, tok = tiny_bert(tmp_path)
    got = qkv_head_features(model, tok, TEXTS, batch_size=2)  # padded batches: padding must be left out
    assert got.shape == (2, 4, 9)
    # independently: each text alone, the projections applied to the layer's input hidden states
    hidden = {0: [], 1: []}
    with torch.no_grad():
        for text in TEXTS:
            states = model(**tok(text, return_tensors="pt"), output_hidden_states=True).hidden_states
            for layer in (0, 1):
                hidden[layer].append(states[layer][0])
    for layer in (0, 1):
        x = torch.cat(hidden[layer])
        block = model.encoder.layer[layer].attention.self
        for which, proj in enumerate((block.query, block.key, block.value)):
            with torch.no_grad():
                act = proj(x).reshape(len(x), 4, 8).numpy()
            for head in range(4):
                values = act[:, head, :].ravel()
                np.testing.assert_allclose(got[layer, head, 2 * which], np.abs(values).mean(), rtol=1e-5)
                np.testing.assert_allclose(got[layer, head, 2 * which + 1], values.std(ddof=1), rtol=1e-5)
        assert np.all(got[layer, :, 6:] == 0)  # no routed statistics: MiniLM routes nothing


def test_groups_follow_the_features_and_fill_the_run_tables():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.5, 9), rng.uniform(0.5, 1.5, 9)
    a[6:] = b[6:] = 0
    b[:3] *= 4  # two kinds of heads, far apart in cosine similarity
    layer = np.stack([a * (1 + 0.01 * i) if i % 2 == 0 else b * (1 + 0.01 * i) for i in range(12)])
    features = np.stack([layer, layer[::-1]]).astype(np.float32)
    groups = head_group_labels(features)
    level0 = np.array(groups[0].levels[0])
    assert len(set(level0[0::2])) == 1 and len(set(level0[1::2])) == 1 and level0[0] != level0[1]
    for g in groups:  # a level that repeats the one below is dropped
        counts = [len(set(lv)) for lv in g.levels]
        assert counts == sorted(set(counts), reverse=True)
    heads, validity = group_tables(features, groups, window=100)
    assert len(heads) == 24 and set(heads["window"]) == {100}
    assert heads.loc[heads["layer"] == 0, "group_l0"].tolist() == level0.tolist()
    assert list(validity["layer"]) == [0, 1] and set(validity["verdict"]) <= {"real", "chance", "undefined"}
    assert validity.loc[0, "verdict"] == "real"  # two well separated kinds of heads


def test_an_encoder_without_bert_style_attention_is_refused():
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=300))
    with pytest.raises(ConfigError, match="query/key/value"):
        qkv_head_features(model, None, ["x"])


def tiny_llama(tmp_path, n_kv=2):
    fast = _encoder_tokenizer(tmp_path, "[CLS]", "[SEP]")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=n_kv,
        max_position_embeddings=64,
    )
    return transformers.LlamaModel(config).eval(), fast


def test_decoder_features_are_the_moments_of_its_query_heads_with_shared_key_value_heads(tmp_path):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model, tok = tiny_llama(tmp_path)
    tok.padding_side = "left"  # the features pad after the text whatever the tokenizer prefers
    got = qkv_head_features(model, tok, TEXTS, batch_size=2)
    assert got.shape == (2, 4, 9) and tok.padding_side == "left"
    # independently: each text alone; the layer's normalised input through the projections, rotary
    # positions on q and k, each key/value head given to the two query heads it serves
    acts = {(layer, w): [] for layer in (0, 1) for w in range(3)}
    with torch.no_grad():
        for text in TEXTS:
            ids = tok(text, return_tensors="pt")["input_ids"]
            states = model(ids, output_hidden_states=True).hidden_states
            positions = torch.arange(ids.shape[1])[None]
            for layer in (0, 1):
                block = model.layers[layer]
                x = block.input_layernorm(states[layer])
                cos, sin = model.rotary_emb(x, positions)
                attn = block.self_attn
                q = attn.q_proj(x).view(1, -1, 4, 8).transpose(1, 2)
                k = attn.k_proj(x).view(1, -1, 2, 8).transpose(1, 2)
                v = attn.v_proj(x).view(1, -1, 2, 8).transpose(1, 2)
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
                for w, t in enumerate((q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1))):
                    acts[(layer, w)].append(t[0].numpy())  # (H, T, D)
    for layer in (0, 1):
        for w in range(3):
            x = np.concatenate(acts[(layer, w)], axis=1).astype(np.float64)  # (H, all tokens, D)
            for head in range(4):
                values = x[head].ravel()
                np.testing.assert_allclose(got[layer, head, 2 * w], np.abs(values).mean(), rtol=1e-5)
                np.testing.assert_allclose(got[layer, head, 2 * w + 1], values.std(ddof=1), rtol=1e-5)
        assert np.all(got[layer, :, 6:] == 0)
        # query heads 0, 1 share key/value head 0; 2, 3 share head 1: same k, v columns, their own q
        assert np.array_equal(got[layer, 0, 2:6], got[layer, 1, 2:6]) and np.array_equal(
            got[layer, 2, 2:6], got[layer, 3, 2:6]
        )
        assert not np.array_equal(got[layer, 0, 2:6], got[layer, 2, 2:6]) and got[layer, 0, 0] != got[layer, 1, 0]
    groups = head_group_labels(got)
    heads, validity = group_tables(got, groups, window=64)
    assert len(heads) == 8 and list(validity["layer"]) == [0, 1]
