"""The sample-log scripts take their data as arguments and, without it, say what to pass in one line
(exit 2) before anything runs; none of them reads a folder beside the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
TIMEOUT = 600  # a deadline, not a speed: the refusal happens before any model or data is loaded


def _run(args, **env):
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=TIMEOUT)
    return proc.returncode, proc.stdout, proc.stderr.strip().splitlines()


def test_minilm_sample_without_data_says_to_pass_data():
    rc, out, err = _run([sys.executable, str(SCRIPTS / "make_minilm_sample.py")])
    assert rc == 2 and out == ""
    assert len(err) == 1 and "give --data DIR" in err[0] and "en_pud-ud-test.conllu" in err[0]


def test_minilm_sample_names_the_missing_file(tmp_path):
    (tmp_path / "en_pud-ud-test.conllu").write_text("# text = x\n")
    rc, out, err = _run([sys.executable, str(SCRIPTS / "make_minilm_sample.py"), "--data", str(tmp_path)])
    assert rc == 2 and out == ""
    assert len(err) == 1 and "no gap-validation.tsv" in err[0] and f"--data {tmp_path}" in err[0]


def test_minilm_sample_refuses_a_model_folder_without_config(tmp_path):
    for name in ("en_pud-ud-test.conllu", "gap-validation.tsv"):
        (tmp_path / name).write_text("x\n")
    args = [sys.executable, str(SCRIPTS / "make_minilm_sample.py"), "--data", str(tmp_path), "--model", str(tmp_path)]
    rc, _, err = _run(args)
    assert rc == 2 and len(err) == 1 and "--model" in err[0] and "no config.json" in err[0]


def test_make_sample_logs_without_the_real_data_refuses_before_training(tmp_path):
    out = tmp_path / "logs"
    out.mkdir()
    (out / "kept.txt").write_text("committed")
    missing = tmp_path / "no-such-folder"
    rc, stdout, err = _run(
        ["bash", str(SCRIPTS / "make_sample_logs.sh"), "--real-data", str(missing)],
        PYTHON=sys.executable,
        OUT=str(out),
    )
    assert rc == 2 and stdout == ""
    assert len(err) == 1 and err[0].startswith("make_sample_logs.sh: --real-data") and "gap-validation.tsv" in err[0]
    # nothing ran: the output folder is as it was and no staged replacement was started
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]
    assert not (tmp_path / "logs.new").exists()


def test_make_sample_logs_refuses_an_unknown_argument_and_a_missing_python(tmp_path):
    rc, _, err = _run(["bash", str(SCRIPTS / "make_sample_logs.sh"), "--data"], PYTHON=sys.executable)
    assert rc == 2 and len(err) == 1 and "unknown argument --data" in err[0]
    rc, _, err = _run(["bash", str(SCRIPTS / "make_sample_logs.sh")], PYTHON=str(tmp_path / "python"))
    assert rc == 2 and len(err) == 1 and "set PYTHON=" in err[0]


def test_no_script_reads_a_folder_beside_the_checkout():
    needles = re.compile(r"\.\./shared|/work/shared|parents?\[?\d?\]?\s*/\s*\"shared\"|\.parent\s*/\s*\"shared\"")
    hits = [p.name for p in sorted(SCRIPTS.iterdir()) if p.is_file() and needles.search(p.read_text())]
    assert hits == []


def test_the_sample_logs_readme_shows_the_commands_with_their_data_arguments():
    text = (ROOT / "sample_logs" / "README.md").read_text()
    assert "scripts/make_sample_logs.sh --real-data DATA_DIR" in text
    assert "scripts/make_minilm_sample.py --data DATA_DIR" in text
