"""Factorial effects: the linear model's effects equal a hand computation on a table with planted effects,
pure noise gives no more discoveries than the false-positive rate allows, and a design that cannot give an
interval (one seed, saturated) or an interaction (a fraction) says so. Seeded and deterministic."""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from aah_viz.export.effects import ALIASED, ONE_SEED, TOO_FEW_SEEDS, cell_means, factorial_effects


def planted_table(rng, levels_a, levels_b, seeds, effect_of, sd):
    rows = []
    for a, b in itertools.product(levels_a, levels_b):
        for s in range(seeds):
            rows.append({"a": a, "b": b, "seed": s, "y": effect_of(a, b) + rng.normal(0.0, sd)})
    return pd.DataFrame(rows)


def holm(p):
    """Holm's step-down adjustment, written out."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    m = len(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * p[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def test_two_by_three_effects_equal_the_hand_computation():
    rng = np.random.default_rng(7)
    la, lb, n = ["lo", "hi"], ["x", "y", "z"], 4
    planted = {("hi", "y"): 0.3}

    def effect_of(a, b):
        return 2.0 + 0.5 * (a == "hi") - 0.2 * (b == "z") + planted.get((a, b), 0.0)

    df = planted_table(rng, la, lb, n, effect_of, sd=0.05)
    out = factorial_effects(df, {"a": la, "b": lb}, "y")

    # by hand: cell means, pooled within-cell variance (the model is saturated in the cells)
    m = df.groupby(["a", "b"])["y"].mean()
    ss = sum(((part["y"] - part["y"].mean()) ** 2).sum() for _, part in df.groupby(["a", "b"]))
    dof = len(df) - len(la) * len(lb)
    s2 = ss / dof
    tq = sps.t.ppf(0.975, dof)
    hand = {}
    # main effect of a: mean over b of (hi - lo); coefficients +-1/3 on six cells
    hand[("a", "hi vs lo")] = (np.mean([m["hi", b] - m["lo", b] for b in lb]), math.sqrt(s2 / n * 6 / 9))
    for lv in ("y", "z"):
        hand[("b", f"{lv} vs x")] = (np.mean([m[a, lv] - m[a, "x"] for a in la]), math.sqrt(s2 / n * 4 / 4))
        dod = m["hi", lv] - m["hi", "x"] - m["lo", lv] + m["lo", "x"]
        hand[("a x b", f"hi x {lv}")] = (dod, math.sqrt(s2 / n * 4))
    assert len(out) == len(hand)
    p_hand = []
    for row in out.itertuples():
        est, se = hand[(row.factors, row.levels)]
        assert row.effect == pytest.approx(est, abs=1e-10)
        assert row.se == pytest.approx(se, rel=1e-8)
        assert row.df == dof
        assert (row.ci_low, row.ci_high) == pytest.approx((est - tq * se, est + tq * se), rel=1e-8)
        p = 2 * sps.t.sf(abs(est) / se, dof)
        assert row.p == pytest.approx(p, rel=1e-6, abs=1e-300)
        p_hand.append(p)
    assert out["p_holm"].to_numpy() == pytest.approx(holm(p_hand), rel=1e-6, abs=1e-300)
    from statsmodels.stats.multitest import multipletests

    assert holm(p_hand) == pytest.approx(multipletests(p_hand, method="holm")[1], rel=1e-12)
    # the planted effects are found and the intervals hold them
    by = {(r.factors, r.levels): r for r in out.itertuples()}
    assert by[("a x b", "hi x y")].ci_low <= 0.3 <= by[("a x b", "hi x y")].ci_high
    assert by[("a x b", "hi x y")].p_holm < 0.05 and by[("a x b", "hi x z")].p_holm > 0.05

    means = cell_means(df, ["a", "b"], ["y"])
    assert means["n"].tolist() == [n] * 6
    for row in means.itertuples():
        part = df[(df["a"] == row.a) & (df["b"] == row.b)]["y"]
        assert row.y == pytest.approx(part.mean()) and row.y_std == pytest.approx(part.std(ddof=1))


def test_pure_noise_finds_no_more_than_the_false_positive_rate():
    rng = np.random.default_rng(2024)
    factors = {"a": ["0", "1"], "b": ["0", "1"], "c": ["0", "1"]}
    reps, alpha = 80, 0.05
    raw_hits = tests = families_with_a_hit = 0
    for _ in range(reps):
        rows = [
            {"a": a, "b": b, "c": c, "seed": s, "y": rng.normal()}
            for a, b, c in itertools.product("01", repeat=3)
            for s in range(2)
        ]
        out = factorial_effects(pd.DataFrame(rows), factors, "y")
        tests += len(out)
        raw_hits += int((out["p"] < alpha).sum())
        families_with_a_hit += int((out["p_holm"] < alpha).any())
    # calibrated p-values: the raw hit count within the binomial's central 99.8%
    assert sps.binom.ppf(0.001, tests, alpha) <= raw_hits <= sps.binom.ppf(0.999, tests, alpha)
    # Holm bounds the family-wise error rate by alpha
    assert families_with_a_hit <= sps.binom.ppf(0.999, reps, alpha)
    assert families_with_a_hit < raw_hits


def test_one_seed_and_fractions_say_what_they_cannot_estimate():
    rng = np.random.default_rng(3)
    df = planted_table(rng, ["lo", "hi"], ["x", "y"], 1, lambda a, b: float(a == "hi"), sd=0.1)
    out = factorial_effects(df, {"a": ["lo", "hi"], "b": ["x", "y"]}, "y")
    assert out["note"].eq(TOO_FEW_SEEDS).all() and out["ci_low"].isna().all()
    assert out.loc[out["factors"] == "a", "effect"].item() == pytest.approx(
        df[df.a == "hi"]["y"].mean() - df[df.a == "lo"]["y"].mean()
    )

    # 2^(3-1) with c = a*b and two seeds: main effects estimable, interactions aliased
    rows = []
    for a, b in itertools.product("01", repeat=2):
        c = "1" if (a == "1") == (b == "1") else "0"
        rows += [{"a": a, "b": b, "c": c, "seed": s, "y": rng.normal()} for s in range(2)]
    out = factorial_effects(pd.DataFrame(rows), {f: ["0", "1"] for f in "abc"}, "y")
    assert out.loc[out["term"] == "main", "ci_low"].notna().all()
    assert out.loc[out["term"] == "interaction", "note"].eq(ALIASED).all()

    # one seed but a residual (a 2x2x2 without its three-way term): an interval, with the caveat
    rows = [{"a": a, "b": b, "c": c, "seed": 0, "y": rng.normal()} for a, b, c in itertools.product("01", repeat=3)]
    out = factorial_effects(pd.DataFrame(rows), {f: ["0", "1"] for f in "abc"}, "y")
    assert out["df"].eq(1).all() and out["note"].eq(ONE_SEED).all()


def test_effects_table_renders_in_every_format(tmp_path):
    from aah_viz.export.design_effects import effects_table
    from aah_viz.export.formats import render
    from aah_viz.sweep.design import parse_design

    design = parse_design({"seeds": 2, "factors": {"grouping": ["feature", "random"], "feature_ema": ["on", "off"]}})
    rng = np.random.default_rng(0)
    rows = [
        {**cell.as_dict(), "seed": s, "run": "r", "val_loss": rng.normal(), "acr": rng.random()}
        for cell, s in design.trials()
    ]
    table = effects_table(pd.DataFrame(rows), design, ["val_loss", "acr"])
    assert len(table.df) == 6
    md = render(table, "md")
    assert "random vs feature" in md and "grouping x feature_ema" in md
    csv_rows = render(table, "csv").strip().splitlines()
    assert len([r for r in csv_rows if r.startswith(("val_loss,", "acr,"))]) == 6
    assert "\\begin{table}" in render(table, "latex")


SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "sweep_ablation_tiny"
SAMPLE_DESIGN = Path(__file__).resolve().parents[1] / "scripts" / "ablation_sample.toml"


def effects_and_final_losses(folder: Path, design_file: Path, capsys):
    """A sample sweep's design, ``aah-viz effects``'s CSV of it, and each trial's final validation loss
    (``y``) read from its run, one row per trial with its levels."""
    from aah_viz.cli import main
    from aah_viz.runlog import load_run
    from aah_viz.sweep.design import load_design, run_name

    design = load_design(design_file)
    assert main(["effects", str(folder), "--design", str(design_file), "--format", "csv"]) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out.split("\n\n")[0]))
    rows = []
    for cell, seed in design.trials():
        sc = load_run(folder / run_name(cell, seed)).scalar("val_loss").sort_values("step")
        rows.append({**cell.as_dict(), "y": float(sc["value"].iloc[-1])})
    return design, out, pd.DataFrame(rows)


@pytest.mark.skipif(not (SAMPLE / ".sweep" / "design.json").is_file(), reason="the sample sweep is not here")
def test_effects_of_the_sample_sweep_equal_a_hand_computation_from_its_runs(capsys):
    """The recorded half fraction: each main effect is a difference of means (the columns are orthogonal),
    its standard error the additive model's residual variance over 6 + 6 runs."""
    design, out, df = effects_and_final_losses(SAMPLE, SAMPLE_DESIGN, capsys)
    y = df["y"].to_numpy()
    fitted = np.full(len(df), y.mean())
    hand = {}
    for f in design.factors:
        hi = df[f.name] == f.levels[1]
        effect = y[hi].mean() - y[~hi].mean()
        hand[f.name] = effect
        fitted += np.where(hi, effect / 2, -effect / 2)
    dof = len(df) - 1 - len(design.factors)
    se = math.sqrt(((y - fitted) ** 2).sum() / dof * (1 / 6 + 1 / 6))
    main_rows = out[out["term"] == "main"]
    assert len(main_rows) == 3 and main_rows["metric"].eq("val_loss").all()
    for row in main_rows.itertuples():
        assert row.effect == pytest.approx(hand[row.factors], abs=1e-9)
        assert row.se == pytest.approx(se, rel=1e-6)
        assert row.df == dof
    assert out.loc[out["term"] == "interaction", "effect"].isna().all()  # aliased in the fraction


