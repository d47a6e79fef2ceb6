"""No traceback from any argument: a walk over the CLI's own parser (every subcommand, every option that takes
a value, read from argparse, so a new option is covered without editing this test) feeding each option values
of its kind's hostile classes. Every case exits 2 with one line naming the option and the value, or succeeds;
no traceback, no hang (a deadline of minutes that names the case).

The parser level runs over every command here. Running the commands needs a baseline command line for each;
the default run covers the light commands (validate, compact, export, figure, head-similarity, dashboard's
serving options) and the ``slow`` mark adds the ones that load torch models (train, evaluate, retrofit).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import traceback
from pathlib import Path

import pytest
from waiting import PATIENCE_S

from aah_viz.cli import build_parser, main

LONG = "x" * 100_000
NUMBERS = {
    int: ["0", "-1", "1e12", "99999999999", "nan", ""],
    float: ["nan", "inf", "-inf", "-1", "0", "1e12", "1e400", ""],
}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(the words naming a subcommand, its parser) for every subcommand at any depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def valued_options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in sub._actions
        if a.option_strings and a.nargs != 0 and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
    ]


def hostile_values(action: argparse.Action, places: dict[str, str]) -> list[str]:
    """The hostile classes of the option's kind: numbers for int and float options, else strings and paths."""
    if action.type in NUMBERS:
        return NUMBERS[action.type]
    return [
        "",
        LONG,
        "nan",
        "-1",
        places["missing"],
        places["folder"],
        places["fifo"],
        places["link_out"],
        places["file"],
    ]


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("not the user's")
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    (root / "file").write_text("a plain file where a folder or a model is expected\n")
    return {k: str(root / k) for k in ("folder", "fifo", "link_out", "file")} | {"missing": str(root / "missing")}


def _errors(err: str) -> list[str]:
    """The error lines of a command's stderr (progress bars, e.g. a model's loading bar, are not errors)."""
    return [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """Every case runs in a folder of its own: a value such as ``--out nan`` is a relative path there."""
    monkeypatch.chdir(tmp_path)


def _one_line_naming(err: str, option: str, value: str) -> bool:
    lines = _errors(err)
    said = lines[-1] if len(lines) == 1 else ""
    names_it = option in said or option.lstrip("-").replace("-", "_") in said or value[:20] in said
    return "error" in said and names_it and "Traceback" not in err


def test_every_option_of_every_command_parses_hostile_values_or_refuses_them_in_one_line(places):
    parser = build_parser()
    bad = []
    for path, sub in commands(parser):
        required = []
        for a in sub._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            if not a.option_strings and a.nargs in (None, "+"):
                required.append("X")
            elif a.option_strings and a.required:
                required += [a.option_strings[0], "X"]
        for action in valued_options(sub):
            for value in hostile_values(action, places):
                err = io.StringIO()
                try:
                    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                        parser.parse_args([*path, *required, action.option_strings[0], value])
                except SystemExit as stop:
                    if stop.code != 2 or not _one_line_naming(err.getvalue(), action.option_strings[0], value):
                        bad.append((path, action.option_strings[0], value[:30], err.getvalue()[-200:]))
                except Exception as exc:  # noqa: BLE001 - the finding: a traceback from parsing
                    bad.append((path, action.option_strings[0], value[:30], repr(exc)))
    assert not bad, bad[:10]


# --------------------------------------------------------------------------- running the commands
class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


def run_case(argv: list[str]) -> tuple[int | None, str]:
    """(exit code, stderr) of ``main(argv)`` in this process; code None with the traceback for an exception."""
    err = io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(PATIENCE_S))
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except SystemExit as stop:
        code = stop.code
    except Hang:
        return None, f"no answer within {PATIENCE_S:.0f} s: {argv[:6]}"
    except Exception:  # noqa: BLE001 - the finding
        return None, traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue()


def walk_command(path: tuple[str, ...], baseline: list[str], places, only: set[str] | None = None) -> tuple[int, list]:
    """Every valued option of the command ``path``, each hostile value on top of ``baseline``."""
    sub = dict(commands(build_parser()))[path]
    findings, cases = [], 0
    for action in valued_options(sub):
        option = action.option_strings[0]
        if only is not None and option not in only:
            continue
        for value in hostile_values(action, places):
            cases += 1
            code, err = run_case([*path, *baseline, option, value])
            if code == 0 or (code == 2 and _one_line_naming(err, option, value)):
                continue
            if code == 2 and len(_errors(err)) == 1 and "Traceback" not in err:
                continue  # refused in one line by what the value led to (a missing file, a damaged run)
            findings.append((option, value[:30], code, err.strip()[-300:]))
    return cases, findings


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    from aah_viz.samples import make_synthetic_run

    return make_synthetic_run(tmp_path_factory.mktemp("runs") / "r", n_layer=2, n_head=4, steps=8, flush_every=4)


LIGHT = {
    ("compact",): lambda run, out: [str(run)],
    ("export",): lambda run, out: [str(run), "--out", str(out), "--table", "training"],
    ("figure",): lambda run, out: [str(run), "--out", str(out)],
}


