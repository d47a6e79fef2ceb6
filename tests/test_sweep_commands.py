"""Retrofit and frontier as a sweep cell's command: the design's keys checked against the command before
anything runs, the trial's command line, its continuation, and a real sweep of ``aah-viz retrofit`` on a
tiny random model folder made here (slow)."""

from __future__ import annotations

import json

import pytest

from aah_viz.sweep import plan
from aah_viz.sweep.commands import resume_argv, trial_argv
from aah_viz.sweep.design import DesignError, load_design
from aah_viz.sweep.vocabulary import COMMAND_FLAGS

TEXT = "Colourless green ideas sleep furiously. " * 60 + "A stitch in time saves nine. " * 60


def write(tmp_path, text, name="design.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def design_text(command: str, fixed: str, factors: str = 'grouping = ["feature", "random"]\n') -> str:
    return f'command = "{command}"\nseeds = [0]\n[fixed]\n{fixed}\n[factors]\n{factors}'


@pytest.mark.parametrize("command", ["retrofit", "frontier"])
def test_the_commands_flags_are_their_parsers(command):
    from aah_viz.cli import build_parser

    parser = build_parser()._subparsers._group_actions[0].choices[command]
    flags = {opt for action in parser._actions for opt in action.option_strings}
    assert set(COMMAND_FLAGS[command].values()) <= flags
    assert "model_dir" in {action.dest for action in parser._actions}  # the positional the design's model fills


def test_a_retrofit_cell_runs_retrofit_on_its_model_and_resumes_with_its_adapters(tmp_path):
    fixed = 'model = "m"\ndata = "t.txt"\nsteps = 4\nwindows = [8, 16]\nwindow = 8\ncontrol_interval = 2'
    d = load_design(write(tmp_path, design_text("retrofit", fixed)))
    cell = d.cells[1]  # grouping = random
    argv = trial_argv(d, cell, 3, "/logs/run")
    assert argv[:2] == ["retrofit", "m"]
    pairs = dict(zip(argv[2::2], argv[3::2]))
    assert pairs["--data"] == "t.txt" and pairs["--steps"] == "4" and pairs["--windows"] == "8,16"
    assert pairs["--seed"] == "3" and pairs["--out"] == "/logs/run"
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets == ["control_interval=2", "build_hierarchy=true", 'hierarchy_ablation_mode="fixed_random"']
    assert resume_argv(d, cell, 3, "/logs/run") == argv + ["--resume"]  # retrofit needs its model and text again
    # a frontier goes on when run again with the same line; train reads its own record
    f = load_design(write(tmp_path, design_text("frontier", 'model = "m"\ndata = "t.txt"\nadapt_steps = 2'), "f.toml"))
    assert resume_argv(f, f.cells[0], 0, "/o") == trial_argv(f, f.cells[0], 0, "/o")[:]
    assert trial_argv(f, f.cells[0], 0, "/o")[:4] == ["frontier", "m", "--data", "t.txt"]


@pytest.mark.parametrize(
    ("command", "fixed", "named"),
    [
        ("retrofit", 'data = "t.txt"', "command 'retrofit' needs model (the model folder)"),
        ("frontier", 'model = "m"', "command 'frontier' needs data (the text file)"),
        ("retrofit", 'model = "m"\ndata = "t.txt"\nwindows = [true]', "windows must be a list"),
        ("frontier", 'model = "m"\ndata = "t.txt"\nretrieval = -1', "retrieval must be an integer >= 0"),
        ("frontier", 'model = "m"\ndata = "t.txt"\ntiming_pairs = 1', "timing_pairs must be an integer >= 2"),
        ("frontier", 'model = "m"\ndata = "t.txt"\neval_share = 1', "eval_share must be a number between 0 and 1"),
    ],
)
def test_a_design_that_misses_what_its_command_needs_is_refused(tmp_path, command, fixed, named):
    with pytest.raises(DesignError) as err:
        load_design(write(tmp_path, design_text(command, fixed)))
    assert named in str(err.value) and "\n" not in str(err.value)


def test_keys_that_do_not_fit_the_command_are_refused_before_anything_runs(tmp_path, capsys):
    """Through the command line: one line naming the key and the command, exit 2, no logs root made. Nothing
    runs, so the model folder needs only the file the check reads (the slow test below runs a real one)."""
    from aah_viz.cli import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "t.txt").write_text(TEXT)
    where = f'model = "{model}"\ndata = "{tmp_path / "t.txt"}"'
    logs = tmp_path / "logs"
    cases = [
        ("retrofit", where + '\npreset = "tiny"', "[fixed] sets 'preset', an argument of aah-viz train that"),
        ("frontier", where + "\nsteps = 5", "[fixed] sets 'steps', an argument of aah-viz train and retrofit"),
        ("frontier", where + '\nregime = "grouping_off"', "sets 'regime', an argument of aah-viz train and retrofit"),
        ("train", 'model = "m"', "[fixed] sets 'model', train builds its model from a preset"),
        ("retrofit", where + "\nno_such_key = 1", "neither an aah-viz retrofit argument nor a model config key"),
        ("retrofit", f'model = "{tmp_path}"\ndata = "t.txt"', "is not a model folder (no config.json there)"),
    ]
    for i, (command, fixed, named) in enumerate(cases):
        path = write(tmp_path, design_text(command, fixed), f"d{i}.toml")
        assert main(["sweep", str(path), "--logs", str(logs), "--dry-run"]) == 2  # a miss lists, never runs
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("aah-viz: error: "), lines
        assert named in lines[0], lines[0]
        assert not logs.exists()
    levels = '[factors.steps]\nshort = { steps = 2 }\nlong = { preset = "small" }\n'
    path = write(tmp_path, f'command = "retrofit"\n[fixed]\n{where}\n{levels}', "levels.toml")
    assert main(["sweep", str(path), "--logs", str(logs), "--dry-run"]) == 2
    assert "factor 'steps' level 'long' sets 'preset', an argument of aah-viz train" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.torch
