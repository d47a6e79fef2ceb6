"""The token lens (issue 39): what a head reads on real text and what its window cuts.

The stored weights are checked against an independent attention computation (the unpatched model's
own eager attention), the masses against the weights, the links against the gold annotation read
by hand, and the page's token view against hostile text.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aah_viz.analysis import lens
from aah_viz.dashboard.lens_view import token_html

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "aah_viz" / "data" / "english_fixture.conllu"
TEXT = (
    "The committee met on Tuesday and agreed to publish the report. It said the data were clear.\n\n"
    "A second paragraph follows here, with words enough to fill a block of bytes for the model."
)


def _causal_probs(rng, L: int, H: int, T: int) -> np.ndarray:
    raw = rng.random((L, H, T, T)) ** 3
    raw = np.tril(raw)
    return raw / raw.sum(-1, keepdims=True)


def test_attention_rows_against_a_direct_count():
    rng = np.random.default_rng(0)
    L, H, T, k = 2, 3, 9, 4
    probs = _causal_probs(rng, L, H, T)
    windows = np.array([[2, 4, 9], [1, 3, 5]])
    for kept in (0, 2):  # without and with sink_tokens = 2 (the first two keys never cut)
        _check_rows(probs, windows, k, kept)


def _check_rows(probs, windows, k: int, kept: int) -> None:
    L, H, T, _ = probs.shape
    rows = lens.attention_rows(probs, windows, top_k=k, sink=2, kept=kept)
    assert len(rows["query"]) == L * H * T
    i = 0
    for layer in range(L):
        for head in range(H):
            for q in range(T):
                p, w = probs[layer, head, q], int(windows[layer, head])
                visible = list(range(q + 1))
                want = sorted(visible, key=lambda j: (-p[j], -j))[: min(k, q + 1)]
                assert rows["keys"][i] == want
                assert np.allclose(rows["weights"][i], [p[j] for j in want])
                assert rows["window"][i] == w
                cut = sum(p[j] for j in visible if q - j >= w and j >= kept)
                assert rows["mass_outside"][i] == pytest.approx(cut, abs=1e-12)
                assert rows["mass_sink"][i] == pytest.approx(sum(p[j] for j in visible if j < 2))
                i += 1


def test_equal_weights_keep_the_nearer_key_first():
    probs = np.zeros((1, 1, 4, 4))
    probs[0, 0] = np.tril(np.ones((4, 4)))
    probs[0, 0] /= probs[0, 0].sum(-1, keepdims=True)
    rows = lens.attention_rows(probs, np.array([[4]]), top_k=2)
    assert rows["keys"][3] == [3, 2] and rows["keys"][0] == [0]


def test_the_distance_map_bins_the_stored_weights():
    import pandas as pd

    samples = pd.DataFrame(
        {
            "doc": [0, 0, 0],
            "layer": [0, 0, 1],
            "head": [1, 1, 0],
            "query": [3, 5, 5],
            "keys": [[3, 0], [1, 4], [5]],
            "weights": [[0.5, 0.25], [0.6, 0.3], [1.0]],
        }
    )
    matrix, labels = lens.distance_map(samples, 0, n_layer=2, n_head=2)
    assert labels == ["0", "1", "2-3", "4-5"]
    # L0H1: query 3 puts 0.5 at distance 0, 0.25 at 3; query 5 puts 0.6 at 4, 0.3 at 1 (mean of two queries)
    assert np.allclose(matrix[1], [0.25, 0.15, 0.125, 0.3])
    assert np.allclose(matrix[2], [1.0, 0, 0, 0]) and not matrix[0].any() and not matrix[3].any()


def test_the_token_view_keeps_hostile_text_as_text():
    import pandas as pd

    hostile = ["<script>alert(1)</script>", "<a href='https://example.com'>x</a>", "</script><img src=x>", " & "]
    tokens = pd.DataFrame({"token": hostile, "special": [False] * 4})
    rows = pd.DataFrame(
        {
            "query": [0, 1, 2, 3],
            "keys": [[0], [1, 0], [2], [3, 0]],
            "weights": [[1.0], [0.5, 0.5], [1.0], [0.7, 0.3]],
            "window": [4] * 4,
            "mass_outside": [0.0] * 4,
            "mass_sink": [1.0, 0.5, 0.0, 0.3],
        }
    )
    page = token_html(tokens, rows, pd.DataFrame(columns=["query", "key", "kind", "label", "gold"]), 3)
    body = page.split("<script", 1)[0]
    assert "<script>alert" not in page and "<a href" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    data = page.split("<script type='application/json' id='lens-data'>", 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["rows"]["3"] == {"k": [3, 0], "w": [0.7, 0.3], "win": 4, "out": 0.0, "sink": 0.3}


# ---- recorded from real models ------------------------------------------------------------------

torch_needed = pytest.mark.torch


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aah_viz", *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def retrofit_run(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from conftest import save_tiny_causal_lm

    root = tmp_path_factory.mktemp("lens")
    model = save_tiny_causal_lm(root / "llama", attn="eager")
    data = root / "t.txt"
    data.write_text(TEXT * 6)
    run = root / "adapted"
    proc = _cli(
        "retrofit", str(model), "--data", str(data), "--out", str(run), "--steps", "2", "--seq-len", "48",
        "--windows", "4,8,16,32", "--no-progress", "--threads", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the manifest names the length it trained at (not the largest window), so its ACR checks out
    assert json.loads((run / "manifest.json").read_text())["seq_len"] == 48
    return root, model, run


@torch_needed
def test_lens_weights_equal_the_models_own_eager_attention(retrofit_run):
    import torch
    import transformers

    from aah_viz.runlog import load_run, validate_run

    root, model_dir, run = retrofit_run
    text = root / "doc.txt"
    text.write_text(TEXT)
    proc = _cli("lens", str(run), "--text", str(text), "--docs", "2", "--max-tokens", "40", "--top-k", "40")
    assert proc.returncode == 0, proc.stderr
    assert validate_run(run) == []
    r = load_run(run)
    t = lens.lens_tables(r)
    tokens = lens.doc_tokens(t, 0)
    ids = list(TEXT.split("\n\n")[0].encode()[:40])  # the tiny model has no tokenizer: bytes, no BOS
    assert "".join(tokens["token"]) == bytes(ids).decode()
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        att = base(torch.tensor([ids]), output_attentions=True).attentions  # full causal attention
    samples = t["attention_samples"]
    heads = r.table("heads")
    last = heads[heads["step"] == heads["step"].max()]
    for layer in range(2):
        for head in range(4):
            rows = lens.head_rows(samples, 0, layer, head)
            full = att[layer][0, head].double().numpy()
            assert len(rows) == 40
            for row in rows.itertuples():
                q = int(row.query)
                assert sorted(row.keys) == list(range(q + 1))  # top-k of 40 keeps every visible key
                assert np.allclose(row.weights, full[q, list(row.keys)], atol=2e-5)
                w = int(row.window)
                assert row.mass_outside == pytest.approx(full[q, : max(0, q - w + 1)].sum(), abs=2e-5)
                assert row.mass_sink == pytest.approx(full[q, 0], abs=2e-5)
            # the window executed is the adapter's, as the run recorded it
            want = last[(last["layer"] == layer) & (last["head"] == head)]["window"]
            assert set(rows["window"]) == {int(want.iloc[0])}


@torch_needed
def test_lens_of_a_trained_aah_run_with_gold_arcs(tmp_path):
    from aah_viz.runlog import load_run

    run = tmp_path / "run"
    common = ["--preset", "tiny", "--steps", "4", "--n-docs", "24", "--no-progress", "--threads", "1"]
    # a model that keeps its first two positions besides every window (sink_tokens): never cut
    assert _cli("train", "--out", str(run), *common, "--set", "sink_tokens=2").returncode == 0
    proc = _cli("lens", str(run), "--syntax", str(FIXTURE), "--docs", "2", "--max-tokens", "64", "--top-k", "3")
    assert proc.returncode == 0, proc.stderr
    r = load_run(run)
    t = lens.lens_tables(r)
    tokens = lens.doc_tokens(t, 0)
    sentence = "".join(tokens["token"])
    # the fixture's first sentence, read by hand: "The old man saw a dog in the park ."
    assert sentence.startswith("The old man saw")
    links = lens.doc_links(t, 0)
    by_label: dict = {}  # the first arc of each relation
    for row in links.itertuples():
        by_label.setdefault(row.label, (row.query, row.key, row.query_is_head))
    first = {w: sentence.index(w) for w in ("The", "old", "man", "saw")}
    assert by_label["det"] == (first["man"], first["The"], True)  # man -> The: the query is the head
    assert by_label["nsubj"] == (first["saw"], first["man"], True)
    samples = t["attention_samples"]
    assert samples["keys"].map(len).max() == 3
    # the masses come from the whole row: at least the weights of the stored keys they cover
    (lens_event,) = [json.loads(d) for d in r.events("lens")["detail"]]
    assert (lens_event["sink_tokens"], lens_event["sink_positions"]) == (2, 2)
    assert (samples["query"] >= samples["window"]).any()  # some queries reach past their window
    for row in samples.itertuples():
        cut = sum(w for k, w in zip(row.keys, row.weights) if row.query - k >= row.window and k >= 2)
        on_first = sum(w for k, w in zip(row.keys, row.weights) if k < 2)
        assert row.mass_outside >= cut - 1e-6 and row.mass_sink >= on_first - 1e-6
        assert 0.0 <= row.mass_outside <= 1.0 - row.mass_sink + 1e-6 or row.query < row.window
    # a second lens of the same step replaces the first, links included
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    assert _cli("lens", str(run), "--text", str(text), "--docs", "1").returncode == 0
    t = lens.lens_tables(load_run(run))
    assert set(t["lens_tokens"]["source"]) == {"text"} and t["lens_links"].empty


@torch_needed
def test_the_tokens_figure_draws_a_query_as_svg(retrofit_run):
    pytest.importorskip("kaleido")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian chromium is not installed (./dev test installs it)")
    root, _, run = retrofit_run
    text = root / "hostile.txt"
    text.write_text("<b>bold</b> words <a href='x'>link</a> and more words to read here")
    assert _cli("lens", str(run), "--text", str(text), "--docs", "1").returncode == 0
    out = root / "tokens.svg"
    proc = _cli("figure", str(run), "--kind", "tokens", "--opt", "doc=0,layer=1,head=2,query=20", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    svg = out.read_text()
    assert "L1H2 from token 20" in svg and "<a " not in svg.split("<svg", 1)[1]
    proc = _cli("figure", str(run), "--kind", "tokens", "--opt", "doc=3", "--out", str(out))
    assert proc.returncode == 2 and "has no document 3" in proc.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--text", "absent.txt"], "absent.txt"),
        (["--text", "doc.txt", "--docs", "0"], "--docs 0"),
        (["--text", "doc.txt", "--max-tokens", "100000"], "positions"),
    ],
)
@torch_needed
def test_bad_input_is_one_line(retrofit_run, args, words):
    root, _, run = retrofit_run
    (root / "doc.txt").write_text(TEXT)
    proc = _cli("lens", str(run), *args, "--no-progress", cwd=root)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr


@torch_needed
def test_a_run_without_a_model_is_refused(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    run = REPO / "sample_logs" / "full_adaptive_seed0"
    if not run.is_dir():
        pytest.skip("the bundled sample logs are not in this checkout")
    (tmp_path / "t.txt").write_text(TEXT)
    proc = _cli("lens", str(run), "--text", str(tmp_path / "t.txt"))
    assert proc.returncode == 2 and "no checkpoint or adapter" in proc.stderr


LENS_PAGE_WITHOUT_TORCH = """
import json, os, sys
sys.path.insert(0, {tests!r})
from test_light_side import HIDE_TORCH
exec(HIDE_TORCH)
os.environ["AAH_VIZ_LOGS"] = {logs!r}
from streamlit.testing.v1 import AppTest
from aah_viz.dashboard.app import PAGE_DIR, PAGE_FILES
at = AppTest.from_file(str(PAGE_DIR / "app.py"), default_timeout=600)
at.run()
at.switch_page(PAGE_FILES["lens"]).run()
print(json.dumps({{
    "problems": [str(e.value) for e in list(at.exception) + list(at.error)],
    "subheaders": [s.value for s in at.subheader],
    "captions": [c.value for c in at.caption],
    "torch": "torch" in sys.modules,
}}))
"""


def test_the_lens_page_draws_from_the_tables_alone_without_torch(tmp_path):
    from aah_viz.samples import add_synthetic_lens, make_synthetic_run

    logs = tmp_path / "logs"
    from test_figures_registry import add_probe_tables, probe_value

    run = make_synthetic_run(logs / "toy", n_layer=2, n_head=3, steps=20, seed=0)
    add_probe_tables(run, 2, 3, 19)  # head (l, h) scores uas l/10 + h/100 on syntax
    add_synthetic_lens(run, 19, 2, 3)  # every head at a 4-token window
    code = LENS_PAGE_WITHOUT_TORCH.format(tests=str(Path(__file__).parent), logs=str(logs))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["problems"] == [] and result["torch"] is False
    assert result["subheaders"][:2] == ["L0H0", "Heads × distance on this document"]
    assert any("executes a 4-token window on this document" in c for c in result["captions"]), result["captions"]
    # the document's first-token share is said to be a mean over its queries (the pinned query has its own)
    assert any("its queries put" in c and "of their full-attention mass on the first token, on average" in c
               for c in result["captions"]), result["captions"]  # fmt: skip
    # the head's own probe scores for the kind of link the document carries (syntax here)
    want = (
        "L0H0 in the run's syntax probe (aah-viz probe, all its data): unlabelled attachment score 0.000, "
        "score minus offset baseline "
    )
    shown = [c.replace("\\", "") for c in result["captions"]]  # Markdown escapes of the shown text
    assert want + f"{probe_value(0, 0):.3f}" in shown, shown


def test_the_page_bench_takes_a_logs_root_and_pages(tmp_path):
    proc = _cli("bench", "dashboard", "--logs", str(tmp_path))
    assert proc.returncode == 2 and "add --pages" in proc.stderr
    proc = _cli("bench", "dashboard", "--pages", "--logs", str(tmp_path), "--page", "nope")
    assert proc.returncode == 2 and "--page nope: not a page" in proc.stderr
    from aah_viz.cli import main
    from aah_viz.cli.bench_dashboard import address_query

    assert main(["bench", "dashboard", "--address", "run=x"]) == 2  # --address opens pages: needs --pages
    assert main(["bench", "dashboard", "--pages", "--logs", str(tmp_path), "--address", "layer"]) == 2
    assert address_query("http://127.0.0.1:8501/lens?run=a%2Fb&lens_vs=c%230") == {"run": "a/b", "lens_vs": "c#0"}


def test_coreference_documents_link_each_pronoun_to_its_antecedent_and_other_candidates():
    from aah_viz.probes.lens_docs import coref_docs

    (doc,) = coref_docs(REPO / "aah_viz" / "data" / "synthetic_probe.coref.jsonl", 1)
    assert doc.text.startswith("Ivan is gentle. The old farmers are green.")
    first_he = doc.text.index(" He is young") + 1
    word = {span: i for i, span in enumerate(doc.words)}
    he = word[(first_he, first_he + 2)]
    mine = [link for link in doc.links if link.a == he]
    # read by hand: "He" is Ivan (the nearest earlier name of its entity); "The old farmers" is another entity
    assert [(doc.words[link.b], link.label, link.gold) for link in mine] == [
        ((0, 4), "antecedent", True),
        ((16, 31), "other", False),
    ]


def test_gap_rows_link_the_pronoun_to_both_names():
    import csv

    from aah_viz.probes.lens_docs import coref_docs

    path = REPO / "aah_viz" / "data" / "gap_sample.tsv"
    row = next(csv.DictReader(path.open(), delimiter="\t"))
    (doc,) = coref_docs(path, 1)
    spans = {r: (int(row[f"{c}-offset"]), int(row[f"{c}-offset"]) + len(row[c])) for r, c in
             (("pronoun", "Pronoun"), ("A", "A"), ("B", "B"))}  # fmt: skip
    got = {link.label: (doc.words[link.a], doc.words[link.b], link.gold) for link in doc.links}
    assert got == {
        "A": (spans["pronoun"], spans["A"], row["A-coref"].upper() == "TRUE"),
        "B": (spans["pronoun"], spans["B"], row["B-coref"].upper() == "TRUE"),
    }


@torch_needed
def test_sigterm_stops_the_lens_between_documents_keeping_the_finished_ones(retrofit_run):
    """A real SIGTERM at a set point (once the first of two documents is done): the first is kept in the
    run's .lens-progress, nothing else of the run changes, and the same lens given the same progress
    continues with the second, ending with the rows of an uninterrupted lens."""
    import os
    import signal

    from aah_viz.probes.lens_docs import text_docs
    from instrumentation import lens_progress, load_for_evaluation, record_lens
    from instrumentation.measure.lens import LensInterrupted

    root, _, run = retrofit_run
    (root / "two.txt").write_text(TEXT)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    loaded = load_for_evaluation(run)
    docs = text_docs(root / "two.txt", 2)
    whole = record_lens(loaded, docs, max_tokens=32)
    with pytest.raises(LensInterrupted, match="stopped by SIGTERM after 1 of 2 documents: nothing kept"):
        record_lens(loaded, docs, max_tokens=32, progress=lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is put back
    saved = lens_progress(loaded, docs, max_tokens=32, top_k=8)
    with pytest.raises(LensInterrupted, match="stopped by SIGTERM after 1 of 2 documents; the finished ones"):
        record_lens(loaded, docs, max_tokens=32, progress=lambda: os.kill(os.getpid(), signal.SIGTERM), saved=saved)
    assert sorted(p.relative_to(run) for p in run.rglob("*") if ".lens-progress" not in p.parts) == before
    counted = []
    again = lens_progress(loaded, docs, max_tokens=32, top_k=8)
    assert again.saved() == 1
    assert record_lens(loaded, docs, max_tokens=32, progress=lambda: counted.append(1), saved=again) == whole
    assert len(counted) == 2  # the saved document counts on the bar, then the second
    again.clear()
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_figure_options_take_comma_separated_pairs_and_keep_commas_in_a_value():
    from aah_viz.cli.figure import _parse_opts

    assert _parse_opts(["doc=2,layer=14", "head=3"]) == {"doc": 2, "layer": 14, "head": 3}
    assert _parse_opts(["metrics=final_loss,final_acr,layer=1"]) == {"metrics": "final_loss,final_acr", "layer": 1}


@torch_needed
@pytest.mark.slow  # a model folder's lens twice (about a minute); the toy lens tests cover the lens itself
def test_a_model_folders_lens_is_the_full_attention_beside_the_adapted_windows(retrofit_run, monkeypatch):
    """``aah-viz lens MODEL_DIR --out DIR``: the unpatched model's attention on the same document, in a run
    of its own; the Lens page offers it side by side with the adapted run's lens of that document."""
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.dashboard.app import PAGE_FILES
    from aah_viz.runlog import load_run, validate_run

    root, model_dir, run = retrofit_run
    (root / "one.txt").write_text(TEXT)
    coref = REPO / "aah_viz" / "data" / "synthetic_probe.coref.jsonl"
    common = ["--text", str(root / "one.txt"), "--coref", str(coref), "--docs", "1", "--max-tokens", "96",
              "--top-k", "40", "--no-progress"]  # fmt: skip
    for args, words in (
        ([str(model_dir)], "give --out DIR"),
        ([str(run), "--out", str(root / "elsewhere")], "--out is for a Hugging Face model folder's lens"),
        ([str(model_dir), "--out", str(root / "x"), "--checkpoint", "1"], "--checkpoint is for a run's lens"),
        ([str(model_dir), "--out", str(run)], "already exists"),
    ):
        proc = _cli("lens", *args, *common)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert _cli("lens", str(run), *common).returncode == 0
    full = root / "full-attention"
    proc = _cli("lens", str(model_dir), *common, "--out", str(full))
    assert proc.returncode == 0, proc.stderr
    assert validate_run(full) == []
    manifest = json.loads((full / "manifest.json").read_text())
    assert manifest["evaluation_of"] == str(model_dir) and manifest["regime"] == "full_attention"
    # its step 0: the windows full attention executes on the longest document (the coreference one: 96), ACR 1
    assert manifest["seq_len"] == 96 and set(load_run(full).table("heads")["window"]) == {96}
    assert load_run(full).scalar("acr")["value"].tolist() == [1.0]
    (event,) = [json.loads(d) for d in load_run(full).events("lens")["detail"]]
    assert event["regime"] == "full_attention" and event["data"] == f"{root / 'one.txt'}, {coref}"
    adapted, plain_model = lens.lens_tables(load_run(run)), lens.lens_tables(load_run(full))
    for doc in (0, 1):
        assert list(lens.doc_tokens(plain_model, doc)["token"]) == list(lens.doc_tokens(adapted, doc)["token"])
    # the coreference document's links on tokens (bytes, no start token), read by hand: "He" (position 83)
    # refers to "Ivan" (0); "The old farmers" (16) is another entity
    for t in (adapted, plain_model):
        links = lens.doc_links(t, 1)
        assert sorted((r.query, r.key, r.label, r.gold) for r in links.itertuples()) == [
            (83, 0, "antecedent", True),
            (83, 16, "other", False),
        ]
    a, f = (t["attention_samples"].sort_values(["layer", "head", "query"]) for t in (adapted, plain_model))
    # the adapter trains the AAH parameters only: full attention reads what the adapted run's full pass read
    assert np.allclose(np.concatenate(list(a["weights"])), np.concatenate(list(f["weights"])), atol=1e-6)
    assert (f["window"] > f["query"]).all() and (f["mass_outside"] == 0).all()  # nothing cut
    assert (a["mass_outside"] > 0.01).any()  # where the adapted windows cut
    monkeypatch.setenv("AAH_VIZ_LOGS", str(root))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.query_params.update({"run": run.name, "layer": "1", "head": "2", "query": "39"})
    at.run()
    at.switch_page(PAGE_FILES["lens"]).run()
    assert not at.exception, [e.value for e in at.exception]
    beside = at.selectbox(key="lens_vs")
    assert beside.options[1].startswith("full_attention") and full.name in beside.options[1]
    beside.select_index(1).run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert any(c.startswith("full_attention") and "sees every earlier token" in c for c in captions), captions