@pytest.mark.parametrize("path", list(LIGHT), ids=lambda p: " ".join(p))
def test_light_commands_refuse_hostile_values_in_one_line_or_succeed(path, synthetic, places, tmp_path):
    cases, findings = walk_command(path, LIGHT[path](synthetic, tmp_path / "out"), places)
    assert cases > 0 and not findings, findings[:5]


def test_dashboard_refuses_a_port_or_address_it_cannot_serve_on(places):
    """--port 99999, --port -1, --address 999.1.1.1 and the like: one line before Streamlit starts."""
    cases = [("--port", v) for v in ("99999", "-1", "0", "65536")] + [
        ("--address", v) for v in ("999.1.1.1", "", LONG, "not a host name!")
    ]
    for option, value in cases:
        code, err = run_case(["dashboard", "--logs", places["folder"], option, value])
        assert code == 2 and _one_line_naming(err, option, value), (option, value[:20], err[-300:])


# the commands that load torch models: their whole walk is slow, a few representative options run by default
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "the quick brown fox jumps over the lazy dog, again and again.\n" * 80


@pytest.fixture(scope="module")
def heavy(tmp_path_factory, tiny_causal_lm) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heavy")
    (root / "text.txt").write_text(TEXT)
    return {"model": tiny_causal_lm(root / "llama"), "text": root / "text.txt", "root": root}


def _heavy_baselines(h, out) -> dict[tuple[str, ...], list[str]]:
    train = ["--out", str(out), "--preset", "tiny", "--steps", "2", "--n-docs", "20", "--no-progress", "--overwrite"]
    retro = [str(h["model"]), "--data", str(h["text"]), "--out", str(out), "--steps", "1", "--seq-len", "16"]
    retro.append("--overwrite")
    evaluate = [str(h["model"]), "--data", str(h["text"]), "--out", str(out), "--regime", "full_attention"]
    evaluate.append("--overwrite")
    return {
        ("train",): [*train, "--threads", "1"],
        ("retrofit",): [*retro, "--windows", "4,8,16", "--no-progress", "--threads", "1"],
        ("evaluate",): [*evaluate, "--windows", "4,8,16", "--seq-len", "16", "--no-progress", "--threads", "1"],
    }


REPRESENTATIVE = {
    ("train",): {"--lr", "--batch-size", "--set", "--device"},
    ("retrofit",): {"--lr", "--batch-size", "--set"},
    ("evaluate",): {"--batches", "--batch-size"},
}


@pytest.mark.slow
@pytest.mark.parametrize("path", list(REPRESENTATIVE), ids=lambda p: " ".join(p))
def test_model_commands_refuse_hostile_values_of_representative_options(path, heavy, places, tmp_path):
    baseline = _heavy_baselines(heavy, tmp_path / "out")[path]
    cases, findings = walk_command(path, baseline, places, only=REPRESENTATIVE[path])
    assert cases > 0 and not findings, findings[:5]


@pytest.mark.slow
@pytest.mark.parametrize("path", list(REPRESENTATIVE), ids=lambda p: " ".join(p))
def test_model_commands_refuse_hostile_values_of_every_option(path, heavy, places, tmp_path):
    baseline = _heavy_baselines(heavy, tmp_path / "out")[path]
    cases, findings = walk_command(path, baseline, places)
    assert cases > 0 and not findings, findings[:8]


def test_the_cases_that_ended_in_a_traceback_are_one_line(places, synthetic, tmp_path):
    """The adversarial pass's findings, each by its own command line."""
    outside = Path(places["link_out"]).resolve()
    export_out = tmp_path / "tb"
    export_out.mkdir()
    (export_out / synthetic.name).symlink_to(outside, target_is_directory=True)
    cases = {
        "--set block_size=10^12": ["train", "--out", str(tmp_path / "r"), "--preset", "tiny", "--steps", "1",
                                   "--set", "block_size=1000000000000", "--no-progress"],
        "bench compact --segments 0": ["bench", "compact", "--segments", "0"],
        "retrofit --lr nan": ["retrofit", places["folder"], "--data", places["file"], "--out", "o", "--lr", "nan"],
        "retrofit --batch-size 0": ["retrofit", places["folder"], "--data", places["file"], "--out", "o",
                                    "--batch-size", "0"],
        "evaluate --threads -1": ["evaluate", str(synthetic), "--data", places["file"], "--out", "o",
                                  "--threads", "-1"],
        "dashboard --port 99999": ["dashboard", "--logs", places["folder"], "--port", "99999"],
        "import-reference --out FILE": ["import-reference", "--out", places["file"]],
        "export tensorboard --overwrite over a link": ["export", "tensorboard", str(synthetic), "--out",
                                                      str(export_out), "--overwrite"],
    }  # fmt: skip
    before = sorted(p.name for p in outside.iterdir())
    for name, argv in cases.items():
        code, err = run_case(argv)
        assert code == 2 and len(_errors(err)) == 1 and "Traceback" not in err, (name, err[-500:])
    assert sorted(p.name for p in outside.iterdir()) == before
