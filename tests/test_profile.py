"""``aah-viz profile``: per-head attention mass inside each candidate window (the ``head_spans`` table)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from waiting import PATIENCE_S

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from aah_viz.cli import main  # noqa: E402
from aah_viz.runlog import load_run, validate_run  # noqa: E402
from instrumentation.data import cut_blocks  # noqa: E402
from instrumentation.measure.profile import distance_mass, needed_window  # noqa: E402

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[1]
TEXT = "Time flies like an arrow; fruit flies like a banana. " * 30


def _causal_probs(B, H, T, seed=0):
    scores = torch.randn(B, H, T, T, generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def test_window_share_from_distance_mass_equals_summing_the_band():
    B, H, T = 2, 3, 12
    probs = _causal_probs(B, H, T)
    cum = torch.cumsum(distance_mass(probs), dim=-1)
    for w in (1, 4, 12):
        band = np.zeros(H)
        for h in range(H):
            band[h] = np.mean(
                [float(probs[b, h, t, max(0, t - w + 1) : t + 1].sum()) for b in range(B) for t in range(T)]
            )
        assert np.allclose(cum[:, w - 1].numpy(), band, atol=1e-9)
    assert torch.allclose(cum[:, -1], torch.ones(H, dtype=torch.float64))


def test_needed_window_is_the_first_that_reaches_the_share():
    mass = np.array([[0.5, 0.3, 0.15, 0.05], [1.0, 0.0, 0.0, 0.0]])
    assert needed_window(mass, 0.95).tolist() == [3, 1]
    assert needed_window(mass, 0.99).tolist() == [4, 1]


def test_profile_a_model_folder_matches_its_own_attention(tmp_path, tiny_causal_lm):
    tiny_causal_lm(tmp_path / "llama", attn="eager")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "llama", attn_implementation="eager").eval()
    data = tmp_path / "t.txt"
    data.write_text(TEXT)
    out = tmp_path / "spans"
    args = ["profile", str(tmp_path / "llama"), "--data", str(data), "--out", str(out), "--windows", "4,8,16,32"]
    assert main(args + ["--batches", "2"]) == 0
    assert validate_run(out) == []
    spans = load_run(out).table("head_spans")
    assert len(spans) == 2 * 4 * 4
    blocks = cut_blocks(np.frombuffer(TEXT.encode(), dtype=np.uint8).astype(np.int64), 32)[:2]
    with torch.no_grad():
        att = model(torch.from_numpy(blocks[:, :-1]), output_attentions=True).attentions
    for layer in range(2):
        cum = torch.cumsum(distance_mass(att[layer]), dim=-1).numpy()
        for w in (4, 8, 32):
            got = spans[(spans["layer"] == layer) & (spans["window"] == w)].sort_values("head")["mass_share"]
            assert np.allclose(got.to_numpy(), cum[:, w - 1], atol=1e-5)
        got95 = spans[(spans["layer"] == layer) & (spans["window"] == 4)].sort_values("head")["needed_95"]
        assert got95.tolist() == needed_window(cum - np.concatenate([np.zeros((4, 1)), cum[:, :-1]], 1), 0.95).tolist()
    ev = load_run(out).events()
    (detail,) = [json.loads(d) for d in ev.loc[ev["kind"] == "profile", "detail"]]
    assert detail["heads"] == 8
    # the first token's share of the attention of queries 4.. (beyond the smallest window), per head
    assert detail["first_token_from"] == 4
    want = np.stack([att[layer][:, :, 4:, 0].double().mean(dim=(0, 2)).numpy() for layer in range(2)])
    assert np.allclose(detail["first_token_share"], want, atol=1e-5)
    assert detail["first_token_share_mean"] == pytest.approx(want.mean(), abs=1e-5)
    assert detail["heads_first_token_over_half"] == int((want > 0.5).sum())


def _trained_and_profiled(run: Path, tmp_path: Path, steps: int) -> Path:
    """A tiny train run of ``steps`` steps (evaluated at its middle and end), profiled on one batch of
    ``TEXT``; the text file."""
    common = ["--preset", "tiny", "--steps", str(steps), "--n-docs", "24", "--no-progress", "--threads", "1"]
    assert main(["train", "--out", str(run), *common, "--eval-interval", str(steps // 2), "--eval-batches", "1"]) == 0
    data = tmp_path / "t.txt"
    data.write_text(TEXT)
    assert main(["profile", str(run), "--data", str(data), "--out", str(run), "--batches", "1"]) == 0
    return data


def test_profile_appends_head_spans_to_a_train_run(tmp_path):
    run = tmp_path / "run"
    data = _trained_and_profiled(run, tmp_path, steps=6)
    r = load_run(run)
    spans = r.table("head_spans")
    assert set(spans["step"]) == {5}
    last = r.table("heads")
    last = last[last["step"] == 5].sort_values(["layer", "head"])
    per_head = spans[spans["window"] == 64].sort_values(["layer", "head"])
    assert per_head["executed_window"].tolist() == last["window"].tolist()
    assert np.allclose(per_head["mass_share"], 1.0)  # the largest window is T: all the mass
    # profiled again (other blocks): the step's rows are the second profile's, not both
    assert main(["profile", str(run), "--data", str(data), "--out", str(run), "--batches", "2"]) == 0
    again = load_run(run).table("head_spans")
    assert len(again) == len(spans)
    assert not again.duplicated(["step", "layer", "head", "window"]).any()
    profiles = load_run(run).events()
    profiles = profiles[profiles["kind"] == "profile"]
    assert len(profiles) == 2 and json.loads(profiles["detail"].iloc[-1])["n_batches"] == 2
    assert validate_run(run) == []


def test_windows_page_shows_needed_against_executed(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from aah_viz.figures.data import head_spans_data
    from aah_viz.figures.payload import figure_data
    from aah_viz.figures.windows import needed_vs_executed_figure, span_grid, span_heatmaps_figure

    logs = tmp_path / "logs"
    run = logs / "tiny"
    _trained_and_profiled(run, tmp_path, steps=4)
    spans = head_spans_data(load_run(run))
    raw = load_run(run).table("head_spans")
    assert len(spans) == 2 * 12 and len(raw) == 2 * 12 * 4
    one = raw.drop_duplicates(["layer", "head"]).sort_values(["layer", "head"])
    assert spans["needed_95"].tolist() == one["needed_95"].tolist()
    fig = needed_vs_executed_figure(spans, [8, 16, 32, 64])
    heads = [t for t in fig.data if t.name == "heads"][0]
    assert list(heads.x) == spans["needed_95"].tolist() and list(heads.y) == spans["executed_window"].tolist()
    # the legend under the plot, never at its right where the colour bar's title ("layer") stands
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0 and heads.marker.showscale
    # the mass beyond each head's executed window: 1 - its share at that window, read here from the raw rows
    grid = span_grid(spans)
    for row in one.itertuples():
        share = raw[(raw["layer"] == row.layer) & (raw["head"] == row.head) & (raw["window"] == row.executed_window)]
        want = max(0.0, 1.0 - float(share["mass_share"].iloc[0]))  # a share summed to 1 + rounding: nothing cut
        assert grid["cut"][row.layer, row.head] == pytest.approx(want, abs=1e-12)
        assert grid["needed"][row.layer, row.head] == row.needed_95
        assert grid["executed"][row.layer, row.head] == row.executed_window
    panels = span_heatmaps_figure(spans, [8, 16, 32, 64])
    assert [t.type for t in panels.data] == ["heatmap"] * 3

    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page("aah_viz/dashboard/views/windows.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("What each head needs" in s.value for s in at.subheader)
    cut = int((spans["executed_window"] < spans["needed_95"]).sum())
    assert any(f"{cut} of 24 heads lie below" in c.value for c in at.caption)
    titles = [figure_data(el.proto.spec)["layout"].get("title", {}).get("text", "") for el in at.get("plotly_chart")]
    assert any("cuts a head short" in t for t in titles)
    charts = [figure_data(c.proto.spec) for c in at.get("plotly_chart")]
    shown = [t for c in charts for t in c["data"] if t.get("name") == "heads"]
    assert len(shown) == 1
    assert list(shown[0]["x"]) == spans["needed_95"].tolist()
    assert list(shown[0]["y"]) == spans["executed_window"].tolist()