SMOLLM2 = REPO / "sample_logs" / "smollm2_wikitext"


@pytest.mark.skipif(not (SMOLLM2 / "lens-full_attention").is_dir(), reason="the SmolLM2 sample is not in this checkout")
def test_the_smollm2_sample_holds_full_attention_beside_the_adapted_windows_in_3_mb():
    from aah_viz.runlog import load_run

    adapted_dir, full_dir = SMOLLM2 / "frontier-full_adaptive", SMOLLM2 / "lens-full_attention"
    files = [f for t in lens.LENS_TABLE_NAMES for f in (adapted_dir / t).iterdir()]
    files += [f for f in full_dir.rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) < 3_000_000
    adapted, full = lens.lens_tables(load_run(adapted_dir)), lens.lens_tables(load_run(full_dir))
    docs = sorted(adapted["lens_tokens"]["doc"].unique())
    assert docs == sorted(full["lens_tokens"]["doc"].unique()) and len(docs) == 4
    for doc in docs:  # the same documents, token for token: the page puts them side by side
        assert list(lens.doc_tokens(adapted, doc)["token"]) == list(lens.doc_tokens(full, doc)["token"])
    a, f = (t["attention_samples"] for t in (adapted, full))
    assert (f["window"] > f["query"]).all() and (f["mass_outside"] == 0).all()
    assert (a["mass_outside"] > 0.5).any()  # what the adapted windows cut (the first-token sink, docs/lens.md)
    # the toy sample keeps the lens scripts/make_sample_logs.sh records
    toy = lens.lens_tables(load_run(REPO / "sample_logs" / "full_adaptive_seed0"))
    assert set(toy["lens_tokens"]["source"]) == {"syntax", "coref"}


