"""The probes on a causal model: each dependency read at its later word, looking back; pronouns
before their antecedent left out of coreference.

Planted attention (no model) gives known answers; the expected numbers are computed here straight
from the CoNLL-U columns and the GAP offsets, not with the probe's own helpers.
"""

from __future__ import annotations

from collections import defaultdict
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_SHAPE
from planted_attention import PlantedAttentionSource, gold_links

from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.probes.conllu_reader import read_conllu
from aah_viz.probes.coref_formats import read_coref
from aah_viz.probes.runner import run_probes, sentence_documents

DATA = Path(str(resources.files("aah_viz") / "data"))
FIXTURE = DATA / "english_fixture.conllu"
BACKWARD = (-3, -2, -1)


def column_links(path: Path):
    """[(sentence, dependent id, head id, universal relation)] straight from the CoNLL-U columns."""
    links = []
    for s, block in enumerate(path.read_text(encoding="utf-8").strip().split("\n\n")):
        for line in block.splitlines():
            cols = line.split("\t")
            if line.startswith("#") or not cols[0].isdigit():
                continue
            head, rel = int(cols[6]), cols[7].split(":")[0]
            if head != 0 and rel not in ("root", "punct"):
                links.append((s, int(cols[0]), head, rel))
    return links


def expected_causal_table(links):
    """(relation, direction) -> dict(count, baseline offset and accuracy, previous-word accuracy,
    nearest-earlier-dependent accuracy), from the links alone."""
    dependents = defaultdict(list)  # (sentence, head id) -> dependent ids
    for s, dep, head, _ in links:
        dependents[(s, head)].append(dep)
    cells = defaultdict(list)
    for s, dep, head, rel in links:
        direction = "dependent_to_head" if head < dep else "head_to_dependent"
        cells[(rel, direction)].append((s, dep, head))
    out = {}
    for key, items in cells.items():
        length = np.array([abs(dep - head) for _, dep, head in items])
        hits = {k: float(np.mean(length == -k)) for k in BACKWARD}
        best = max(BACKWARD, key=lambda k: (hits[k], -BACKWARD.index(k)))
        nearest = [dep == max([d for d in dependents[(s, head)] if d < head], default=-1) for s, dep, head in items]
        out[key] = {
            "count": len(items),
            "baseline_offset": best,
            "baseline_acc": hits[best],
            "previous_word": hits[-1],
            "nearest_dependent": float(np.mean(nearest)),
        }
    return out


class PlantedCausalSource(PlantedAttentionSource):
    """Causal attention planted from the gold trees, looked up by the input's ids.

    Head 0: every token of a word attends to its gold head's tokens when the head comes first.
    Head 1: every token of a word attends to the tokens of its nearest earlier dependent.
    Head 2: every token of a word attends to the previous word of its sentence (a positional head).
    Head 3: uniform causal attention. A word with no such target attends to itself only, which
    predicts nothing.
    """

    causal = True

    def __init__(self, docs, max_len=100_000):
        super().__init__(max_len)
        for doc in [s for d in docs for s in sentence_documents(d)]:
            ids, al, tokens_of = self.word_tokens(doc)
            head_of, deps = gold_links(doc)
            n = len(ids)
            att = np.zeros((1, 4, n, n), dtype=np.float32)
            for t in range(n):
                u = int(al.unit_of_token[t])
                word = u < len(doc.words)
                targets = (
                    [head_of[u]] if word and u in head_of and head_of[u] < u else [],
                    [max(d for d in deps[u] if d < u)] if word and any(d < u for d in deps[u]) else [],
                    [u - 1] if word and u > 0 else [],
                )
                for h, target in enumerate(targets):
                    cols = [c for w in target for c in tokens_of[w]]
                    att[0, h, t, cols if cols else [t]] = 1.0 / max(len(cols), 1)
                att[0, 3, t, : t + 1] = 1.0 / (t + 1)
            assert np.allclose(np.triu(att, 1), 0)  # causal: nothing on later tokens
            self.planted[tuple(ids)] = att


@pytest.fixture(scope="module")
def fixture_run():
    docs = read_conllu(FIXTURE)
    return docs, run_probes(PlantedCausalSource(docs), docs, (), min_count=3, n_boot=200)