SMALL = Path(__file__).resolve().parents[1] / "sample_logs" / "sweep_ablation_small"
SMALL_DESIGN = Path(__file__).resolve().parents[1] / "scripts" / "ablation_small.toml"


@pytest.mark.skipif(not (SMALL / ".sweep" / "design.json").is_file(), reason="the small sample sweep is not here")
def test_effects_of_the_full_factorial_sample_equal_contrasts_of_its_cell_means(capsys):
    """The 2 x 2 x 2 sample over three seeds: in a balanced full factorial each main effect is the
    difference of the two halves' means and each interaction the mean over the third factor of a
    difference of differences, whatever the model leaves out (the three-way term is orthogonal)."""
    design, out, df = effects_and_final_losses(SMALL, SMALL_DESIGN, capsys)
    assert len(df) == 24
    names = [f.name for f in design.factors]
    levels = {f.name: f.levels for f in design.factors}
    got = {(r.factors, r.levels): r for r in out.itertuples()}
    for f in names:
        lo, hi = levels[f]
        want = df.loc[df[f] == hi, "y"].mean() - df.loc[df[f] == lo, "y"].mean()
        row = got[(f, f"{hi} vs {lo}")]
        assert row.effect == pytest.approx(want, abs=1e-9) and row.df == 24 - 7
    for f, g in itertools.combinations(names, 2):
        (h,) = set(names) - {f, g}
        m = df.groupby([f, g, h])["y"].mean()
        (f0, f1), (g0, g1) = levels[f], levels[g]
        want = np.mean([m[f1, g1, x] - m[f1, g0, x] - m[f0, g1, x] + m[f0, g0, x] for x in levels[h]])
        assert got[(f"{f} x {g}", f"{f1} x {g1}")].effect == pytest.approx(want, abs=1e-9)


