"""``aah-viz profile --retrieval``: the heads a passkey check needs (each head cut alone, the ``head_retrieval`` table).

The per-head answers are checked against the model run through Hugging Face's own eager attention with a
per-head band mask written here, not through the toolkit's patch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aah_viz.cli import main  # noqa: E402
from aah_viz.corpus.passkey import passkey_items  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.measure.evaluation import load_for_evaluation  # noqa: E402
from instrumentation.measure.head_retrieval import head_retrieval  # noqa: E402
from instrumentation.model import model_logits  # noqa: E402

pytestmark = pytest.mark.torch
T = 384  # byte tokens: room for the intro, the key and a filler or two
SHAPE = dict(max_position_embeddings=384, vocab_size=300)
CUT = {}  # (layer, head) -> (window, sinks): read by the attention function below


def _banded_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention with every head causal except the one in CUT, which sees its last w keys and the first s."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    n = query.shape[2]
    q_pos, k_pos = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (k_pos <= q_pos).expand(query.shape[1], n, n).clone()
    for (layer, head), (w, s) in CUT.items():
        if layer == module.layer_idx:
            allowed[head] = (k_pos <= q_pos) & ((q_pos - k_pos < w) | (k_pos < s))
    scores = (query @ key.transpose(-1, -2)) * scaling
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return (probs @ value).transpose(1, 2).contiguous(), probs


def _independent(folder: Path, items, window: int, sinks: int):
    """Per head (and for the uncut model first): (answered per question, answer NLL per question)."""
    transformers.AttentionInterface.register("aah_test_banded", _banded_attention)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="aah_test_banded").eval()
    cfg = model.config

    def scores():
        hits, nll, margin = [], [], []
        for item in items:
            prompt, answer = list(item.prompt.encode()), list(item.answer.encode())
            with torch.no_grad():
                logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1].double()
            top2 = logits.topk(2, dim=-1).values
            hits.append(logits.argmax(-1).tolist() == answer)
            nll.append(float(torch.nn.functional.cross_entropy(logits, torch.tensor(answer))))
            margin.append(float((top2[:, 0] - top2[:, 1]).min()))
        return np.array(hits), np.array(nll), np.array(margin)

    CUT.clear()
    out = {"base": scores()}
    for layer in range(cfg.num_hidden_layers):
        for head in range(cfg.num_attention_heads):
            CUT.clear()
            CUT[(layer, head)] = (window, sinks)
            out[(layer, head)] = scores()
    CUT.clear()
    return out


@pytest.mark.slow  # 9 x 5 forwards of 384 tokens, twice (about half a minute each)
@pytest.mark.parametrize("sinks", [0, 2])
def test_each_head_cut_alone_equals_an_explicit_band_mask(tmp_path, tiny_causal_lm, sinks):
    folder = tiny_causal_lm(tmp_path / "llama", **SHAPE)
    loaded = load_for_evaluation(folder, windows=(16, 64, 128, 384))
    items = passkey_items(T, lambda text: len(text.encode()) + 1, per_depth=1, seed=3)
    rows, detail = head_retrieval(
        loaded.model, loaded.routed, items, loaded.encode, window=16, sinks=sinks, logits_fn=model_logits
    )
    want = _independent(folder, items, 16, sinks)
    base_hits, base_nll, _ = want["base"]
    assert detail["baseline_retrieved"] == int(base_hits.sum())
    assert detail["baseline_answer_nll"] == pytest.approx(base_nll.mean(), rel=1e-5)
    assert len(rows["layer"]) == 2 * 4
    for i, (layer, head) in enumerate(zip(rows["layer"], rows["head"])):
        hits, nll, margin = want[(layer, head)]
        assert rows["answer_nll"][i] == pytest.approx(nll.mean(), rel=1e-5), (layer, head)
        assert rows["asked"][i] == len(items) and rows["window"][i] == 16 and rows["sink_tokens"][i] == sinks
        sure = margin > 1e-4  # argmax ties within rounding may go either way on another CPU
        got_hits = rows["retrieved"][i]
        assert int(hits[sure].sum()) <= got_hits <= int(hits[sure].sum()) + int((~sure).sum())
        assert rows["lost"][i] <= int(base_hits.sum())
    # cutting a head changes what the model writes: the rows are not all the uncut model's
    assert not np.allclose(rows["answer_nll"], base_nll.mean(), rtol=1e-6)


@pytest.mark.slow  # a profile and 45 forwards of a tiny model (about 20 s); the page test below runs it too
def test_profile_retrieval_writes_the_table_and_says_what_it_found(tmp_path, tiny_causal_lm, capsys):
    folder = tiny_causal_lm(tmp_path / "llama", **SHAPE)
    data = tmp_path / "t.txt"
    data.write_text("Time flies like an arrow; fruit flies like a banana. " * 40)
    out = tmp_path / "profiled"
    args = ["profile", str(folder), "--data", str(data), "--out", str(out), "--seq-len", str(T)]
    args += ["--windows", "16,64,128,384", "--batches", "1", "--retrieval", "1", "--no-progress"]
    assert main(args) == 0
    assert validate_run(out) == []
    run = load_run(out)
    table = run.table("head_retrieval")
    assert sorted(zip(table["layer"], table["head"])) == [(lay, h) for lay in range(2) for h in range(4)]
    assert (table["window"] == 16).all() and (table["asked"] == 5).all()
    ev = run.events()
    (detail,) = [json.loads(d) for d in ev.loc[ev["kind"] == "profile", "detail"]]
    found = detail["head_retrieval"]
    assert found["heads"] == 8 and found["heads_losing_any"] == int((table["lost"] > 0).sum())
    assert f"{found['heads_losing_any']} of 8 heads lose answers when cut alone to 16 tokens" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--retrieval-window", "8"], "--retrieval-window needs --retrieval"),
        (["--retrieval", "-1"], "--retrieval -1"),
        (["--retrieval", "1", "--seq-len", "64"], "no room for filler"),
        (["--retrieval", "1", "--retrieval-window", "500"], "--retrieval-window 500"),
    ],
)
def test_bad_retrieval_arguments_are_one_line(tmp_path, tiny_causal_lm, capsys, extra, says):
    folder = tiny_causal_lm(tmp_path / "llama", **SHAPE)
    data = tmp_path / "t.txt"
    data.write_text("Time flies like an arrow. " * 80)
    out = tmp_path / "profiled"
    seq = [] if "--seq-len" in extra else ["--seq-len", str(T)]
    capsys.readouterr()
    args = ["profile", str(folder), "--data", str(data), "--out", str(out), "--batches", "1", *seq, *extra]
    assert main(args) == 2
    lines = capsys.readouterr().err.splitlines()
    err = [line for line in lines if line.strip() and not line.startswith(("Loading", "Writing"))]
    assert len(err) == 1 and err[0].startswith("aah-viz: error: ") and says in err[0], err
    assert not out.exists() or not (out / "head_retrieval").exists()


def test_windows_page_shows_the_heads_the_check_needs(tmp_path, tiny_causal_lm, monkeypatch):
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.figures.payload import figure_data

    folder = tiny_causal_lm(tmp_path / "llama", **SHAPE)
    data = tmp_path / "t.txt"
    data.write_text("Time flies like an arrow; fruit flies like a banana. " * 40)
    logs = tmp_path / "logs"
    args = ["profile", str(folder), "--data", str(data), "--out", str(logs / "heads"), "--seq-len", str(T)]
    assert main([*args, "--windows", "16,64,128,384", "--batches", "1", "--retrieval", "1", "--no-progress"]) == 0
    table = load_run(logs / "heads").table("head_retrieval")
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page("aah_viz/dashboard/views/windows.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Which heads the passkey check needs" in s.value for s in at.subheader)
    losing = int((table["lost"] > 0).sum())
    assert any(f"{losing} of 8 heads lose at least one" in c.value for c in at.caption)
    charts = [figure_data(c.proto.spec) for c in at.get("plotly_chart")]
    (fig,) = [c for c in charts if "cut to 16 tokens" in str(c["layout"].get("title", {}).get("text", ""))]
    lost = np.asarray(fig["data"][0]["z"], dtype=float)
    want = np.zeros((2, 4))
    want[table["layer"], table["head"]] = table["lost"]
    assert np.array_equal(lost, want)