def test_every_link_is_scored_at_its_later_word_in_the_direction_the_text_gives(fixture_run):
    docs, result = fixture_run
    expected = expected_causal_table(column_links(FIXTURE))
    assert result.causal
    assert all(type(r) is str for r in result.direction_counts)  # plain names: the CLI prints them as JSON
    counts = defaultdict(dict)
    for (rel, direction), cell in expected.items():
        counts[rel][direction] = cell["count"]
    assert result.direction_counts == {
        r: {d: c.get(d, 0) for d in ("dependent_to_head", "head_to_dependent")} for r, c in counts.items()
    }
    rel = result.probe_relations
    assert set(rel["direction"]) == {"dependent_to_head", "head_to_dependent"}
    got = {(r["relation"], r["direction"]): r for _, r in rel.iterrows()}
    assert set(got) == {k for k, cell in expected.items() if cell["count"] >= 3}
    assert {("det", "head_to_dependent"), ("amod", "head_to_dependent"), ("obj", "dependent_to_head")} <= set(got)
    for key, row in got.items():
        cell = expected[key]
        assert row["count"] == cell["count"], key
        assert row["baseline_offset"] == cell["baseline_offset"] < 0, key  # only backward offsets
        assert row["baseline_acc"] == pytest.approx(cell["baseline_acc"]), key
        assert row["delta"] == pytest.approx(row["best_acc"] - row["baseline_acc"])
        assert row["delta_ci_low"] <= row["delta"] + 1e-12 <= row["delta_ci_high"] + 2e-12


def test_planted_heads_score_what_they_were_planted_to_do(fixture_run):
    docs, result = fixture_run
    expected = expected_causal_table(column_links(FIXTURE))
    heads = result.probe_heads
    syntax = heads[heads["probe"] == "syntax"].set_index(["head", "metric"])["value"]
    rel = result.probe_relations.set_index(["relation", "direction"])
    for (name, direction), row in rel.iterrows():
        cell = expected[(name, direction)]
        metric = f"{name}:{direction}"
        assert syntax[(0, metric)] == (1.0 if direction == "dependent_to_head" else 0.0)
        assert syntax[(1, metric)] == pytest.approx(
            cell["nearest_dependent"] if direction == "head_to_dependent" else 0.0
        )
        assert syntax[(2, metric)] == pytest.approx(cell["previous_word"])  # the offset -1 baseline, exactly
        best = max(syntax[(h, metric)] for h in range(4))
        assert row["best_acc"] == pytest.approx(best)
        if direction == "dependent_to_head":
            assert row["best_head"] == 0 and row["best_acc"] == 1.0
    assert syntax[(0, "all:dependent_to_head")] == 1.0
    positional = heads[heads["probe"] == "positional"].set_index(["head", "metric"])["value"]
    assert positional[(2, "offset:backward")] == -1 and positional[(2, "share:backward")] == 1.0
    assert positional[(3, "share:backward")] < 0.5  # uniform attention is not positional
    # the head's score is the mean over the listed relation-directions
    pairs = [f"{r}:{d}" for r, d in rel.index]
    assert syntax[(1, "score")] == pytest.approx(np.mean([syntax[(1, m)] for m in pairs]))
    gain = [syntax[(2, f"{r}:{d}")] - rel.loc[(r, d), "baseline_acc"] for r, d in rel.index]
    assert syntax[(2, "score_minus_baseline")] == pytest.approx(np.mean(gain))


def test_a_bidirectional_probe_of_the_same_attention_keeps_clarks_two_directions():
    docs = read_conllu(FIXTURE)
    result = run_probes(PlantedCausalSource(docs), docs, (), min_count=3, n_boot=10, causal=False)
    assert not result.causal and result.direction_counts == {}
    assert set(result.probe_relations["direction"]) <= {"dep2head", "head2dep"}
    assert set(result.probe_relations["baseline_offset"]) <= {-3, -2, -1, 1, 2}
    assert (result.probe_relations.groupby("relation").size() == 1).all()


# ----------------------------------------------------------------------------- coreference (GAP)
GAP_HEADER = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL"
GAP_ROWS = [  # (text, pronoun, A, B, gold) with gold A, B or None
    ("Anna met Tom in Paris. Later she wrote a letter.", "she", "Anna", "Tom", "A"),
    ("Tom met Anna in Paris. Later she wrote a letter.", "she", "Tom", "Anna", "B"),
    ("When she arrived, Anna saw Tom at the door.", "she", "Anna", "Tom", "A"),  # cataphora
    ("Before he left, Tom called Anna twice.", "he", "Tom", "Anna", "A"),  # cataphora
    ("Anna saw Rosa, and then she smiled at Tom.", "she", "Anna", "Rosa", "B"),
    ("Anna saw Tom, and nobody knew where she was.", "she", "Anna", "Tom", None),
    ("Paul called Tom, and he answered at once.", "he", "Paul", "Tom", "B"),
]