def test_a_relation_picked_on_the_lens_page_draws_its_arcs_and_counts_the_heads_reading(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.dashboard.app import PAGE_FILES
    from aah_viz.figures.payload import figure_data
    from aah_viz.runlog import load_run
    from aah_viz.samples import add_synthetic_lens, make_synthetic_run

    logs = tmp_path / "logs"
    run = make_synthetic_run(logs / "toy", n_layer=2, n_head=3, steps=20, seed=0)
    add_synthetic_lens(run, 19, 2, 3)  # one nsubj arc, from token 9 to token 5
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["lens"]).run()
    at.selectbox(key="layer_picker").set_value(1).run()
    at.selectbox(key="head_picker").set_value(2).run()
    at.selectbox(key="lens_relation").set_value("nsubj").run()
    assert not at.exception, [e.value for e in at.exception]
    samples = load_run(run).table("attention_samples")
    at9 = samples[(samples["layer"] == 1) & (samples["head"] == 2) & (samples["query"] == 9)]
    strongest = int(at9["keys"].iloc[0][0])  # the head's largest weight from token 9, read from the table
    hits = int(strongest == 5)
    assert any(f"nsubj: 1 gold arcs in this document; from the later end of {hits} of 1, L1H2" in c.value
               for c in at.caption), [c.value for c in at.caption]  # fmt: skip
    figs = [figure_data(c.proto.spec) for c in at.get("plotly_chart")]
    (tokens_fig,) = [f for f in figs if str(f["layout"].get("title", {}).get("text", "")).startswith("L1H2 from")]
    (arc,) = [t for t in tokens_fig["data"] if t.get("name") == "nsubj: every gold arc"]
    assert [v for v in arc["x"] if v is not None][0] == 9 % 16  # the arc starts at token 9
    assert at.query_params.get("rel") in ("nsubj", ["nsubj"])


