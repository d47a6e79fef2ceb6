"""The sweep's design file: parsed, expanded into cells (full and fractional), refused before anything runs
with one line naming the factor; the trial commands and the recorded design that refuses a changed one."""

from __future__ import annotations

import itertools
import json

import pytest

from aah_viz.sweep import plan
from aah_viz.sweep.commands import trial_argv
from aah_viz.sweep.design import DesignError, load_design, parse_design, parse_run_name, run_name
from aah_viz.sweep.vocabulary import TRAIN_FLAGS

BASE = """
seeds = [0, 1]
[fixed]
preset = "tiny"
steps = 3
warmup_steps = 1
"""


def write(tmp_path, text, name="design.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_full_factorial_cells_in_design_order_with_their_settings(tmp_path):
    d = load_design(
        write(tmp_path, BASE + '[factors]\ngrouping = ["feature", "random"]\nfeature_ema = ["on", "off"]\n')
    )
    assert [c.as_dict() for c in d.cells] == [
        {"grouping": g, "feature_ema": e} for g, e in itertools.product(["feature", "random"], ["on", "off"])
    ]
    assert len(d.trials()) == 8
    cell = d.cells[3]  # random, off
    assert d.settings(cell) == {
        "preset": "tiny",
        "steps": 3,
        "warmup_steps": 1,
        "build_hierarchy": True,
        "hierarchy_ablation_mode": "fixed_random",
        "ema_alpha": 0.0,
    }
    argv = trial_argv(d, cell, 1, "/logs/x")
    assert argv[:9] == ["train", "--preset", "tiny", "--steps", "3", "--seed", "1", "--out", "/logs/x"]
    sets = dict(a.split("=", 1) for a in argv[10::2])
    assert argv[9::2] == ["--set"] * len(sets)
    assert {k: json.loads(v) for k, v in sets.items()} == {
        "warmup_steps": 1,
        "build_hierarchy": True,
        "hierarchy_ablation_mode": "fixed_random",
        "ema_alpha": 0.0,
    }


def test_custom_factors_and_run_names_round_trip():
    d = parse_design(
        {
            "seeds": 2,
            "factors": {
                "lr": {"key": "lr", "levels": [0.0001, 0.0003]},
                "scorer": {
                    "joint": {"controller_pairwise_mode": "joint_sibling"},
                    "alone": {"parent_constraint": False},
                },
            },
        }
    )
    assert d.seeds == (0, 1)
    assert d.factor("lr").levels == ("0_0001", "0_0003")
    for cell, seed in d.trials():
        name = run_name(cell, seed)
        assert parse_run_name(name) == (cell.as_dict(), seed)
    assert parse_run_name("not-a-trial") is None


def test_fraction_by_generator_is_balanced_and_follows_the_defining_relation():
    d = parse_design(
        {
            "factors": {
                "a": {"lo": {"lr": 0.1}, "hi": {"lr": 0.2}},
                "b": {"lo": {"steps": 2}, "hi": {"steps": 3}},
                "c": {"lo": {"warmup_steps": 1}, "hi": {"warmup_steps": 2}},
            },
            "fraction": ["c = a * b"],
        }
    )
    code = {"lo": -1, "hi": 1}
    cells = [c.as_dict() for c in d.cells]
    assert len(cells) == 4
    assert all(code[c["c"]] == code[c["a"]] * code[c["b"]] for c in cells)
    for f in "abc":  # every level of every factor twice
        assert sorted(c[f] for c in cells) == ["hi", "hi", "lo", "lo"]
    neg = parse_design({"factors": d.canonical()["factors"], "fraction": ["c = -a * b"]})
    assert {c.name for c in neg.cells}.isdisjoint({c.name for c in d.cells})


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[factors]\ngrouping = ["feature", "off"]\nscoring = ["joint"]\n', "factor 'scoring' needs at least two"),
        ('[factors]\ngrouping = ["feature", "off"]\nscoring = ["joint", "independent"]\n', "factor 'scoring'"),
        ('[factors]\ngrouping = ["random", "off"]\nhierarchy = ["adaptive", "frozen"]\n', "factor 'hierarchy'"),
        ('[factors]\ngrouping = ["feature", "sideways"]\n', "factor 'grouping' has no level 'sideways'"),
        ('[factors]\ncolour = ["red", "blue"]\n', "factor 'colour' is not a named factor"),
        ('[factors]\nsteps = { key = "steps", levels = [2, 4] }\n', "factor 'steps' level '2' sets steps"),
        ('[factors]\nx = { key = "seed", levels = [1, 2] }\n', "factor 'x' sets 'seed'"),
        ('[factors]\nx = { key = "batch_size", levels = [0, 2] }\n', "factor 'x': batch_size must be an integer >= 1"),
        ('[factors.x]\na = { detail = "all" }\nb = {}\n', "factor 'x' level 'a': detail must be one of full"),
        ('colour = 3\n[factors]\ngrouping = ["feature", "off"]\n', "unknown key(s) 'colour'"),
        ('fraction = ["c = a * b"]\n[factors]\ngrouping = ["feature", "off"]\n', "'c' is not a factor"),
        ('seeds = [1, 1]\n[factors]\ngrouping = ["feature", "off"]\n', "seeds must be distinct"),
    ],
)
def test_bad_designs_are_refused_naming_the_factor(tmp_path, text, named):
    with pytest.raises(DesignError) as err:
        load_design(write(tmp_path, text if text.startswith(("colour", "fraction", "seeds")) else BASE + text))
    assert named in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_refuses_in_one_line_before_anything_runs(tmp_path, capsys):
    """Through the command line: a contradiction and a key the model does not know, exit 2, no run."""
    from aah_viz.cli import main

    logs = tmp_path / "logs"
    cases = {
        '[factors]\ngrouping = ["feature", "off"]\nfeature_ema = ["on", "off"]\n': "factor 'feature_ema'",
        "[factors.mystery]\na = { no_such_key = 1 }\nb = { no_such_key = 2 }\n": "factor 'mystery' level 'a'",
        '[factors.win]\na = { regime = "fixed_window" }\nb = { regime = "no_such_regime" }\n': "cell win=b",
    }
    for i, (text, named) in enumerate(cases.items()):
        path = write(tmp_path, BASE + text, f"d{i}.toml")
        assert main(["sweep", str(path), "--logs", str(logs), "--no-progress"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("aah-viz: error: "), lines
        assert named in lines[0]
        assert not logs.exists()

    # a logs root swept with one design refuses another, unless asked
    first = write(tmp_path, BASE + '[factors]\ngrouping = ["feature", "random"]\n', "first.toml")
    plan.write_design_record(load_design(first), logs)
    other = write(tmp_path, BASE + '[factors]\nfeature_ema = ["on", "off"]\n', "other.toml")
    assert main(["sweep", str(other), "--logs", str(logs), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aah-viz: error: the design differs") and "changed: cells, factors" in err
    assert main(["sweep", str(other), "--logs", str(logs), "--dry-run", "--allow-changed-design"]) == 0
    assert "4 trials: 0 done, 0 to resume, 4 new" in capsys.readouterr().out


def test_design_flags_are_the_train_commands():
    from aah_viz.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {opt for action in train._actions for opt in action.option_strings}
    assert set(TRAIN_FLAGS.values()) <= flags


def test_plan_states_and_the_recorded_design(tmp_path):
    d = load_design(
        write(tmp_path, BASE + '[factors]\nscoring = ["joint", "independent"]\ngrouping = ["random", "feature"]\n')
    )
    logs = tmp_path / "logs"
    trials = plan.plan_trials(d, logs, threads=1)
    assert [t.state for t in trials] == ["new"] * 8
    done, killed, empty = trials[0].run_dir, trials[1].run_dir, trials[2].run_dir
    for run_dir, status in ((done, "finished"), (killed, "running")):
        run_dir.mkdir(parents=True)
        (run_dir / "manifest.json").write_text(json.dumps({"status": status}))
    empty.mkdir()
    again = plan.plan_trials(d, logs, threads=1)
    assert [t.state for t in again] == ["done", "resume", "new"] + ["new"] * 5
    assert again[0].argv == ()
    assert list(again[1].argv) == ["train", "--out", str(killed), "--resume", "--no-progress", "--threads", "1"]
    assert "--overwrite" in again[2].argv and "--overwrite" not in again[3].argv

    plan.write_design_record(d, logs)
    plan.check_design_record(d, logs, allow_changed=False)  # the same design goes on
    recorded = plan.recorded_design(logs)  # what aah-viz effects reads without --design
    assert [c.name for c in recorded.cells] == [c.name for c in d.cells]
    assert recorded.fingerprint() == d.fingerprint()
    changed = load_design(
        write(
            tmp_path,
            BASE.replace("[0, 1]", "[0, 1, 2]")
            + '[factors]\nscoring = ["joint", "independent"]\ngrouping = ["random", "feature"]\n',
        )
    )
    with pytest.raises(DesignError, match="changed: seeds"):
        plan.check_design_record(changed, logs, allow_changed=False)
    plan.check_design_record(changed, logs, allow_changed=True)