def write_gap(path: Path) -> list[dict]:
    lines, items = [GAP_HEADER], []
    for i, (text, pronoun, a, b, gold) in enumerate(GAP_ROWS):
        p = text.index(f" {pronoun} ") + 1
        oa, ob = text.index(a), text.index(b)
        lines.append(
            f"g{i}\t{text}\t{pronoun}\t{p}\t{a}\t{oa}\t{gold == 'A'}\t{b}\t{ob}\t{gold == 'B'}\thttp://x".replace(
                "True", "TRUE"
            ).replace("False", "FALSE")
        )
        items.append({"text": text, "p": p, "plen": len(pronoun), "names": [(oa, len(a)), (ob, len(b))], "gold": gold})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return items


class PlantedGapSource:
    """Head 0: the pronoun's characters attend to the gold name when it comes first; head 1: to the
    nearest name that ends before the pronoun; every other row attends to itself."""

    n_layer, n_head = 1, 2
    causal = True
    max_len = 100_000

    def __init__(self, items):
        self.tok = ByteTokenizer()
        self.items = {tuple(self.tok.encode(it["text"])[0]): it for it in items}

    def encode(self, text):
        return self.tok.encode(text)

    def attend(self, batch):
        T = max(len(b) for b in batch)
        out = np.zeros((len(batch), 1, 2, T, T), dtype=np.float32)
        for k, ids in enumerate(batch):
            it = self.items[tuple(ids)]
            n = len(ids)
            out[k, 0, :, np.arange(n), np.arange(n)] = 1.0
            before = [(o, n_) for o, n_ in it["names"] if o + n_ <= it["p"]]
            gold = {"A": it["names"][0], "B": it["names"][1]}.get(it["gold"])
            targets = (gold if gold in before else None, max(before, key=sum) if before else None)
            for h, target in enumerate(targets):
                if target is None:
                    continue
                for t in range(it["p"], it["p"] + it["plen"]):  # ASCII: one byte per character
                    out[k, 0, h, t] = 0.0
                    out[k, 0, h, t, target[0] : target[0] + target[1]] = 1.0 / target[1]
        return out


def test_gap_on_a_causal_model_asks_each_pronoun_about_the_names_before_it(tmp_path):
    items = write_gap(tmp_path / "gap.tsv")
    docs = read_coref(tmp_path / "gap.tsv")
    before = [it for it in items if it["gold"] and it["names"]["AB".index(it["gold"])][0] < it["p"]]
    after = [it for it in items if it["gold"] and it["names"]["AB".index(it["gold"])][0] > it["p"]]
    assert len(before) == 4 and len(after) == 2
    nearest_right = 0
    for it in before:
        candidates = [(o, n) for o, n in it["names"] if o + n <= it["p"]]
        nearest_right += max(candidates, key=sum) == it["names"]["AB".index(it["gold"])]
    causal = run_probes(PlantedGapSource(items), (), docs)
    assert causal.causal and causal.n_cataphora_left_out == len(after)
    coref = causal.probe_coref[causal.probe_coref["bucket"] == "all"]
    heads = coref[coref["method"] == "head"].set_index("head")
    assert (heads["count"] == len(before)).all()  # one query per pronoun with its name before it
    assert heads.loc[0, "accuracy"] == 1.0
    assert heads.loc[1, "correct"] == nearest_right
    nearest = coref[coref["method"] == "nearest_mention"].iloc[0]
    assert nearest["count"] == len(before) and nearest["correct"] == nearest_right  # the same queries
    left = causal.probe_heads[
        (causal.probe_heads["probe"] == "coref") & (causal.probe_heads["metric"] == "cataphora_left_out")
    ]
    assert set(left["value"]) == {float(len(after))}
    # a bidirectional probe also asks the name after a cataphoric pronoun about that pronoun
    both = run_probes(PlantedGapSource(items), (), docs, causal=False)
    all_rows = both.probe_coref[(both.probe_coref["bucket"] == "all") & (both.probe_coref["method"] == "head")]
    assert (all_rows["count"] == len(before) + len(after)).all() and both.n_cataphora_left_out == 0
    assert "cataphora_left_out" not in set(both.probe_heads["metric"])