def test_the_tokens_figure_marks_the_sink_the_query_and_the_cut_keys():
    import pandas as pd

    from aah_viz.figures.lens import tokens_figure

    tokens = pd.DataFrame({"token": list("abcdefghij")})
    row = {"query": 7, "keys": [0, 6, 2], "weights": [0.5, 0.3, 0.2], "window": 3, "mass_outside": 0.7}
    fig = tokens_figure(tokens, row, pd.DataFrame(columns=["query", "key", "kind", "label", "gold"]), "t", kept=1)
    marks = fig.data[0].marker
    colours, widths = list(marks.line.color), list(marks.line.width)
    assert colours[0] == "#ff7f0e" and widths[0] == 3  # the sink: the first token outlined
    assert colours[7] == "#d62728" and widths[7] == 3  # the query framed
    assert all(c == "#cccccc" for j, c in enumerate(colours) if j not in (0, 7))
    (cut,) = [t for t in fig.data if str(t.name).startswith("cut by the 3-token window")]
    # keys 1..4 lie beyond the window (distance >= 3 from query 7); key 0 is kept as a sink
    assert list(cut.x) == [1, 2, 3, 4] and "70.0% of the mass" in cut.name
    assert list(marks.color) == [0.5, 0, 0.2, 0, 0, 0, 0.3, 0, 0, 0]


