"""``aah-viz frontier``: every configuration on the same held-out blocks, checked against independent sums."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from aah_viz.analysis.frontier import frontier_table, pareto_front, perplexity_interval
from aah_viz.stats.resampling import resample_indices

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- pure analysis
def test_perplexity_and_its_interval_over_blocks():
    nll = [40.0, 44.0, 38.0, 50.0, 41.0]
    ppl, lo, hi = perplexity_interval(nll, 16)
    assert ppl == pytest.approx(math.exp(sum(nll) / 80))
    # the interval is the percentile interval of exp(mean NLL) over the same seeded block draws
    idx = resample_indices(5)
    draws = [math.exp(sum(nll[i] for i in row) / 80) for row in idx]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(draws, [0.025, 0.975])))
    assert lo < ppl < hi
    assert perplexity_interval([40.0] * 5, 16)[1:] == pytest.approx((math.exp(2.5), math.exp(2.5)))
    with pytest.raises(ValueError):
        perplexity_interval([], 16)


def test_pareto_front_against_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        cost, loss = rng.integers(0, 5, 12).astype(float), rng.integers(0, 5, 12).astype(float)
        cost[rng.integers(0, 12)] = np.nan
        front = pareto_front(cost, loss)
        for i in range(12):
            if np.isnan(cost[i]):
                assert not front[i]
                continue
            beaten = any(
                not np.isnan(cost[j])
                and cost[j] <= cost[i]
                and loss[j] <= loss[i]
                and (cost[j], loss[j]) != (cost[i], loss[i])
                for j in range(12)
            )
            assert front[i] == (not beaten)


def test_frontier_table_shares_block_draws_and_marks_the_front():
    details = [
        {"configuration": "a", "block_nll": [30.0, 31.0, 29.0], "tokens_per_block": 8, "acr": 1.0},
        {"configuration": "b", "block_nll": [33.0, 32.0, 30.0], "tokens_per_block": 8, "acr": 0.25},
        {"configuration": "c", "block_nll": [35.0, 36.0, 37.0], "tokens_per_block": 8, "acr": 0.5},
        {"configuration": None, "detail": "not a frontier row"},
    ]
    table = frontier_table(details).set_index("configuration")
    assert list(table.index) == ["a", "b", "c"]
    assert table["pareto"].to_dict() == {"a": True, "b": True, "c": False}
    assert table.loc["a", "ppl"] == pytest.approx(math.exp(90 / 24))


# --------------------------------------------------------------------------- end to end
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

T = 32
WINDOWS = (4, 8, 16, 32)
TEXT = "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog, number {i * 7 % 13}." for i in range(400))


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tiny_causal_lm) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("frontier") / "llama")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aah_viz", *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )


def _frontier(llama: Path, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _cli(
        "frontier", str(llama), "--data", str(data), "--out", str(out), "--seq-len", str(T),
        "--eval-blocks", "3", "--profile-blocks", "2", "--timing-pairs", "2", "--threads", "1", "--no-progress",
        *extra,
    )  # fmt: skip


def _details(run: Path) -> dict[str, dict]:
    from aah_viz.runlog import load_run

    events = load_run(run).events("inference")
    rows = [json.loads(d) if isinstance(d, str) else d for d in events["detail"]]
    return {d["configuration"]: d for d in rows}


def _causal_coverage(w: int, t: int) -> float:
    return sum(min(i + 1, w) for i in range(t)) / (t * (t + 1) / 2)


def test_a_frontier_evaluates_every_configuration_on_the_same_blocks_and_continues(llama, tmp_path):
    from aah_viz.runlog import load_run, validate_run
    from instrumentation.data import cut_blocks
    from instrumentation.measure.frontier.plan import split_text

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    blocker = tmp_path / "fr-grouping_off"
    blocker.write_text("a file where the adaptation run of grouping_off would go")  # the first call fails there
    first = _frontier(llama, data, out, "--adapt-steps", "2", "--regimes", "full_adaptive,grouping_off")
    assert first.returncode != 0
    done = _details(out)
    assert "full_adaptive_adapted" in done and "grouping_off_adapted" not in done
    assert load_run(out).manifest["status"] == "failed"

    blocker.unlink()
    second = _frontier(llama, data, out, "--adapt-steps", "2", "--regimes", "full_adaptive,grouping_off", "--json")
    assert second.returncode == 0, second.stderr
    assert "config/s" not in second.stderr and "frontier:" not in second.stderr  # --no-progress: no bar at all
    events = load_run(out).events("inference")
    names = [json.loads(d)["configuration"] if isinstance(d, str) else d["configuration"] for d in events["detail"]]
    expected = ["unpatched", "full_attention", "sliding_window_4", "sliding_window_8", "sliding_window_16"]
    expected += ["head_windows_p95", "full_adaptive_zero_shot", "grouping_off_zero_shot"]
    expected += ["full_adaptive_adapted", "grouping_off_adapted"]
    assert sorted(names) == sorted(expected) and len(names) == len(set(names))  # nothing evaluated twice
    assert validate_run(out) == []
    assert not (out / "inputs").exists()  # the split texts go once the frontier is finished
    table = {row["configuration"]: row for row in json.loads(second.stdout)}
    assert set(table) == set(expected)

    details = _details(out)
    # the unpatched row, recomputed here on the same held-out blocks
    _, held_out, _ = split_text(data, 0.1)
    blocks = cut_blocks(np.frombuffer(held_out.encode(), dtype=np.uint8).astype(np.int64), T)[:3]
    model = transformers.AutoModelForCausalLM.from_pretrained(llama, local_files_only=True).eval()
    with torch.no_grad():
        x = torch.from_numpy(blocks)
        logits = model(x[:, :-1], use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none").sum(1)
    assert details["unpatched"]["block_nll"] == pytest.approx(nll.tolist(), rel=1e-5)
    assert details["full_attention"]["block_nll"] == pytest.approx(nll.tolist(), rel=1e-5)
    for w in (4, 8, 16):
        row = details[f"sliding_window_{w}"]
        assert row["acr"] == pytest.approx(w / T) and row["acr_causal"] == pytest.approx(_causal_coverage(w, T))
        assert row["windows"] == [[w] * 4] * 2
    # every head at the smallest candidate holding 95% of its profiled mass
    spans = load_run(out).table("head_spans")
    first_window = spans[spans["window"] == WINDOWS[0]].sort_values(["layer", "head"])
    needed = first_window["needed_95"].to_numpy().reshape(2, 4)
    want = [[min(w for w in WINDOWS if w >= n) for n in row] for row in needed]
    assert details["head_windows_p95"]["windows"] == want
    for row in details.values():
        assert len(row["block_nll"]) == 3 and row["tokens_per_block"] == T
        assert row["speed_vs_unpatched"]["median"] > 0
    adapted = details["full_adaptive_adapted"]
    assert adapted["adapt_steps"] == 2 and adapted["routing"] == "frozen"
    run_dir = tmp_path / adapted["adapt_run"]
    assert validate_run(run_dir) == [] and list((run_dir / "adapters").glob("step-*.safetensors"))


def test_bad_input_is_one_line_and_leaves_no_run(llama, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("too short\nfor a block\n")
    empty_model = tmp_path / "no-weights"
    empty_model.mkdir()
    (empty_model / "config.json").write_text((llama / "config.json").read_text())
    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    cases = [
        (llama, short, (), "too short"),
        (empty_model, data, (), "cannot load the model"),
        (llama, data, ("--regimes", "sliding_window"), "give AAH regimes with a controller"),
    ]
    for i, (model, text, extra, fragment) in enumerate(cases):
        out = tmp_path / f"out{i}"
        proc = _frontier(model, text, out, *extra)
        assert proc.returncode == 2, proc.stderr
        assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not out.exists()


@pytest.mark.slow  # the first test continues a frontier too; the default run keeps that
def test_a_second_call_adds_regimes_and_refuses_other_settings(llama, tmp_path):
    """Further --regimes add their configurations, the ones done are not evaluated again; any other
    setting (here the window set) is refused with nothing written."""
    from aah_viz.runlog import load_run, validate_run

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    assert _frontier(llama, data, out, "--regimes", "grouping_off").returncode == 0
    before = _details(out)
    assert "grouping_off_zero_shot" in before and "full_adaptive_zero_shot" not in before
    more = _frontier(llama, data, out, "--regimes", "full_adaptive")
    assert more.returncode == 0, more.stderr
    after = _details(out)
    assert after.keys() == before.keys() | {"full_adaptive_zero_shot"}
    assert all(after[k] == before[k] for k in before)  # nothing evaluated twice
    recorded = load_run(out).manifest["frontier"]
    assert recorded["settings"]["regimes"] == ["grouping_off", "full_adaptive"]
    assert sorted(recorded["configurations"]) == sorted(after)
    assert validate_run(out) == []
    other = _frontier(llama, data, out, "--regimes", "full_adaptive", "--windows", "8,32")
    assert other.returncode == 2 and "other settings (windows)" in other.stderr
    assert _details(out).keys() == after.keys()


def test_set_reaches_the_routed_regimes_and_must_match_to_continue(llama, tmp_path):
    """--set feature_normalization=zscore: the zero-shot routing and the adaptation run with it (the adapted
    run's config says so), static windows do not route; a second call without it is refused."""
    from aah_viz.runlog import load_run

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    common = ("--adapt-steps", "1", "--regimes", "full_adaptive")
    done = _frontier(llama, data, out, *common, "--set", "feature_normalization=zscore")
    assert done.returncode == 0, done.stderr
    adapted = _details(out)["full_adaptive_adapted"]
    assert load_run(tmp_path / adapted["adapt_run"]).manifest["config"]["feature_normalization"] == "zscore"
    assert load_run(out).manifest["frontier"]["settings"]["aah_overrides"] == {"feature_normalization": "zscore"}
    again = _frontier(llama, data, out, *common)
    assert again.returncode == 2 and "other settings (aah_overrides)" in again.stderr
    bad = _frontier(llama, data, tmp_path / "bad", *common, "--set", "no_such_key=1")
    assert bad.returncode == 2 and "no_such_key" in bad.stderr and not (tmp_path / "bad" / "manifest.json").exists()


def test_export_writes_the_frontier_table_with_its_intervals_and_front(tmp_path):
    """`aah-viz export --table frontier`: one row per configuration, the numbers of the frontier table
    recomputed here from the run's events (perplexity = exp(total nll / tokens))."""
    from aah_viz.cli import main
    from aah_viz.runlog import load_run
    from aah_viz.samples import make_synthetic_frontier_run

    run = load_run(make_synthetic_frontier_run(tmp_path / "fr", seed=3))
    for fmt in ("csv", "md", "latex"):
        assert (
            main(["export", str(run.path), "--table", "frontier", "--format", fmt, "--out", str(tmp_path / "o")]) == 0
        )
    got = pd.read_csv(tmp_path / "o" / "frontier.csv").set_index("configuration")
    events = run.events("inference")
    assert len(got) == len(events) == 4
    for detail in events["detail"]:
        d = json.loads(detail)
        want = math.exp(sum(d["block_nll"]) / (d["tokens_per_block"] * len(d["block_nll"])))
        row = got.loc[d["configuration"]]
        assert row["ppl"] == pytest.approx(want, rel=1e-9)
        assert row["ppl_lo"] < row["ppl"] < row["ppl_hi"]
        assert row["acr"] == pytest.approx(d["acr"])
    acr, ppl = got["acr"].to_numpy(), got["ppl"].to_numpy()
    dominated = [any(acr[j] <= acr[i] and ppl[j] <= ppl[i] and (acr[j], ppl[j]) != (acr[i], ppl[i])
                     for j in range(len(got))) for i in range(len(got))]  # fmt: skip
    assert list(got["pareto"]) == [not d for d in dominated]
    assert "\\begin{table}" in (tmp_path / "o" / "frontier.tex").read_text()
    assert "sliding_window_8" in (tmp_path / "o" / "frontier.md").read_text()


def test_the_documented_frontier_export_commands_run_as_written(tmp_path, monkeypatch):
    """Each ``aah-viz export ... --table frontier`` line of the README and the docs, on a frontier run at
    the path it names (the commands once lacked the required --out and exited 2)."""
    import shlex

    from aah_viz.cli import main
    from aah_viz.samples import make_synthetic_frontier_run

    root = Path(__file__).resolve().parents[1]
    lines = [
        line.strip().strip("`").rstrip(".").strip("`")
        for doc in (root / "README.md", *sorted((root / "docs").glob("*.md")))
        for line in doc.read_text().splitlines()
        if line.strip().strip("`").startswith("aah-viz export ") and "--table frontier" in line
    ]
    assert len(lines) >= 2, lines  # the README's and real-model.md's at least
    monkeypatch.chdir(tmp_path)
    for n, line in enumerate(lines):
        argv = shlex.split(line)[1:]
        make_synthetic_frontier_run(tmp_path / f"docs{n}" / "fr", seed=3)
        argv[1] = str(tmp_path / f"docs{n}")  # the runs folder the line names, here a synthetic frontier
        assert main(argv) == 0, line
        out = Path(argv[argv.index("--out") + 1])
        assert any(out.glob("frontier.*")), line


def test_export_all_leaves_out_tables_the_runs_were_never_measured_for(tmp_path):
    from aah_viz.cli import main
    from aah_viz.samples import make_synthetic_run

    make_synthetic_run(tmp_path / "r", n_layer=2, n_head=4, steps=20)
    assert main(["export", str(tmp_path / "r"), "--table", "all", "--out", str(tmp_path / "o")]) == 0
    written = {p.stem for p in (tmp_path / "o").iterdir()}
    assert {"training", "inference", "windows", "stability"} <= written
    assert not written & {"frontier", "head_similarity"}


def test_export_of_a_frontier_folder_beside_other_runs_needs_no_allow_mixed(tmp_path):
    """A frontier table is made of each frontier's own rows, so runs of other configurations beside it
    (its adaptations, a probe run at another T) are no reason to refuse, as the README's command does."""
    from aah_viz.cli import main
    from aah_viz.samples import make_synthetic_frontier_run, make_synthetic_run

    make_synthetic_frontier_run(tmp_path / "logs" / "fr", seed=3)
    make_synthetic_run(tmp_path / "logs" / "other", n_layer=2, n_head=4, steps=20, windows=(4, 8))
    out = tmp_path / "o"
    assert main(["export", str(tmp_path / "logs"), "--table", "frontier", "--format", "csv", "--out", str(out)]) == 0
    got = pd.read_csv(out / "frontier.csv")
    assert len(got) == 4 and set(got["run"]) == {"fr"}
    # a paper table of the same runs still refuses to mix configurations
    assert main(["export", str(tmp_path / "logs"), "--table", "training", "--out", str(tmp_path / "t")]) == 2


def _rows_without_timing(run: Path) -> dict[str, dict]:
    """Every row of a frontier run, less what a clock measures (speed, elapsed time)."""
    drop = ("speed_vs_unpatched", "elapsed_s", "seconds", "tokens_per_s", "peak_mem_mb")
    return {name: {k: v for k, v in d.items() if k not in drop} for name, d in _details(run).items()}


@pytest.mark.slow  # two whole frontiers compared row by row
def test_the_same_command_gives_the_same_rows(llama, tmp_path):
    """Two frontiers of the same command: every row equal, the zero-shot routing included (its untrained
    AAH parameters are drawn from --seed, not from whatever the process drew before)."""
    import torch as torch_mod

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    first, second = tmp_path / "a", tmp_path / "b"
    assert _frontier(llama, data, first, "--regimes", "full_adaptive", "--windows", "8,32").returncode == 0
    torch_mod.manual_seed(12345)  # nothing of this process reaches the subprocess; the second call's draws differ
    assert _frontier(llama, data, second, "--regimes", "full_adaptive", "--windows", "8,32").returncode == 0
    a, b = _rows_without_timing(first), _rows_without_timing(second)
    assert a.keys() == b.keys() and "full_adaptive_zero_shot" in a
    for name in a:
        assert a[name] == b[name], name


@pytest.mark.slow
def test_an_adaptation_is_reused_only_with_its_settings_and_overwrite_replaces_it(llama, tmp_path):
    """--overwrite --adapt-lr 0.5 adapts afresh (the adapted row changes, the adapter run records lr 0.5);
    without --overwrite, an adaptation run made with other settings is refused in one line."""
    from aah_viz.runlog import load_run

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    common = ("--adapt-steps", "1", "--regimes", "full_adaptive", "--windows", "16,32")
    assert _frontier(llama, data, out, *common).returncode == 0
    before = _details(out)["full_adaptive_adapted"]
    adapt_dir = tmp_path / before["adapt_run"]
    old_uid = load_run(adapt_dir).manifest["run_uid"]
    old_adapter = sorted((adapt_dir / "adapters").glob("step-*.safetensors"))[-1].read_bytes()

    redo = _frontier(llama, data, out, *common, "--adapt-lr", "0.5", "--overwrite")
    assert redo.returncode == 0, redo.stderr
    after = _details(out)["full_adaptive_adapted"]
    manifest = load_run(adapt_dir).manifest
    assert manifest["retrofit"]["lr"] == 0.5 and manifest["run_uid"] != old_uid
    assert sorted((adapt_dir / "adapters").glob("step-*.safetensors"))[-1].read_bytes() != old_adapter
    assert after["adapt_run"] == before["adapt_run"]

    # the frontier run gone, its adaptation left: a new frontier with another lr must not take it
    import shutil

    shutil.rmtree(out)
    stale = _frontier(llama, data, out, *common, "--adapt-lr", "0.001")
    assert stale.returncode == 2, stale.stderr
    assert "other settings (lr)" in stale.stderr and len(stale.stderr.strip().splitlines()) == 1
    assert load_run(adapt_dir).manifest["retrofit"]["lr"] == 0.5


def _sink_mask(T: int, window: int, sinks: int) -> torch.Tensor:
    """(T, T) boolean, pair by pair: query t sees key j <= t with t - j < W or j < k (sink_tokens)."""
    return torch.tensor([[j <= t and (t - j < window or j < sinks) for j in range(T)] for t in range(T)])


def test_the_plan_with_sink_tokens_and_the_profiled_windows_with_sinks():
    """--sink-tokens 1,4: per k the sliding windows, the profiled rows at 95% and 90%, each regime zero-shot and
    adapted, after the rows without sinks (whose names stay as they were); the profiled windows with sinks come
    from the profile's needed windows with the sinks kept."""
    from instrumentation.measure.frontier.plan import (
        Configuration,
        FrontierConfig,
        adapt_run_dir,
        plan,
        profiled_windows,
    )

    fc = FrontierConfig("m", "d", "o", seq_len=32, windows=WINDOWS, adapt_steps=2, regimes=("full_adaptive",))
    base = [c.name for c in plan(fc)]
    with_sinks = plan(FrontierConfig(**{**fc.__dict__, "sink_tokens": (4, 1)}))
    assert [c.name for c in with_sinks][: len(base)] == base
    extra = {c.name: c for c in with_sinks[len(base) :]}
    want = set()
    for k in (1, 4):
        want |= {f"sliding_window_{w}_sink{k}" for w in (4, 8, 16)}
        want |= {f"head_windows_p95_sink{k}", f"head_windows_p90_sink{k}"}
        want |= {f"full_adaptive_zero_shot_sink{k}", f"full_adaptive_adapted_sink{k}"}
    assert set(extra) == want and all(c.sinks in (1, 4) for c in extra.values())
    assert extra["head_windows_p90_sink4"].share == 0.90 and extra["sliding_window_8_sink1"].window == 8
    detail = {"needed_95": [[3, 9]], "needed_with_sinks": {"4": {"needed_90": [[1, 33]], "needed_95": [[2, 17]]}}}
    assert profiled_windows(detail, WINDOWS, Configuration("", "head_windows")) == [[4, 16]]
    assert profiled_windows(detail, WINDOWS, extra["head_windows_p90_sink4"]) == [[4, 32]]
    assert profiled_windows(detail, WINDOWS, extra["head_windows_p95_sink4"]) == [[4, 32]]
    assert adapt_run_dir(Path("x/fr"), "full_adaptive", 4) == Path("x/fr-full_adaptive-sink4")


@pytest.mark.slow
def test_sink_tokens_add_the_baselines_with_sinks_to_a_frontier(llama, tmp_path):
    """A second call with --sink-tokens 2 adds, per k: sliding windows + k sinks (each block's NLL recomputed
    here with the unpatched model under the explicit mask; ACR and coverage counted from it), the profiled
    per-head windows at 95% and 90% with the sinks counted as kept, and the AAH regime with k sinks, zero-shot
    and adapted with them."""
    from aah_viz.runlog import load_run, validate_run
    from instrumentation.data import cut_blocks
    from instrumentation.measure.frontier.plan import split_text

    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    common = ("--adapt-steps", "1", "--regimes", "full_adaptive")
    assert _frontier(llama, data, out, *common).returncode == 0
    before = _details(out)
    more = _frontier(llama, data, out, *common, "--sink-tokens", "2")
    assert more.returncode == 0, more.stderr
    details = _details(out)
    added = set(details) - set(before)
    want = set()
    for k in (2,):
        want |= {f"sliding_window_{w}_sink{k}" for w in (4, 8, 16)}
        want |= {f"head_windows_p95_sink{k}", f"head_windows_p90_sink{k}"}
        want |= {f"full_adaptive_zero_shot_sink{k}", f"full_adaptive_adapted_sink{k}"}
    assert added == want
    assert all(details[c] == before[c] for c in before)  # nothing evaluated twice
    assert load_run(out).manifest["frontier"]["settings"]["sink_tokens"] == [2]
    assert validate_run(out) == []
    assert not load_run(out).table("head_spans").duplicated(["step", "layer", "head", "window"]).any()

    _, held_out, _ = split_text(data, 0.1)
    blocks = torch.from_numpy(cut_blocks(np.frombuffer(held_out.encode(), dtype=np.uint8).astype(np.int64), T)[:3])
    model = transformers.AutoModelForCausalLM.from_pretrained(llama, attn_implementation="eager").eval()
    for k in (2,):
        for w in (4, 8):
            row = details[f"sliding_window_{w}_sink{k}"]
            allowed = _sink_mask(T, w, k)
            bias = torch.zeros(1, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
            with torch.no_grad():
                logits = model(blocks[:, :-1], attention_mask=bias.expand(3, 1, T, T), use_cache=False).logits
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), blocks[:, 1:], reduction="none").sum(1)
            assert row["block_nll"] == pytest.approx(nll.tolist(), rel=1e-4)
            assert row["sink_tokens"] == k
            assert row["acr_causal"] == pytest.approx(int(allowed.sum()) / (T * (T + 1) / 2))
            assert row["acr"] == pytest.approx(int(allowed.sum(-1).max()) / T)
        # the profiled rows: each head the smallest candidate at least its needed window with the sinks kept
        profiles = [json.loads(d) for d in load_run(out).events("profile")["detail"]]
        assert len(profiles) == 2 and "needed_with_sinks" not in profiles[0]  # the second call's adds the sinks
        profile = profiles[-1]
        for share in (95, 90):
            needed = profile["needed_with_sinks"][str(k)][f"needed_{share}"]
            windows = [[min([c for c in WINDOWS if c >= n] or [WINDOWS[-1]]) for n in row] for row in needed]
            assert details[f"head_windows_p{share}_sink{k}"]["windows"] == windows
            assert details[f"head_windows_p{share}_sink{k}"]["sink_tokens"] == k
        assert details[f"full_adaptive_zero_shot_sink{k}"]["sink_tokens"] == k
        adapted = details[f"full_adaptive_adapted_sink{k}"]
        assert adapted["adapt_run"] == f"fr-full_adaptive-sink{k}"
        assert load_run(tmp_path / adapted["adapt_run"]).manifest["config"]["sink_tokens"] == k
    # the sinks bind: the same windows without them give other likelihoods
    assert details["sliding_window_4_sink2"]["block_nll"] != pytest.approx(details["sliding_window_4"]["block_nll"])