# ----------------------------------------------------------------------------- a tiny random Llama
def tiny_llama(folder: Path, seed: int = 0) -> Path:
    """A random LlamaForCausalLM (2 layers, 4 query heads, 2 key/value heads) with a word-level fast
    tokenizer that adds no special tokens but has a BOS token; saved as a Hugging Face folder."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [l[9:] for l in FIXTURE.read_text(encoding="utf-8").splitlines() if l.startswith("# text = ")]
    texts += [l.split("\t")[1] for l in (DATA / "gap_sample.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "<s>"]))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="<s>"
    )
    config = transformers.LlamaConfig(
        **{**TINY_SHAPE, "vocab_size": len(fast), "max_position_embeddings": 256},
        initializer_range=0.5,  # peaked attention: argmaxes far from ties
        bos_token_id=fast.bos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def column_sentences(conllu: Path, limit: int | None = None):
    """[(sent_id, text, rows)] straight from the CoNLL-U lines; sentences with multiword tokens are
    skipped (their syntactic words do not spell the text)."""
    out = []
    for block in conllu.read_text(encoding="utf-8").strip().split("\n\n"):
        meta = dict(l[2:].split(" = ", 1) for l in block.splitlines() if l.startswith("# ") and " = " in l)
        rows = [l.split("\t") for l in block.splitlines() if not l.startswith("#")]
        if any(not r[0].isdigit() for r in rows):
            continue
        out.append((meta["sent_id"], meta["text"], rows))
        if limit and len(out) == limit:
            break
    return out


def independent_causal_probe(folder: Path, sentences, model=None):
    """(relation, direction) -> (count, (n_heads,) accuracy), computed from the CoNLL-U columns and the
    model's own attention: BOS + each word's tokens (the word with the whitespace before it; a token of
    whitespace alone is a unit of its own), word-level attention (sum over a unit's columns, mean over
    its rows), BOS, gaps and the diagonal dropped, each word's argmax over the earlier words."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if model is None:
        model = LlamaForCausalLM.from_pretrained(folder, local_files_only=True, attn_implementation="eager").eval()
    hits = defaultdict(list)
    for _, text, rows in sentences:
        ids, unit, end, gaps = [tok.bos_token_id], [0], 0, 0  # unit 0 = BOS, 1..n = words, then gaps
        for w, r in enumerate(rows, start=1):
            start = text.index(r[1], end)
            enc = tok(text[end : start + len(r[1])], add_special_tokens=False, return_offsets_mapping=True)
            for t, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]):
                ids.append(t)
                if not text[end + a : end + b].strip():  # a token of whitespace alone belongs to no word
                    gaps += 1
                    unit.append(len(rows) + gaps)
                else:
                    unit.append(w)
            end = start + len(r[1])
        with torch.no_grad():
            att = torch.stack(model(torch.tensor([ids]), output_attentions=True).attentions, 1)[0].numpy()
        att = att.reshape(-1, len(ids), len(ids)).astype(np.float64)
        n = len(rows)
        onehot = np.zeros((len(ids), n + 1 + gaps))
        onehot[np.arange(len(ids)), unit] = 1
        words = (onehot / onehot.sum(0)).T @ (att @ onehot)  # (heads, units, units)
        words = words[:, 1 : n + 1, 1 : n + 1]  # BOS and gaps are never an answer
        earlier = np.tril(np.ones((n, n), dtype=bool), -1)
        back = np.where(earlier[None], words, -1.0).argmax(-1)  # 0-based earlier word (row 0: none, never asked)
        for r in rows:
            dep, head, rel = int(r[0]), int(r[6]), r[7].split(":")[0]
            if head == 0 or rel in ("root", "punct"):
                continue
            later, first = max(dep, head), min(dep, head)
            direction = "dependent_to_head" if head < dep else "head_to_dependent"
            hits[(rel, direction)].append(back[:, later - 1] == first - 1)
    return {key: (len(v), np.mean(v, axis=0)) for key, v in hits.items()}


