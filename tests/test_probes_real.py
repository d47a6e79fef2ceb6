"""The probes on a real pretrained model and real annotated data (MiniLM, UD English PUD, GAP).

The syntactic probe is checked against a Clark et al. (2019) computation written here from
scratch: CoNLL-U columns read by hand, each sentence tokenised word by word with the model's
special tokens, word-level attention with [CLS] and [SEP] as their own units, the diagonal and
the special units dropped before the argmax. Skipped when the MiniLM wheel or ../shared is absent.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

N_SENTENCES = 250  # a prefix of PUD keeps the default run short; the slow test takes all 1,000
MIN_COUNT = 25


def read_sentences(path, limit=None):
    """[(forms, heads (0 = root), universal relations)] straight from the CoNLL-U columns."""
    sentences, rows = [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip():
            if rows:
                sentences.append(([r[1] for r in rows], [int(r[6]) for r in rows], [r[7].split(":")[0] for r in rows]))
                rows = []
                if limit and len(sentences) == limit:
                    break
        elif not line.startswith("#"):
            cols = line.split("\t")
            if cols[0].isdigit():  # skip multiword ranges (1-2) and empty nodes (2.1)
                rows.append(cols)
    return sentences


def clark_accuracies(model_dir, sentences):
    """relation -> (count, (2, L*H) accuracy of dep->head and head->dep per head)."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()
    correct = defaultdict(lambda: 0)
    count = Counter()
    for forms, heads, rels in sentences:
        enc = tok(forms, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            att = torch.stack(model(**enc, output_attentions=True).attentions, 1)[0].numpy()  # (L, H, T, T)
        att = att.reshape(-1, *att.shape[-2:])
        word_of = [w if w is not None else None for w in enc.word_ids()]
        n = len(forms)
        # units: 0 = [CLS], 1..n = words, n+1 = [SEP]
        unit = np.array([0 if i == 0 else (n + 1 if w is None else w + 1) for i, w in enumerate(word_of)])
        onehot = np.zeros((len(unit), n + 2))
        onehot[np.arange(len(unit)), unit] = 1
        to_words = att @ onehot  # sum over a word's tokens (columns)
        words = (onehot / onehot.sum(0)).T @ to_words  # mean over a word's tokens (rows): (heads, n+2, n+2)
        idx = np.arange(n + 2)
        words[:, idx, idx] = 0
        words = words[:, 1:-1, 1:-1]
        dep2head = words.argmax(-1) + 1  # 1-based word index
        head2dep = words.transpose(0, 2, 1).argmax(-1) + 1
        for i, (h, r) in enumerate(zip(heads, rels)):
            if h == 0 or r in ("root", "punct"):
                continue
            count[r] += 1
            correct[r] = correct[r] + np.stack([dep2head[:, i] == h, head2dep[:, i] == h]).astype(int)
    return {r: (count[r], correct[r] / count[r]) for r in count}


def project_probe(model_dir, path, n_sentences, **kwargs):
    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.probes.runner import run_probes
    from instrumentation.measure.probe_extract import load_hf_model

    docs, total = [], 0
    for doc in read_conllu(path):
        if total >= n_sentences:
            break
        keep = doc.sentences[: n_sentences - total]
        total += len(keep)
        docs.append(type(doc)(doc.id, doc.text, keep, doc.chains) if len(keep) < len(doc.sentences) else doc)
    return run_probes(load_hf_model(model_dir), docs, (), context="sentence", relations="universal", **kwargs)


def check_against_clark(model_dir, pud_path, n_sentences):
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    ours = project_probe(model_dir, pud_path, n_sentences, min_count=MIN_COUNT, n_boot=50)
    theirs = clark_accuracies(model_dir, read_sentences(pud_path, n_sentences))
    assert ours.n_sentences == n_sentences
    frequent = {r for r, (c, _) in theirs.items() if c >= MIN_COUNT}
    rel = ours.probe_relations.set_index("relation")
    assert set(rel.index) == frequent and len(frequent) >= 10
    heads = ours.probe_heads[ours.probe_heads["probe"] == "syntax"]
    for name in frequent:
        count, acc = theirs[name]
        assert rel.loc[name, "count"] == count, name
        assert rel.loc[name, "best_acc"] == pytest.approx(acc.max(), abs=0.005), name
        per_head = heads[heads["metric"].isin([f"{name}:dep2head", f"{name}:head2dep"])]
        mine = per_head.pivot_table(index="metric", columns=["layer", "head"], values="value")
        mine = mine.loc[[f"{name}:dep2head", f"{name}:head2dep"]].to_numpy()
        assert np.abs(mine - acc).mean() <= 0.002, name  # every head, both directions
    return ours, theirs


def test_minilm_on_pud_matches_an_independent_clark_computation(minilm_dir, pud_path):
    check_against_clark(minilm_dir, pud_path, N_SENTENCES)


@pytest.mark.slow
def test_minilm_on_all_of_pud_matches_an_independent_clark_computation(minilm_dir, pud_path):
    check_against_clark(minilm_dir, pud_path, 1000)
