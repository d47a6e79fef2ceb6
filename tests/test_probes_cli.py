"""``aah-viz probe`` end to end on a model trained briefly on the synthetic corpus; bad input; HF models."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402

DATA = Path(str(resources.files("aah_viz") / "data"))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("probe") / "run"
    code = main(
        [
            "train",
            "--preset",
            "tiny",
            "--steps",
            "4",
            "--n-docs",
            "20",
            "--out",
            str(run),
            "--threads",
            "1",
            "--no-progress",
            "--set",
            "warmup_steps=1",
        ]
    )
    assert code == 0
    return run


def _snapshot(run: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file()
    }


def test_probe_end_to_end_writes_the_three_tables(trained_run, capsys):
    code = main(["probe", str(trained_run), "--max-docs", "3", "--min-count", "10", "--no-progress", "--threads", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "relation" in out and "coreference: best head" in out
    run = load_run(trained_run)
    n_layer, n_head = run.n_layer, run.n_head
    heads = run.table("probe_heads")
    step = int(heads["step"].iloc[0])
    assert set(heads["probe"]) == {
        "syntax",
        "coref",
        "sufficiency",
        "attention_js",
        "distance",
        "positional",
        "interval",
    }
    for probe in ("syntax", "coref", "sufficiency", "distance"):
        sub = heads[heads["probe"] == probe]
        assert len(sub[["layer", "head"]].drop_duplicates()) == n_layer * n_head
    # the window of each head is the run's heads table at the probed step
    recorded = run.table("heads")
    at = recorded[recorded["step"] == recorded.loc[recorded["step"] <= step, "step"].max()]
    expected = {(int(r.layer), int(r.head)): int(r.window) for r in at.itertuples()}
    got = heads[heads["probe"] == "syntax"].drop_duplicates(["layer", "head"])
    assert {(int(r.layer), int(r.head)): int(r.window) for r in got.itertuples()} == expected
    relations = run.table("probe_relations")
    assert {"det", "nsubj"} <= set(relations["relation"]) and relations["best_acc"].between(0, 1).all()
    coref = run.table("probe_coref")
    assert {"head", "nearest_mention", "same_head", "rule", "nearest_name", "first_name"} == set(coref["method"])
    claims = run.table("probe_claims")
    assert set(claims["probe"]) == {"syntax", "coref"} and set(relations["relation"]) == set(
        claims.loc[claims["probe"] == "syntax", "relation"]
    )
    assert validate_run(trained_run) == []
    # probing the same step again replaces the step's rows instead of duplicating them
    assert main(["probe", str(trained_run), "--max-docs", "2", "--min-count", "10", "--no-progress", "--json"]) == 0
    again = load_run(trained_run).table("probe_heads")
    assert again.duplicated(subset=["step", "layer", "head", "probe", "metric"]).sum() == 0
    claims_again = load_run(trained_run).table("probe_claims")
    assert not claims_again.duplicated(subset=["step", "probe", "relation", "direction"]).any()
    # and the comparisons run on it
    assert main(["compare", str(trained_run), "--permutations", "20", "--bootstrap", "20"]) == 0
    assert len(load_run(trained_run).table("comparisons")) > 0


def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    bad_conllu = tmp_path / "bad.conllu"
    lines = (DATA / "english_fixture.conllu").read_text(encoding="utf-8").splitlines()
    lines[7] = lines[7].replace("\t", " ")  # a token line without tabs
    bad_conllu.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad_coref = tmp_path / "bad.jsonl"
    bad_coref.write_text(
        '{"id": "a", "text": "Tom ran.", "chains": [{"id": 0, "mentions": [{"start": 0, "end": 99}]}]}\n'
    )
    empty = tmp_path / "empty.conllu"
    empty.write_text("")
    return [
        (["--syntax", str(bad_conllu)], f"{bad_conllu}:8:"),
        (["--coref", str(bad_coref)], f"{bad_coref}:1: chain 0 mention 0"),
        (["--syntax", str(empty)], f"{empty}: the file is empty"),
        (["--syntax", str(DATA / "synthetic_probe.coref.jsonl")], "synthetic_probe.coref.jsonl:1:"),
    ]


def test_bad_input_is_one_error_and_leaves_the_run_untouched(trained_run, tmp_path, capsys):
    before = _snapshot(trained_run)
    for extra, where in _bad_inputs(tmp_path):
        code = main(["probe", str(trained_run), "--no-progress", *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1 and where in err[0], (extra, err)
    assert _snapshot(trained_run) == before


def test_unknown_step_and_missing_out(trained_run, tmp_path, capsys):
    assert main(["probe", str(trained_run), "--step", "999"]) == 2
    assert "no checkpoint at step 999" in capsys.readouterr().err
    ckpt = sorted((trained_run / "checkpoints").glob("step-*.pt"))[-1]
    loose = tmp_path / ckpt.name
    loose.write_bytes(ckpt.read_bytes())
    assert main(["probe", str(loose), "--max-docs", "1"]) == 2
    assert "--out" in capsys.readouterr().err


def _tiny_hf_model(folder: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from aah_viz.corpus.synthetic import training_text

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fixture_text = " ".join(
        l[9:] for l in (DATA / "english_fixture.conllu").read_text().splitlines() if l.startswith("# text = ")
    )
    tok.train_from_iterator(
        [training_text(20, seed=0), fixture_text], trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"])
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=128, vocab_size=len(fast))
    model = transformers.GPT2Model(config)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def test_hugging_face_model_with_a_fast_tokenizer(tmp_path, capsys):
    folder = _tiny_hf_model(tmp_path / "hf")
    out = tmp_path / "hf-run"
    code = main(
        [
            "probe",
            str(folder),
            "--out",
            str(out),
            "--syntax",
            str(DATA / "english_fixture.conllu"),
            "--coref",
            str(DATA / "gap_sample.tsv"),
            "--min-count",
            "5",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    run = load_run(out)
    heads = run.table("probe_heads")
    assert set(heads["layer"]) == {0, 1} and set(heads["head"]) == {0, 1, 2, 3}
    assert set(heads["window"]) == {128}
    assert "det" in set(run.table("probe_relations")["relation"])
    assert validate_run(out) == []


def test_hf_source_offsets_and_attention_shape(tmp_path):
    from instrumentation.measure.probe_extract import load_hf_model

    source = load_hf_model(_tiny_hf_model(tmp_path / "hf"))
    text = "The old man saw a dog."
    ids, offsets = source.encode(text)
    assert [text[a:b].strip() for a, b in offsets] == ["The", "old", "man", "saw", "a", "dog", "."]
    att = source.attend([ids, ids[:3]])
    assert att.shape == (2, 2, 4, len(ids), len(ids))
    assert np.allclose(att[0].sum(-1), 1.0, atol=1e-5)
    assert np.allclose(att[1, :, :, :3, :3], att[0, :, :, :3, :3], atol=1e-5)  # padding does not leak (causal)


def test_hf_source_without_a_fast_tokenizer_uses_bytes():
    transformers = pytest.importorskip("transformers")
    from instrumentation.measure.probe_extract import HFAttentionSource

    torch.manual_seed(0)
    model = transformers.GPT2Model(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=32, vocab_size=260)
    )
    source = HFAttentionSource(model, tokenizer=None)
    ids, offsets = source.encode("né")
    assert ids == list("né".encode()) and offsets == [(0, 1), (1, 2), (1, 2)]
    assert source.max_len == 32 and source.windows.shape == (1, 2)
    assert source.attend([ids]).shape == (1, 1, 2, 3, 3)


def _encoder_tokenizer(folder: Path, cls: str, sep: str):
    """A word-level fast tokenizer that wraps a single text as CLS ... SEP, as BERT's and RoBERTa's do."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    from aah_viz.corpus.synthetic import training_text

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.train_from_iterator(
        [training_text(5, seed=0)], trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", cls, sep])
    )
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token=cls, sep_token=sep
    )


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_encoders_see_their_special_tokens_and_the_probe_sees_the_text(tmp_path, family):
    transformers = pytest.importorskip("transformers")
    from instrumentation.measure.probe_extract import HFAttentionSource

    cls, sep = ("[CLS]", "[SEP]") if family == "bert" else ("<s>", "</s>")
    fast = _encoder_tokenizer(tmp_path, cls, sep)
    torch.manual_seed(0)
    common = dict(
        vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    if family == "bert":
        model = transformers.BertModel(transformers.BertConfig(max_position_embeddings=40, **common))
        positions = 40
    else:  # RoBERTa counts positions from padding_idx + 1
        model = transformers.RobertaModel(
            transformers.RobertaConfig(max_position_embeddings=40, pad_token_id=1, **common)
        )
        positions = 40 - 2
    model.config._attn_implementation = "eager"
    source = HFAttentionSource(model.eval(), fast)
    assert source.max_len == positions - 2  # room for CLS and SEP
    text = "the dog saw a cat ."
    ids, _ = source.encode(text)
    att = source.attend([ids, ids[:3]])
    # the model's own input: the tokenizer's encoding with its special tokens, attention sliced by hand
    enc = fast(text, return_tensors="pt")
    assert enc["input_ids"][0, 0] == fast.convert_tokens_to_ids(cls)
    assert enc["input_ids"][0, 1:-1].tolist() == ids
    with torch.no_grad():
        full = torch.stack(model(**enc, output_attentions=True).attentions, 1)[0].numpy()
    n = len(ids)
    np.testing.assert_allclose(att[0], full[:, :, 1 : n + 1, 1 : n + 1], atol=1e-6)
    assert (att[0].sum(-1) < 1 - 1e-4).any()  # mass on CLS/SEP is left out, not renormalised here
    assert np.allclose(att[1, :, :, 3:, :], 0) and np.allclose(att[1, :, :, :, 3:], 0)  # padding rows/columns
    # a text of max_len tokens still fits the model's positions with its special tokens
    assert source.attend([[ids[0]] * source.max_len]).shape[-1] == source.max_len


def test_an_over_long_sentence_is_left_out_with_a_warning(trained_run, tmp_path, capsys):
    fixture = (DATA / "english_fixture.conllu").read_text(encoding="utf-8").strip().split("\n\n")[0]
    n = 5000  # more words than the tiny model takes tokens in one input
    words = [f"w{i}" for i in range(1, n + 1)]
    rows = [f"{i}\t{w}\t{w}\tNOUN\t_\t_\t{i - 1}\t{'root' if i == 1 else 'dep'}\t_\t_" for i, w in enumerate(words, 1)]
    long_sentence = "\n".join(["# sent_id = long", f"# text = {' '.join(words)}", *rows])
    path = tmp_path / "long.conllu"
    path.write_text(fixture + "\n\n" + long_sentence + "\n\n", encoding="utf-8")
    code = main(["probe", str(trained_run), "--syntax", str(path), "--no-progress", "--json", "--min-count", "1"])
    assert code == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["long_sentences_left_out"] == 1 and summary["sentences"] == 1
    assert "1 sentence(s)" in captured.err and "left out" in captured.err


def test_plan_jobs_leaves_out_only_the_over_long_sentences():
    from aah_viz.corpus.document import Document, Sentence, Word
    from aah_viz.probes.runner import long_sentence_count, plan_jobs

    def sentence(sid, n, start):
        words = tuple(Word(f"w{i}", start + 3 * i, start + 3 * i + 2, i, "dep", "NOUN") for i in range(n))
        return Sentence(sid, start, start + 3 * n, words)

    short, long = sentence("a", 3, 0), sentence("b", 9, 9)
    doc = Document("d", "x" * 40, [short, long])
    assert [s.sentences[0].id for s, _ in plan_jobs([doc], [], "sentence", max_words=5)] == ["a"]
    assert plan_jobs([doc], [], "document", max_words=5) == []  # the document holds a sentence it cannot see
    assert len(plan_jobs([doc], [], "sentence")) == 2  # no limit, nothing left out
    assert long_sentence_count([doc], 5) == 1
