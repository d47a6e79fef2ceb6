"""The run-entry gate for the commands tests/test_run_entries_commands.py does not reach: ``retrofit`` (its
``--out`` a link, and ``--resume`` over a run whose entry is a link out), ``compare`` (reading and writing
probed runs), the benches that read or write runs (``bench hooks --out``, ``bench dashboard --logs``) and the
``import-*`` commands. Each entry in turn is a symbolic link out of the run to a folder (or file) holding a
decoy: the command refuses in one line (``aah-viz: error: ...``, exit 2), the decoy is untouched and nothing
is created outside.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_compare import _make_run
from test_run_entries import decoy, snapshot

from aah_viz.cli import main


def one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in err if "error:" in line or "Traceback" in line]
    assert rc == 2 and len(errors) == 1 and errors[0].startswith("aah-viz: error: "), (argv, rc, err)
    return errors[0]


def link_out(run: Path, entry: str, outside: Path) -> Path:
    """Replace ``run/entry`` by a link to an outside decoy holding the entry's own content (so that reading
    through the link would work) beside the decoy files: a folder, or a file for a ``.json`` entry."""
    target = run / entry
    if entry.endswith(".json"):
        outside.mkdir(parents=True, exist_ok=True)
        copy = outside / f"decoy-{entry}"
        copy.write_bytes(target.read_bytes() if target.is_file() else b"{}")
        target.unlink(missing_ok=True)
        target.symlink_to(copy)
        return target
    folder = decoy(outside, entry)
    if target.is_dir():
        shutil.copytree(target, folder, dirs_exist_ok=True)
        shutil.rmtree(target)
    target.symlink_to(folder, target_is_directory=True)
    return target


# ---------------------------------------------------------------------------------------------- compare
COMPARE = ["--permutations", "5", "--bootstrap", "5"]
PROBED_ENTRIES = ["manifest.json", "summary.json", "heads", "probe_heads", "comparisons", "window_association"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Path:
    return _make_run(tmp_path_factory.mktemp("probed") / "run")


@pytest.mark.parametrize("write", [True, False], ids=["writing", "--no-write"])
@pytest.mark.parametrize("entry", PROBED_ENTRIES)
def test_compare_over_a_run_with_a_linked_entry_is_one_line(probed, tmp_path, entry, write, capsys):
    """Before: with ``--no-write`` compare read the tables (and the manifest) through the link, exit 0."""
    run = tmp_path / "run"
    shutil.copytree(probed, run)
    outside = tmp_path / "outside"
    link_out(run, entry, outside)
    before = snapshot(outside)
    err = one_line(capsys, ["compare", str(run), *COMPARE, *([] if write else ["--no-write"])])
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before


def test_compare_refuses_before_writing_any_run(probed, tmp_path, capsys):
    """Two runs, the second damaged: the first is not written either (every run is checked before any write)."""
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(probed, first)
    shutil.copytree(probed, second)
    link_out(second, "probe_heads", tmp_path / "outside")
    err = one_line(capsys, ["compare", str(first), str(second), *COMPARE])
    assert str(second) in err and "probe_heads" in err, err
    assert not (first / "comparisons").exists()


# ---------------------------------------------------------------------------------------------- readers
@pytest.mark.parametrize("command", ["export", "figure", "export tensorboard"])
@pytest.mark.parametrize("entry", ["manifest.json", "summary.json", "heads"])
def test_readers_of_a_run_with_a_linked_entry_are_one_line(probed, tmp_path, entry, command, capsys):
    """Before: export, figure and export tensorboard read the run's tables through the link, exit 0."""
    run = tmp_path / "run"
    shutil.copytree(probed, run)
    outside = tmp_path / "outside"
    link_out(run, entry, outside)
    before = snapshot(outside)
    out = tmp_path / "out"
    argv = {
        "export": ["export", str(run), "--table", "training", "--out", str(out)],
        "figure": ["figure", str(run), "--kind", "window_heatmap", "--out", str(tmp_path / "fig.svg")],
        "export tensorboard": ["export", "tensorboard", str(run), "--out", str(out), "--no-progress"],
    }[command]
    err = one_line(capsys, argv)
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before and not out.exists() and not (tmp_path / "fig.svg").exists()


# ---------------------------------------------------------------------------------------------- benches
def test_bench_dashboard_on_logs_holding_a_run_with_a_linked_entry_is_one_line(probed, tmp_path, capsys):
    logs = tmp_path / "logs"
    shutil.copytree(probed, logs / "run")
    link_out(logs / "run", "heads", tmp_path / "outside")
    before = snapshot(tmp_path / "outside")
    err = one_line(capsys, ["bench", "dashboard", "--pages", "--logs", str(logs), "--quiet", "--repeats", "1"])
    assert "heads" in err and "symbolic link" in err, err
    assert snapshot(tmp_path / "outside") == before