def test_a_random_llama_is_probed_causally_as_an_independent_computation_says(tmp_path):
    torch = pytest.importorskip("torch")
    from instrumentation.measure.probe_extract import load_hf_model

    torch.set_num_threads(1)
    folder = tiny_llama(tmp_path / "llama")
    source = load_hf_model(folder)
    assert source.causal and source.prefix == [source.tokenizer.bos_token_id] and source.suffix == []
    docs = read_conllu(FIXTURE)
    result = run_probes(source, docs, (), min_count=1, n_boot=10, batch_size=4)
    theirs = independent_causal_probe(folder, column_sentences(FIXTURE))
    heads = result.probe_heads[result.probe_heads["probe"] == "syntax"]
    table = heads.pivot_table(index="metric", columns=["layer", "head"], values="value")
    per_relation = {m for m in table.index if m.endswith("_to_head") or m.endswith("_to_dependent")}
    assert {f"{r}:{d}" for r, d in theirs} == per_relation - {"all:dependent_to_head", "all:head_to_dependent"}
    differences = []
    for (rel, direction), (count, acc) in theirs.items():
        row = result.probe_relations.set_index(["relation", "direction"]).loc[(rel, direction)]
        assert row["count"] == count
        mine = table.loc[f"{rel}:{direction}"].to_numpy()
        differences.append(np.abs(mine - acc))
        assert np.abs(mine - acc).max() <= 1 / count + 1e-12  # at most one near-tie apart
        assert row["best_acc"] == pytest.approx(mine.max())
    assert np.concatenate(differences).mean() <= 0.01
    assert set(result.probe_relations["baseline_offset"]) <= set(BACKWARD)


def test_which_models_are_causal():
    transformers = pytest.importorskip("transformers")
    from instrumentation.measure.probe_extract import is_causal_model

    small = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, vocab_size=300)
    assert is_causal_model(transformers.LlamaModel(transformers.LlamaConfig(num_key_value_heads=1, **small)))
    assert is_causal_model(transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16)))
    assert not is_causal_model(transformers.BertModel(transformers.BertConfig(**small)))
    assert is_causal_model(transformers.BertModel(transformers.BertConfig(is_decoder=True, **small)))
    bert = transformers.BertModel(transformers.BertConfig(architectures=["BertLMHeadModel"], **small))
    assert is_causal_model(bert)  # saved from a causal head: its config says so


