"""``aah-viz frontier --adapt-seeds``: adapted rows from further seeds, their spread, and each adaptation's curve."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from aah_viz.analysis.frontier import adaptation_curves, seed_spread
from aah_viz.figures.frontier import LABEL_SPOTS, NEAR_ACR, label_positions, point_label

REPO = Path(__file__).resolve().parents[1]
TEXT = "The quick brown fox jumps over the lazy dog. A stitch in time saves nine.\n" * 60


def test_the_plan_adds_a_row_and_a_run_per_further_seed(tmp_path):
    pytest.importorskip("torch")
    from instrumentation.measure.frontier.plan import FrontierConfig, adapt_run_dir, plan

    fc = FrontierConfig("m", "d", str(tmp_path / "fr"), seq_len=64, adapt_steps=2, regimes=("full_adaptive",))
    seeded = FrontierConfig(**{**fc.__dict__, "adapt_seeds": (2, 0, 1, 1), "sink_tokens": (4,)})
    assert seeded.extra_seeds() == (1, 2)  # --seed 0 is the frontier's own, each seed once
    adapted = [c for c in plan(seeded) if c.family == "adapted"]
    assert [(c.name, c.seed, c.sinks) for c in adapted] == [
        ("full_adaptive_adapted", None, 0),
        ("full_adaptive_adapted_seed1", 1, 0),
        ("full_adaptive_adapted_seed2", 2, 0),
        ("full_adaptive_adapted_sink4", None, 4),
        ("full_adaptive_adapted_sink4_seed1", 1, 4),
        ("full_adaptive_adapted_sink4_seed2", 2, 4),
    ]
    dirs = {adapt_run_dir(Path(fc.out), c.regime, c.sinks, c.seed).name for c in adapted}
    assert dirs == {f"fr-full_adaptive{s}{t}" for s in ("", "-sink4") for t in ("", "-seed1", "-seed2")}
    assert "adapt_seeds" not in fc.settings("x") and seeded.settings("x")["adapt_seeds"] == [1, 2]
    assert point_label("full_adaptive_adapted_sink4_seed2", "adapted", 4) == "full_adaptive +4S seed2"
    # the untrained and the adapted row of a regime never print the same label
    labels = [
        point_label(f"grouping_off_{f}{s}", f, k) for f in ("zero_shot", "adapted") for s, k in (("", 0), ("_sink4", 4))
    ]
    assert len(set(labels)) == 4, labels


def test_seed_spread_and_settled_curves_against_their_definitions():
    table = pd.DataFrame(
        {
            "configuration": ["a_adapted", "a_adapted_seed1", "a_adapted_seed2", "b_adapted", "sliding_window_8"],
            "family": ["adapted", "adapted", "adapted", "adapted", "sliding_window"],
            "ppl": [10.0, 12.5, 11.0, 9.0, 30.0],
        }
    )
    (a,) = seed_spread(table)  # b has one seed: no spread to give
    assert a["configuration"] == "a_adapted" and a["n_seeds"] == 3
    assert a["mean"] == pytest.approx(statistics.mean([10.0, 12.5, 11.0]))
    assert a["sd"] == pytest.approx(statistics.stdev([10.0, 12.5, 11.0]))
    assert (a["min"], a["max"]) == (10.0, 12.5)
    flat = [[0, 3.0], [5, 2.5], [9, 2.5 - math.log(1.005)]]  # the last step: perplexity 0.5% lower
    falling = [[0, 3.0], [5, 2.5], [9, 2.5 - math.log(1.02)]]  # 2% lower
    details = [
        {"configuration": "a_adapted", "family": "adapted", "adapt_curve": flat, "adapt_seed": 0},
        {"configuration": "a_adapted_seed1", "family": "adapted", "adapt_curve": falling, "adapt_seed": 1},
        {"configuration": "b_adapted", "family": "adapted", "adapt_curve": [[0, 3.0]]},
        {"configuration": "sliding_window_8", "family": "sliding_window", "adapt_curve": flat},
    ]
    curves = adaptation_curves(details)
    assert set(curves) == {"a_adapted", "a_adapted_seed1", "b_adapted"}
    assert curves["a_adapted"]["settled"] and not curves["a_adapted_seed1"]["settled"]
    assert not curves["b_adapted"]["settled"]  # one evaluation says nothing about a plateau
    assert curves["a_adapted_seed1"]["seed"] == 1
    # a curve that ends above where it started never improved, however flat its end (the SmolLM2 sample's
    # 28.5 -> 30.5 -> 29.0 -> 29.3 -> 29.3 was called "stopped improving")
    worse = [
        [9, math.log(28.5)],
        [19, math.log(30.5)],
        [29, math.log(29.0)],
        [35, math.log(29.3)],
        [39, math.log(29.3)],
    ]
    both = adaptation_curves([{"configuration": "c_adapted", "family": "adapted", "adapt_curve": worse}, *details])
    assert both["c_adapted"]["settled"] and not both["c_adapted"]["improved"]
    assert (both["c_adapted"]["first"], both["c_adapted"]["last"]) == pytest.approx((28.5, 29.3))
    assert both["a_adapted"]["improved"] and both["a_adapted_seed1"]["improved"] and not both["b_adapted"]["improved"]


def _frontier(llama: Path, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    args = ["frontier", str(llama), "--data", str(data), "--out", str(out), "--seq-len", "32", "--eval-blocks", "2"]
    args += ["--profile-blocks", "1", "--timing-pairs", "2", "--threads", "1", "--no-progress", "--adapt-steps", "4"]
    args += ["--regimes", "full_adaptive", "--windows", "8,16,32", *extra]
    return subprocess.run([sys.executable, "-m", "aah_viz", *args], cwd=REPO, capture_output=True, text=True)


@pytest.mark.slow  # two frontiers of a tiny model with three adaptations (about a minute)
def test_further_seeds_adapt_again_record_their_curves_and_show_on_the_page(tmp_path, tiny_causal_lm, monkeypatch):
    pytest.importorskip("torch")
    from streamlit.testing.v1 import AppTest
    from waiting import PATIENCE_S

    from aah_viz.runlog import load_run, validate_run

    llama = tiny_causal_lm(tmp_path / "llama")
    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    logs = tmp_path / "logs"
    out = logs / "fr"
    first = _frontier(llama, data, out, "--adapt-seeds", "1")
    assert first.returncode == 0, first.stderr
    again = _frontier(llama, data, out, "--adapt-seeds", "2")  # a second call adds a seed, keeps seed 1
    assert again.returncode == 0, again.stderr
    events = load_run(out).events("inference")
    details = {d["configuration"]: d for d in (json.loads(x) for x in events["detail"])}
    names = list(details)
    assert len(names) == len(set(names))  # nothing evaluated twice
    seeds = {n: details[n]["adapt_seed"] for n in names if details[n]["family"] == "adapted"}
    assert seeds == {"full_adaptive_adapted": 0, "full_adaptive_adapted_seed1": 1, "full_adaptive_adapted_seed2": 2}
    assert load_run(out).manifest["frontier"]["settings"]["adapt_seeds"] == [1, 2]
    for name, seed in seeds.items():
        run_dir = logs / details[name]["adapt_run"]
        assert validate_run(run_dir) == [] and load_run(run_dir).manifest["seed"] == seed
        val = load_run(run_dir).scalar("val_loss").drop_duplicates("step", keep="last")
        assert details[name]["adapt_curve"] == [
            [int(s), pytest.approx(float(v))] for s, v in zip(val["step"], val["value"])
        ]
        assert len(details[name]["adapt_curve"]) >= 2
    nll = {n: details[n]["block_nll"] for n in seeds}
    assert nll["full_adaptive_adapted"] != nll["full_adaptive_adapted_seed1"]  # another seed, another adaptation

    monkeypatch.setenv("AAH_VIZ_LOGS", str(logs))
    monkeypatch.setenv("AAH_VIZ_REFERENCE", str(tmp_path / "no-reference"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=PATIENCE_S)
    at.run()
    at.switch_page("aah_viz/dashboard/views/frontier.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    text = "\n".join(m.value for m in at.markdown)
    assert "3 of 3 adapted configurations recorded" in text
    ppl = [math.exp(sum(nll[n]) / (len(nll[n]) * 32)) for n in seeds]
    assert f"{statistics.mean(ppl):.2f} ± {statistics.stdev(ppl):.2f}" in text


@pytest.mark.slow  # a tiny frontier interrupted, then continued (about a minute)
def test_an_interrupted_frontier_says_stopped_and_the_same_command_finishes_it(tmp_path, tiny_causal_lm):
    pytest.importorskip("torch")
    from interrupting import interrupt_after_progress

    from aah_viz.runlog import load_run, validate_run

    llama = tiny_causal_lm(tmp_path / "llama")
    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    args = ["frontier", str(llama), "--data", str(data), "--out", str(out), "--seq-len", "32", "--eval-blocks", "2"]
    args += ["--profile-blocks", "1", "--timing-pairs", "2", "--threads", "1", "--regimes", "full_adaptive"]
    args += ["--windows", "8,16,32"]
    code, err = interrupt_after_progress(
        [sys.executable, "-m", "aah_viz", *args], "the frontier", "configuration", desc="frontier:"
    )
    assert code == 130 and "interrupted" in err
    assert load_run(out).manifest["status"] == "stopped" and validate_run(out) == []
    done = len(load_run(out).events("inference"))
    assert done >= 1
    again = subprocess.run([sys.executable, "-m", "aah_viz", *args, "--no-progress"], cwd=REPO, capture_output=True)
    assert again.returncode == 0, again.stderr
    assert load_run(out).manifest["status"] == "finished"
    names = [json.loads(d)["configuration"] for d in load_run(out).events("inference")["detail"]]
    assert len(names) == len(set(names)) and len(names) > done


def test_labels_of_points_at_nearly_the_same_acr_take_different_spots():
    """Near ACR 0.3 the SmolLM2 frontier has five configurations within 0.02 of each other (three labelled
    "... +4S"): no two such points may print their labels at the same spot."""
    acr = [0.289, 0.302, 0.303, 0.297, 0.292, 0.5, 0.125, 0.133]
    table = pd.DataFrame({"acr": acr, "ppl": [37.4, 36.8, 37.4, 94.8, 109.2, 47.1, 111.8, 46.4]})
    spots = label_positions(table)
    assert set(spots) <= set(LABEL_SPOTS) and spots.index.equals(table.index)
    for i in range(len(acr)):
        for j in range(i + 1, len(acr)):
            if abs(acr[i] - acr[j]) <= NEAR_ACR:
                assert spots[i] != spots[j], (i, j, spots[i])