@pytest.mark.parametrize("kind", ["dangling", "to a file"])
def test_bench_hooks_into_an_out_linked_to_nothing_or_a_file_is_one_line(tmp_path, kind, capsys):
    elsewhere = tmp_path / "elsewhere"
    if kind == "to a file":
        elsewhere.write_text("not a folder")
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    err = one_line(capsys, ["bench", "hooks", "--preset", "tiny", "--steps", "1", "--skip", "0", "--out", str(out)])
    assert str(out) in err, err
    assert not elsewhere.exists() if kind == "dangling" else elsewhere.read_text() == "not a folder"


# ---------------------------------------------------------------------------------------------- import-*
@pytest.mark.parametrize("entry", ["manifest.json", "summary.json", "heads", "tensorboard"])
def test_import_reference_over_a_run_with_a_linked_entry_is_one_line(tmp_path, entry, capsys):
    out = tmp_path / "ref"
    assert main(["import-reference", "--out", str(out)]) == 0
    run = out / "qwen3-4b-full-adaptive"
    link_out(run, entry, tmp_path / "outside")
    before = snapshot(tmp_path / "outside")
    err = one_line(capsys, ["import-reference", "--out", str(out), "--overwrite"])
    assert entry in err and "symbolic link" in err, err
    assert snapshot(tmp_path / "outside") == before


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    from test_gguf_import import _tiny_llama, write_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, _tiny_llama(), q8_embedding=True)
    return path


@pytest.mark.parametrize("kind", ["dangling", "to a file"])
def test_import_gguf_into_an_out_linked_to_nothing_or_a_file_is_one_line(tiny_gguf, tmp_path, kind, capsys):
    """Before: "Not a directory" naming a hidden folder (dangling), "exists and is not an empty folder" (file)."""
    elsewhere = tmp_path / "elsewhere"
    if kind == "to a file":
        elsewhere.write_text("not a folder")
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    err = one_line(capsys, ["import-gguf", str(tiny_gguf), str(out), "--no-progress"])
    assert str(out) in err and ("does not exist" in err if kind == "dangling" else "not a folder" in err), err
    assert not elsewhere.exists() if kind == "dangling" else elsewhere.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out"] if kind == "dangling" else ["elsewhere", "out"])


def test_import_gguf_into_an_out_linked_to_an_empty_folder_follows_it(tiny_gguf, tmp_path):
    """Before: "Not a directory" (the link's name was removed as a folder)."""
    pytest.importorskip("transformers")
    target = tmp_path / "big-disk" / "model"
    target.mkdir(parents=True)
    out = tmp_path / "model"
    out.symlink_to(target, target_is_directory=True)
    assert main(["import-gguf", str(tiny_gguf), str(out), "--no-progress"]) == 0
    assert out.is_symlink() and (target / "config.json").is_file()
    assert sorted(p.name for p in (tmp_path / "big-disk").iterdir()) == ["model"]  # no partial folder left


# ---------------------------------------------------------------------------------------------- retrofit
@pytest.fixture(scope="module")
def retrofitted(tmp_path_factory, tiny_causal_lm) -> tuple[list[str], Path]:
    """A tiny random Llama folder and a one-step retrofit run of it (the command line, the run)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("retrofit")
    model = tiny_causal_lm(root / "llama")
    text = root / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(200)))
    argv = ["retrofit", str(model), "--data", str(text), "--steps", "1", "--seq-len", "16", "--windows", "4,8,16"]
    argv += ["--no-progress", "--threads", "1"]
    assert main([*argv, "--out", str(root / "run")]) == 0
    return argv, root / "run"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dangling", "to a file", "to a folder"])
def test_retrofit_into_an_out_that_is_a_link(retrofitted, tmp_path, kind, capsys):
    """A link to a folder is followed (the user's choice of disk); to nothing or to a file: one line."""
    argv, _ = retrofitted
    elsewhere = tmp_path / "elsewhere"
    if kind == "to a file":
        elsewhere.write_text("not a folder")
    if kind == "to a folder":
        elsewhere.mkdir()
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    if kind == "to a folder":
        assert main([*argv, "--out", str(out)]) == 0
        assert out.is_symlink() and (elsewhere / "manifest.json").is_file() and any((elsewhere / "adapters").iterdir())
        return
    err = one_line(capsys, [*argv, "--out", str(out)])
    assert str(out) in err and ("does not exist" in err if kind == "dangling" else "not a folder" in err), err
    assert not elsewhere.exists() if kind == "dangling" else elsewhere.read_text() == "not a folder"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["tensorboard", "manifest.json", "summary.json", "heads", "adapters"])
def test_retrofit_resume_over_a_linked_entry_is_one_line(retrofitted, tmp_path, entry, capsys):
    pytest.importorskip("tensorboard")
    argv, trained = retrofitted
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    outside = tmp_path / "outside"
    link_out(run, entry, outside)
    before = snapshot(outside)
    resume = [*argv, "--out", str(run), "--resume", "--steps", "2", "--report-to", "tensorboard"]
    err = one_line(capsys, resume)
    assert entry in err and "symbolic link" in err, err
    assert snapshot(outside) == before