def test_a_causal_source_puts_its_bos_token_first_and_returns_the_texts_attention(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import LlamaForCausalLM

    from instrumentation.measure.probe_extract import load_hf_model

    folder = tiny_llama(tmp_path / "llama")
    source = load_hf_model(folder)
    ids, _ = source.encode("The old man saw a dog .")
    att = source.attend([ids, ids[:3]])
    model = LlamaForCausalLM.from_pretrained(folder, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        full = torch.stack(
            model(torch.tensor([[source.tokenizer.bos_token_id] + ids]), output_attentions=True).attentions, 1
        )
    n = len(ids)
    np.testing.assert_allclose(att[0], full[0, :, :, 1:, 1:].numpy(), atol=1e-6)
    assert np.allclose(np.triu(att[0], 1), 0)  # nothing on later tokens
    np.testing.assert_allclose(att[1, :, :, :3, :3], att[0, :, :, :3, :3], atol=1e-5)  # padding after: unseen
    bare = load_hf_model(folder, with_start_token=False)
    assert bare.prefix == [] and bare.max_len == source.max_len + 1
    with torch.no_grad():
        own = torch.stack(model(torch.tensor([ids]), output_attentions=True).attentions, 1)[0].numpy()
    np.testing.assert_allclose(bare.attend([ids])[0], own, atol=1e-6)
    assert n == att.shape[-1]


def test_the_probe_command_on_a_causal_model_reports_directions_and_left_out_pronouns(tmp_path, capsys):
    pytest.importorskip("torch")
    import json

    from aah_viz.cli import main
    from aah_viz.runlog import load_run, validate_run

    folder = tiny_llama(tmp_path / "llama")
    write_gap(tmp_path / "gap.tsv")
    out = tmp_path / "run"
    args = ["probe", str(folder), "--out", str(out), "--syntax", str(FIXTURE), "--coref", str(tmp_path / "gap.tsv")]
    assert main(args + ["--min-count", "2", "--no-progress", "--json", "--threads", "1", "--sort-by-length"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["attention"] == "causal" and summary["cataphora_left_out"] == 2 and summary["coref_queries"] == 4
    expected = expected_causal_table(column_links(FIXTURE))
    assert summary["direction_counts"]["det"] == {
        "dependent_to_head": 0,
        "head_to_dependent": expected[("det", "head_to_dependent")]["count"],
    }
    assert {r["direction"] for r in summary["relations"]} == {"dependent_to_head", "head_to_dependent"}
    assert validate_run(out) == []
    rel = load_run(out).table("probe_relations")
    assert (rel["baseline_offset"] < 0).all()
    # a seeded sample: the same documents for the same seed, in file order
    assert main(args + ["--sample-docs", "1", "--no-progress", "--json", "--threads", "1", "--min-count", "1"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["syntax_docs"] == 1 and first["coref_docs"] == 1 and first["sample_seed"] == 0
    assert main(args + ["--sample-docs", "0", "--no-progress"]) == 2
    assert "--sample-docs must be at least 1" in capsys.readouterr().err


def test_sampled_documents_are_seeded_and_keep_their_order():
    from aah_viz.probes.runner import sample_documents

    docs = list(range(50))
    a, b = sample_documents(docs, 10, seed=3), sample_documents(docs, 10, seed=3)
    assert a == b == sorted(a) and len(set(a)) == 10
    assert sample_documents(docs, 10, seed=4) != a
    assert sample_documents(docs, 50) == docs and sample_documents(docs, None) == docs


def test_the_causal_model_script_writes_groups_probes_and_comparisons(tmp_path):
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    from aah_viz.runlog import load_run

    folder = tiny_llama(tmp_path / "llama")
    write_gap(tmp_path / "gap.tsv")
    out = tmp_path / "runs" / "probed"
    script = Path(__file__).resolve().parents[1] / "scripts" / "probe_causal_model.py"
    cmd = [sys.executable, str(script), "--model", str(folder), "--syntax", str(FIXTURE)]
    cmd += ["--coref", str(tmp_path / "gap.tsv"), "--out", str(out), "--feature-sentences", "6", "--min-count", "2"]
    cmd += ["--bootstrap", "20", "--permutations", "20", "--threads", "1", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) >= {"run", "groups_per_layer_and_level", "verdicts", "head_groups", "probe", "compare"}
    assert report["probe"]["wall_s"] >= 0 and report["probe"]["cpu_s"] >= 0
    for control in report["gqa_control"].values():  # 2 query heads per key/value head: a null within pairs
        assert control["layers"] <= 2 and 0 < control["p_value"] <= 1
    run = load_run(out)
    heads = run.table("heads")
    assert len(heads) == 2 * 4 and set(heads["window"]) == {256 - 1}  # 256 positions less the BOS token
    assert list(run.table("cluster_validity")["layer"]) == [0, 1]
    assert set(run.table("probe_relations")["direction"]) <= {"dependent_to_head", "head_to_dependent"}
    comparisons = run.table("comparisons")
    assert set(comparisons["layer"].dropna()) <= {0, 1} and comparisons["layer"].isna().any()  # per layer and pooled
    assert run.manifest["config"]["head_groups"].startswith("AAH features of the query heads")


def test_the_relation_figure_names_each_direction_of_a_causal_probe(fixture_run):
    from aah_viz.figures.probe_results import relation_delta_figure, relations_view

    _, result = fixture_run
    rel = result.probe_relations.assign(step=0)
    labels = list(relation_delta_figure(rel).data[0].y)
    assert len(labels) == len(set(labels)) == len(rel)  # nmod has a row per direction, each its own line
    assert {"nmod (dependent to head)", "nmod (head to dependent)"} <= set(labels)
    assert set(relations_view(rel)["direction"]) == {"dependent_to_head", "head_to_dependent"}


def test_head_similarities_and_comparisons_read_a_causal_probes_scores(fixture_run):
    from aah_viz.probes.head_inputs import probe_inputs
    from aah_viz.probes.head_profiles import wide_probe_heads

    _, result = fixture_run
    heads = result.probe_heads.assign(step=0)
    causal_metrics = {
        f"{r}:{d}" for r, d in zip(result.probe_relations["relation"], result.probe_relations["direction"])
    }
    wide = wide_probe_heads(heads, 1, 4)
    assert {m for p, m in wide.columns if p == "syntax"} == causal_metrics
    values, columns = probe_inputs(heads, 1, 4)["probe"]
    assert set(columns) == causal_metrics and values.shape == (1, 4, len(causal_metrics))