@pytest.mark.slow  # a frontier at T = 384, twice (about a minute); the scoring itself: tests/test_retrieval.py
def test_retrieval_asks_every_configuration_the_same_questions_and_a_second_call_adds_it(tmp_path, tiny_causal_lm):
    from transformers import AutoModelForCausalLM

    from aah_viz.analysis.frontier import run_frontier_table
    from aah_viz.corpus.passkey import passkey_items
    from aah_viz.runlog import load_run

    long_lm = tiny_causal_lm(tmp_path / "lm512", max_position_embeddings=512)
    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "fr"
    args = ["--seq-len", "384", "--regimes", "full_adaptive", "--eval-blocks", "2"]

    def call(*extra):
        return _cli(
            "frontier", str(long_lm), "--data", str(data), "--out", str(out), "--profile-blocks", "1",
            "--timing-pairs", "2", "--threads", "1", "--no-progress", *args, *extra,
        )  # fmt: skip

    first = call()
    assert first.returncode == 0, first.stderr
    measured = len(load_run(out).events("inference"))
    assert run_frontier_table(load_run(out))["retrieval"].isna().all()

    second = call("--retrieval", "1")  # a frontier measured before: its configurations are asked, not measured again
    assert second.returncode == 0, second.stderr
    run = load_run(out)
    assert len(run.events("inference")) == measured
    asked = {d["configuration"]: d for d in map(json.loads, run.events("retrieval")["detail"])}
    assert set(asked) == set(_details(out)) and all(d["n"] == 5 for d in asked.values())

    # the unpatched model's verdicts, by greedy decoding written here, one question at a time
    model = AutoModelForCausalLM.from_pretrained(long_lm).eval()
    items = passkey_items(384, lambda text: len(text.encode()) + 1, per_depth=1, seed=0)
    right = 0
    for item in items:
        ids = list(item.prompt.encode())
        for _ in range(len(item.answer)):
            with torch.no_grad():
                ids.append(int(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
        right += ids[-len(item.answer) :] == list(item.answer.encode())
    assert asked["unpatched"]["correct"] == right
    table = run_frontier_table(run).set_index("configuration")
    assert (table["retrieval_n"] == 5).all()
    assert table.loc["unpatched", "retrieval"] == right / 5
    assert (table["retrieval_lo"] <= table["retrieval"]).all() and (table["retrieval"] <= table["retrieval_hi"]).all()

    third = call("--retrieval", "2")
    assert third.returncode == 2 and "--retrieval 1" in third.stderr and len(third.stderr.strip().splitlines()) == 1
