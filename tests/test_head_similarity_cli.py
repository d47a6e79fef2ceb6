"""``aah-viz head-similarity``: the table written into a run, from its tables or by measuring its model
on two halves of the data; the measurement against the project's own profile and feature code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from aah_viz.analysis import head_similarity as hs
from aah_viz.cli import main
from aah_viz.cli._json import json_text
from aah_viz.runlog import load_run, validate_run

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_logs" / "full_adaptive_seed0"


def _refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_a_probed_run_without_a_model_is_compared_from_its_tables(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    args = ["head-similarity", str(run), "--no-progress", "--agreement-samples", "99", "--null-samples", "50"]
    assert main(args) == 0
    assert validate_run(run) == []
    table = load_run(run).table("head_similarity")
    n_layer = load_run(run).n_layer
    # attention (the probe's distance rows) and probe: 2 groupings x 2 procedures + 1 pair x 2, per layer
    assert len(hs.groupings(table)) == n_layer * 4 and len(hs.agreements(table)) == n_layer * 2
    assert set(table["stability"].dropna()) == {hs.UNDEFINED}  # no halves without a model
    assert "no halves measured" in table["reason"].iloc[0]
    out = capsys.readouterr().out
    assert "attention: real in" in out and "stability not measured" in out
    assert main(args + ["--json"]) == 0  # again: the step's rows are replaced, not added
    printed = json.loads(capsys.readouterr().out, parse_constant=_refuse)  # strict JSON, for jq and others
    assert {r["similarity"] for r in printed["summary"]} == set(hs.summary(table)["similarity"])
    assert json_text({"margin": float("nan")}) == '{"margin": null}'  # a layer never judged has no margin
    assert len(load_run(run).table("head_similarity")) == len(table)
    # exported: one row per (layer, similarity) of the method's procedure, in every format
    out = tmp_path / "export"
    for fmt, ext in (("csv", "csv"), ("md", "md"), ("latex", "tex")):
        assert main(["export", str(run), "--table", "head_similarity", "--format", fmt, "--out", str(out)]) == 0
        assert (out / f"head_similarity.{ext}").stat().st_size > 0
    import pandas as pd

    exported = pd.read_csv(out / "head_similarity.csv")
    mine = hs.groupings(table)
    mine = mine[mine["procedure"] == "method"]
    assert len(exported) == len(mine)
    for _, r in mine.iterrows():
        e = exported[(exported["layer"] == r["layer"]) & (exported["similarity"] == r["similarity"])].iloc[0]
        assert e["verdict"] == r["verdict"] and np.isclose(e["silhouette"], r["silhouette"], equal_nan=True)
    assert "\\begin{table}" in (out / "head_similarity.tex").read_text()
    # the summary form: one row per similarity, its counts of layers taken here from the per-layer rows
    assert main(["export", str(run), "--table", "head_similarity_summary", "--format", "csv", "--out", str(out)]) == 0
    summary = pd.read_csv(out / "head_similarity_summary.csv").set_index("similarity")
    assert sorted(summary.index) == sorted(exported["similarity"].unique())
    for name, rows in exported.groupby("similarity"):
        assert summary.loc[name, "layers"] == len(rows)
        assert summary.loc[name, "real"] == int((rows["verdict"] == "real").sum())
    assert main(["export", str(run), "--table", "head_similarity_summary", "--format", "latex", "--out", str(out)]) == 0
    assert len(summary) < len(exported) and "\\begin{table}" in (out / "head_similarity_summary.tex").read_text()


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["head-similarity", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["head-similarity", str(SAMPLE), "--blocks", "0"]) == 2
    assert "--blocks must be at least 1" in capsys.readouterr().err
    empty = tmp_path / "empty"
    shutil.copytree(SAMPLE, empty, ignore=shutil.ignore_patterns("probe_*", "head_spans"))
    assert main(["head-similarity", str(empty), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to compare" in err


@pytest.mark.torch
def test_a_trained_run_is_measured_on_two_halves(tmp_path, capsys):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    train = ["train", "--out", str(run), "--preset", "tiny", "--steps", "6", "--n-docs", "40", "--no-progress"]
    assert main(train) == 0
    args = ["head-similarity", str(run), "--blocks", "4", "--batch-size", "1", "--max-docs", "4", "--no-progress"]
    assert main(args + ["--agreement-samples", "99", "--null-samples", "50", "--refit-samples", "20"]) == 0
    assert validate_run(run) == []
    table = load_run(run).table("head_similarity")
    rows = hs.groupings(table)
    assert set(rows["similarity"]) == set(hs.SIMILARITIES)
    assert set(table["step"]) == {5}  # the newest checkpoint
    assert (rows["stability"] != hs.UNDEFINED).any()  # halves measured: stability judged somewhere
    assert "measured on two halves" in capsys.readouterr().out


@pytest.mark.torch
def test_the_measurement_is_the_profiles_span_and_the_methods_features(tmp_path):
    """span equals ``aah-viz profile``'s head_spans on the same blocks; the features of all blocks equal
    the method's ``head_features`` of the concatenated q, k, v with the forwards' mean statistics."""
    torch = pytest.importorskip("torch")
    from instrumentation import AAHConfig, AAHTransformer
    from instrumentation.backends.dense_masked import dense_masked_attention
    from instrumentation.backends.stats import bucket_head_stats
    from instrumentation.measure.head_measures import measure_decoder
    from instrumentation.measure.profile import profile_heads
    from instrumentation.model import model_logits
    from instrumentation.routing.features import head_features

    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny")).eval()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 256, (2, 64), generator=g), None) for _ in range(4)]
    got = measure_decoder(model, model, batches, logits_fn=model_logits, candidate_windows=model.cfg.windows)
    rows, _ = profile_heads(model, model, batches, logits_fn=model_logits)
    for layer in range(model.cfg.n_layer):
        for w_idx, w in enumerate(model.cfg.windows):
            sel = [i for i, (lay, win) in enumerate(zip(rows["layer"], rows["window"])) if lay == layer and win == w]
            want = np.array([rows["mass_share"][i] for i in sel])
            assert np.allclose(got["span"].all[layer, :, w_idx], want, atol=1e-9)
    # the features: q, k, v of every forward kept by an attend of our own, then the method's function
    kept = {i: [] for i in range(model.cfg.n_layer)}
    layers = model.attention_layers()

    def make(layer):
        def attend(q, k, v, *, need_probs=False, scale=None):
            res = dense_masked_attention(q, k, v, [q.shape[2]] * q.shape[1], scale=scale, need_probs=True)
            kept[layer.layer_index].append((q, k, v, torch.stack(bucket_head_stats(res.probs, res.out), dim=1)))
            return res.out, (res.probs if need_probs else None)

        return attend

    for layer in layers:
        layer.attend = make(layer)
    try:
        with torch.no_grad():
            for x, _ in batches:
                model_logits(model, x)
    finally:
        for layer in layers:
            layer.__dict__.pop("attend", None)
    for layer, parts in kept.items():
        q, k, v = (torch.cat([p[j] for p in parts], dim=0) for j in range(3))
        stats = torch.stack([p[3] for p in parts]).mean(dim=0)
        want = head_features(q, k, v, stats).numpy()
        assert np.allclose(got["features"].all[layer], want, rtol=1e-5, atol=1e-6)
    halves = got["features"].halves
    assert halves is not None and not np.allclose(halves[0], halves[1])


@pytest.mark.torch
def test_a_retrofitted_model_folder_is_measured_as_aah_viz_profile_measures_it(tmp_path, tiny_causal_lm):
    """A Hugging Face causal model, patched: its span equals ``aah-viz profile``'s head_spans on the same
    blocks (the patched attention hands the measurement its padding mask too)."""
    torch = pytest.importorskip("torch")
    from instrumentation.measure.evaluation import load_for_evaluation
    from instrumentation.measure.head_measures import measure_decoder
    from instrumentation.measure.profile import profile_heads
    from instrumentation.model import model_logits

    folder = tiny_causal_lm(tmp_path / "llama")
    loaded = load_for_evaluation(folder, regime="full_adaptive", windows=[8, 16, 32], overrides={}, device="cpu")
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 300, (2, 32), generator=g), None) for _ in range(4)]
    windows = loaded.routed.cfg.windows
    got = measure_decoder(loaded.model, loaded.routed, batches, logits_fn=model_logits, candidate_windows=windows)
    rows, _ = profile_heads(loaded.model, loaded.routed, batches, logits_fn=model_logits)
    n_layer = len(loaded.routed.attention_layers())
    assert got["span"].all.shape[:2] == (n_layer, 4)
    for layer in range(n_layer):
        for w_idx, w in enumerate(windows):
            sel = [i for i, (lay, win) in enumerate(zip(rows["layer"], rows["window"])) if lay == layer and win == w]
            want = np.array([rows["mass_share"][i] for i in sel])
            assert np.allclose(got["span"].all[layer, :, w_idx], want, atol=1e-6)


@pytest.mark.torch
def test_a_model_folder_spans_the_windows_of_the_measured_length(tmp_path, tiny_causal_lm):
    """A model folder measured on blocks of T tokens: span over T/8, T/4, T/2, T (the paper's 512..4096
    would hold every head's whole mass at T = 32, so every head would look alike), or over --windows."""
    pytest.importorskip("torch")
    from instrumentation import measure_heads

    folder = tiny_causal_lm(tmp_path / "llama")
    text = tmp_path / "t.txt"
    text.write_text(" ".join(f"word{i % 37}" for i in range(3000)))
    kw = dict(model_dir=folder, data=text, blocks=4, batch_size=2, seq_len=32)
    inputs, _ = measure_heads(tmp_path / "run", **kw)
    span = inputs["span"].all  # (layer, head, window): mass within each window
    assert span.shape[-1] == 4 and np.allclose(span[..., -1], 1.0)
    assert (span[..., 0] < 1 - 1e-6).all()  # a 4-token window cuts every head short at T = 32
    assert np.ptp(span[..., 0], axis=1).max() > 1e-4  # heads differ
    given, _ = measure_heads(tmp_path / "run", windows=(16, 32), **kw)
    assert given["span"].all.shape[-1] == 2 and np.allclose(given["span"].all[..., 0], span[..., 2], atol=1e-6)


def test_every_trained_sample_holds_the_table_its_probe_tables_give(tmp_path, capsys):
    """scripts/make_sample_logs.sh groups every trained run's heads from its probe tables; the committed
    samples hold that table (so "Do head groups mean anything?" has something to show), and one of them
    is what the command computes again from the run."""
    trained = sorted((REPO / "sample_logs").glob("*_seed?"))
    assert len(trained) == 14
    without = [r.name for r in trained if "head_similarity" not in load_run(r).tables()]
    assert without == []
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns("head_similarity"))
    assert main(["head-similarity", str(run), "--tables-only", "--no-progress"]) == 0
    capsys.readouterr()
    again, kept = (load_run(r).table("head_similarity") for r in (run, SAMPLE))
    order = ["layer", "procedure", "similarity", "other"]
    again, kept = (t.sort_values(order, na_position="first").reset_index(drop=True) for t in (again, kept))
    assert list(again["verdict"].fillna("")) == list(kept["verdict"].fillna(""))
    assert again["labels"].map(list).tolist() == kept["labels"].map(list).tolist()
    for col in ("silhouette", "ari", "mantel_rho"):
        assert np.allclose(again[col].astype(float), kept[col].astype(float), rtol=1e-5, equal_nan=True), col