def test_a_retrofit_sweep_on_a_model_folder_writes_a_run_per_trial_and_its_effects(tmp_path, capsys, tiny_causal_lm):
    """Two cells x one seed of ``aah-viz retrofit`` through the local executor; a second call does nothing;
    ``aah-viz effects`` reads the runs. One run is then cut back to unfinished and continued by the sweep."""
    from aah_viz.cli import main
    from aah_viz.runlog import load_run, validate_run

    model = tiny_causal_lm(tmp_path / "model", family="qwen3")
    (tmp_path / "t.txt").write_text(TEXT)
    fixed = (
        f'model = "{model}"\ndata = "{tmp_path / "t.txt"}"\nsteps = 4\nwindows = [8, 16, 32]\neval_interval = 2\n'
        'eval_batches = 1\ncheckpoint_interval = 2\ndetail = "light"'
    )
    path = write(tmp_path, design_text("retrofit", fixed, 'scoring = ["joint", "independent"]\n'))
    logs = tmp_path / "logs"
    assert main(["sweep", str(path), "--logs", str(logs), "--workers", "2", "--threads", "1", "--no-progress"]) == 0
    design = load_design(path)
    trials = plan.plan_trials(design, logs)
    assert [t.state for t in trials] == ["done", "done"]
    for t in trials:
        assert validate_run(t.run_dir) == []
        run = load_run(t.run_dir)
        assert run.manifest["retrofit"]["train"] == "aah"
        assert sorted(set(run.table("heads")["step"])) == [0, 1, 2, 3]
        mode = "none" if "independent" in t.name else "joint_sibling"
        assert run.manifest["config"]["controller_pairwise_mode"] == mode
    capsys.readouterr()
    assert main(["effects", str(logs), "--metric", "val_loss", "--table", "cells", "--format", "csv"]) == 0
    cells = capsys.readouterr().out
    assert "joint" in cells and "independent" in cells

    # a trial left unfinished (its manifest says running) is continued with retrofit --resume
    manifest = trials[0].run_dir / "manifest.json"
    record = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**record, "status": "stopped"}))
    again = plan.plan_trials(design, logs, threads=1)
    assert again[0].state == "resume" and again[0].argv[:2] == ("retrofit", str(model)) and "--resume" in again[0].argv
    assert main(["sweep", str(path), "--logs", str(logs), "--threads", "1", "--no-progress"]) == 0
    assert load_run(trials[0].run_dir).status == "finished"
    assert sorted(set(load_run(trials[0].run_dir).table("heads")["step"])) == [0, 1, 2, 3]


@pytest.mark.slow
@pytest.mark.torch
def test_a_frontier_sweep_on_a_model_folder_writes_a_frontier_per_trial(tmp_path, capsys, tiny_causal_lm):
    """Two cells x one seed of ``aah-viz frontier`` (one adapted regime each): a frontier run per trial with
    its adaptation beside it, the cell's setting in the adapted run's config; a second call has nothing to do."""
    from aah_viz.analysis.frontier import event_details
    from aah_viz.cli import main
    from aah_viz.runlog import load_run

    model = tiny_causal_lm(tmp_path / "model", family="llama")
    lines = "".join(f"Line {i}: colourless green ideas sleep furiously, a stitch in time.\n" for i in range(200))
    (tmp_path / "t.txt").write_text(lines)
    fixed = (
        f'model = "{model}"\ndata = "{tmp_path / "t.txt"}"\nseq_len = 32\nwindows = [8, 16, 32]\neval_blocks = 2\n'
        'profile_blocks = 1\ntiming_pairs = 2\nregimes = ["full_adaptive"]\nadapt_steps = 2'
    )
    path = write(tmp_path, design_text("frontier", fixed, 'scoring = ["joint", "independent"]\n'))
    logs = tmp_path / "logs"
    assert main(["sweep", str(path), "--logs", str(logs), "--workers", "2", "--threads", "1", "--no-progress"]) == 0
    for t in plan.plan_trials(load_design(path), logs):
        assert t.state == "done"
        run = load_run(t.run_dir)
        assert run.manifest["regime"] == "frontier"
        configurations = {d["configuration"] for d in event_details(run.events("inference"))}
        assert {"unpatched", "full_adaptive_adapted"} <= configurations
        adapted = load_run(t.run_dir.parent / f"{t.name}-full_adaptive")
        mode = "none" if "independent" in t.name else "joint_sibling"
        assert adapted.manifest["config"]["controller_pairwise_mode"] == mode
    capsys.readouterr()
    assert main(["sweep", str(path), "--logs", str(logs), "--dry-run"]) == 0
    assert "2 trials: 2 done" in capsys.readouterr().out