def test_a_frontier_sweeps_effects_read_one_configurations_row_of_each_run(tmp_path, capsys):
    """``ppl@CONFIGURATION``: each run's perplexity of that configuration (exp of its blocks' mean loss,
    recomputed here from the events); the main effect is a difference of cell means averaged over the
    other factor, as in the 2 x 2 hand computation above."""
    from aah_viz.cli import main
    from aah_viz.runlog import load_run
    from aah_viz.samples import make_synthetic_frontier_run
    from aah_viz.sweep.design import load_design, run_name

    path = tmp_path / "design.toml"
    path.write_text(
        'command = "frontier"\nseeds = [0, 1, 2]\n[fixed]\nmodel = "m"\ndata = "t.txt"\n'
        '[factors]\ngrouping = ["feature", "random"]\nadapt_steps = { key = "adapt_steps", levels = [2, 4] }\n'
    )
    design = load_design(path)
    logs = tmp_path / "logs"
    ppl = {}
    for k, (cell, seed) in enumerate(design.trials()):
        run = load_run(make_synthetic_frontier_run(logs / run_name(cell, seed), seed=k))
        for detail in run.events("inference")["detail"]:
            d = json.loads(detail)
            if d["configuration"] == "sliding_window_8":
                nll = sum(d["block_nll"]) / (d["tokens_per_block"] * len(d["block_nll"]))
                ppl[(cell.as_dict()["grouping"], str(cell.as_dict()["adapt_steps"]), seed)] = math.exp(nll)
    # a frontier sweep names its configuration; a plain training metric is refused with what it offers
    assert main(["effects", str(logs), "--design", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ppl@sliding_window_8" in err and "ppl@full_adaptive_adapted" in err
    assert main(["effects", str(logs), "--design", str(path), "--metric", "ppl@unpatched,bogus@x"]) == 2
    assert "bogus@x" in capsys.readouterr().err

    args = ["effects", str(logs), "--design", str(path), "--metric", "ppl@sliding_window_8", "--format", "csv"]
    assert main(args) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out.split("\n\n")[0]))
    cell = {(g, a): np.mean([ppl[(g, a, s)] for s in range(3)]) for g in ("feature", "random") for a in ("2", "4")}
    want = np.mean([cell["random", a] - cell["feature", a] for a in ("2", "4")])
    got = out[(out["term"] == "main") & (out["factors"] == "grouping")]
    assert len(got) == 1 and got["metric"].iloc[0] == "ppl@sliding_window_8"
    assert got["effect"].iloc[0] == pytest.approx(want, rel=1e-9)
    # a configuration no run has: one line naming what they have
    assert main(args[:4] + ["--metric", "ppl@nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ppl@nowhere" in err and "ppl@unpatched" in err