def test_a_large_models_distance_map_shows_the_block_of_layers_of_the_selected_one(tmp_path, monkeypatch):
    """10 layers of 8 heads (80 rows, more than a screen): the block of 9 layers holding the selected layer,
    every layer when asked (kept in the address); the rows are the map's own rows of those layers."""
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.dashboard.app import PAGE_FILES
    from aah_viz.figures.payload import figure_data
    from aah_viz.runlog import load_run
    from aah_viz.samples import add_synthetic_lens, make_synthetic_run

    logs = tmp_path / "logs"
    run = make_synthetic_run(logs / "wide", n_layer=10, n_head=8, steps=20, seed=0)
    add_synthetic_lens(run, 19, 10, 8)
    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page(PAGE_FILES["lens"]).run()
    assert not at.exception, [e.value for e in at.exception]

    def the_map():
        figs = [figure_data(c.proto.spec) for c in at.get("plotly_chart")]
        fig = next(f for f in figs if f["layout"]["title"]["text"].startswith("mean weight of each head"))
        return fig["data"][0]["y"], np.asarray(fig["data"][0]["z"], float), fig["layout"]["title"]["text"]

    full, _ = lens.distance_map(load_run(run).table("attention_samples"), 0, 10, 8)
    names, z, title = the_map()
    assert (names[0], len(names), title.endswith("(layers 0-8)")) == ("L0H0", 72, True)
    np.testing.assert_allclose(z, full[:72], rtol=1e-9)
    at.selectbox(key="layer_picker").set_value(9).run()  # the selected layer's block
    names, z, title = the_map()
    assert (names[0], len(names), title.endswith("(layer 9)")) == ("L9H0", 8, True)
    np.testing.assert_allclose(z, full[72:], rtol=1e-9)
    at.toggle(key="lens_map_all").set_value(True).run()
    names, z, _ = the_map()
    assert len(names) == 80 and at.query_params.get("mapall") in ("1", ["1"], "true", ["true"])
