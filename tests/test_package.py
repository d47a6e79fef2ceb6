"""aah-viz as a user installs it: the wheel built from a copy of the source tree (directly and through the
sdist, which must give the same wheel), installed into a fresh virtual environment outside the checkout,
and used from there: the light side without torch, the dashboard in a real browser, then the torch extra
for a two-step training run and a probe.

Marked ``package`` and left out of the default run: most of its few minutes go to pip installing the
dependencies into the new environment. ``./dev test -m package`` runs it; so does CI (``.ci/run``).
"""

from __future__ import annotations

import csv
import email
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from browser_harness import (
    ARTIFACTS,
    chromium,
    free_port,
    need_chromium,
    new_page,
    open_page,
    wait_healthy,
    wait_selector,
)
from waiting import COMMAND_S, PATIENCE_S, TEST_S, waiting_for

import aah_viz

REPO = Path(__file__).resolve().parents[1]
# what .gitignore keeps out of a clean clone, and the version control folder itself
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist", "runs", "test-artifacts"
)
TOP_LEVEL = {"aah_viz", "instrumentation"}

pytestmark = [pytest.mark.package, pytest.mark.timeout(TEST_S)]


def _run(cmd, *, cwd, env=None, check=True, timeout=COMMAND_S) -> subprocess.CompletedProcess:
    with waiting_for(f"{' '.join(map(str, cmd))} to finish", timeout):
        res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def _wheel(folder: Path) -> Path:
    (wheel,) = folder.glob("aah_viz-*.whl")
    return wheel


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """Wheel from the source tree, and sdist plus the wheel built from that sdist (build's default)."""
    base = tmp_path_factory.mktemp("dists")
    src = base / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", base / "from-tree"], cwd=src)
    _run([sys.executable, "-m", "build", "--outdir", base / "from-sdist"], cwd=src)
    (sdist,) = (base / "from-sdist").glob("aah_viz-*.tar.gz")
    return {"tree": _wheel(base / "from-tree"), "sdist_wheel": _wheel(base / "from-sdist"), "sdist": sdist}


@pytest.fixture(scope="module")
def venv(dists, tmp_path_factory) -> dict:
    """A fresh virtual environment outside the checkout with the wheel (built from the sdist) installed."""
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "env"
    _run([sys.executable, "-m", "venv", env_dir], cwd=root)
    py = env_dir / "bin" / "python"
    _run([py, "-m", "pip", "install", "--quiet", dists["sdist_wheel"]], cwd=root)
    # nothing inherited that points at the checkout or sets the dashboard's folders: the defaults are under test
    unset = ("PYTHONPATH", "VIRTUAL_ENV", "AAH_VIZ_LOGS", "AAH_VIZ_REFERENCE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = root / "work"  # the user's folder: no checkout anywhere above it
    work.mkdir()
    assert not any((p / "pyproject.toml").exists() for p in [work, *work.parents])
    return {"py": py, "bin": env_dir / "bin", "env": env, "work": work, "wheel": dists["sdist_wheel"]}


def _cli(venv, *args, cwd=None, check=True, timeout=COMMAND_S) -> subprocess.CompletedProcess:
    return _run(
        [venv["bin"] / "aah-viz", *args], cwd=cwd or venv["work"], env=venv["env"], check=check, timeout=timeout
    )


def _py(venv, code: str, *args) -> str:
    return _run([venv["py"], "-c", code, *args], cwd=venv["work"], env=venv["env"]).stdout


def _packaged_paper(venv) -> Path:
    """The paper's published numbers as the installed package finds them."""
    return Path(_py(venv, "from aah_viz import bundled; print(bundled.reference_paper_dir())").strip())


@pytest.fixture(scope="module")
def light_runs(venv) -> Path:
    """``./runs`` of the user's folder: the paper's numbers imported, and one synthetic run."""
    runs = venv["work"] / "runs"
    out = _cli(venv, "import-reference", "--out", "runs/reference").stdout.split()
    paper = _packaged_paper(venv)
    with open(paper / "aah_v3_4096_table1_training.csv", newline="") as fh:
        methods = {row["method"] for row in csv.DictReader(fh)}
    assert len(out) == len(methods) + len(list(paper.glob("qwen3_4b_*_heatmap.csv")))
    _py(
        venv,
        "import sys; from aah_viz.samples import make_synthetic_run; "
        "make_synthetic_run(sys.argv[1], n_layer=2, n_head=4, steps=60, regime='full_adaptive', seed=0)",
        str(runs / "synth"),
    )
    return runs


def _members(wheel: Path) -> dict[str, tuple[int, int]]:
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: (i.file_size, i.CRC) for i in z.infolist()}


def test_the_sdist_builds_the_same_wheel_and_it_holds_what_installed_commands_read(dists):
    from_tree, from_sdist = _members(dists["tree"]), _members(dists["sdist_wheel"])
    assert from_tree == from_sdist  # same files, same sizes, same contents
    names = set(from_tree)
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert {n.split("/")[0] for n in names} - {dist_info} == TOP_LEVEL
    with zipfile.ZipFile(dists["tree"]) as z:
        meta = email.message_from_bytes(z.read(f"{dist_info}/METADATA"))
        assert set(z.read(f"{dist_info}/top_level.txt").decode().split()) == TOP_LEVEL
        assert "aah-viz = aah_viz.cli:main" in z.read(f"{dist_info}/entry_points.txt").decode()
    assert meta["Version"] == aah_viz.__version__ and meta["Name"] == "aah-viz"
    assert meta["License-Expression"] == "Apache-2.0" and f"{dist_info}/licenses/LICENSE" in names
    assert meta["Requires-Python"] and meta["Summary"] and meta.get_all("Classifier")
    # package data: the dashboard entry point and every page beside it, the probe set and fixtures, and
    # the paper's published numbers, each file of the source tree
    for folder in ("aah_viz/dashboard", "aah_viz/dashboard/views", "aah_viz/data", "aah_viz/data/reference/paper"):
        for path in (REPO / folder).iterdir():
            if path.is_file() and path.suffix != ".pyc":
                assert f"{folder}/{path.name}" in names, path
    assert not any(n.startswith(("tests/", "sample_logs/", "docs/")) or n == "app.py" for n in names)


def test_light_side_runs_from_the_wheel_without_torch(venv, light_runs):
    where = json.loads(
        _py(
            venv,
            "import importlib.util, json, aah_viz, instrumentation; "
            "print(json.dumps([aah_viz.__file__, instrumentation.__file__, importlib.util.find_spec('torch')]))",
        )
    )
    site = venv["py"].parent.parent / "lib"
    assert all(Path(p).is_relative_to(site) for p in where[:2]), where  # the installed copy, not the checkout
    assert where[2] is None  # torch is not installed
    assert _cli(venv, "--version").stdout.strip() == f"aah-viz {aah_viz.__version__}"

    assert _cli(venv, "validate", "runs/synth").stdout.strip().endswith("valid")
    _cli(venv, "export", "runs/synth", "--table", "windows", "--format", "csv", "--out", "tables/")
    (table,) = (venv["work"] / "tables").glob("*.csv")
    assert "synth" in table.read_text()

    # the imported Table 1 exported in the paper's layout gives back the packaged file's cells
    paper_runs = sorted(str(p.relative_to(venv["work"])) for p in (light_runs / "reference").glob("paper-*"))
    _cli(venv, "export", *paper_runs, "--table", "training", "--layout", "paper", "--format", "csv", "--out", "t1/")
    (t1,) = (venv["work"] / "t1").glob("*.csv")
    paper = _packaged_paper(venv)
    assert paper.is_relative_to(site)
    cells = list(csv.reader(io.StringIO((paper / "aah_v3_4096_table1_training.csv").read_text())))
    assert list(csv.reader(io.StringIO(t1.read_text()))) == cells

    # commands that need torch say how to get it, on one line
    res = _cli(venv, "train", "--preset", "tiny", "--steps", "2", "--out", "runs/needs-torch", check=False)
    assert res.returncode == 2 and "aah-viz[torch]" in res.stderr and res.stderr.count("\n") == 1
    assert not (light_runs / "needs-torch").exists()


def test_dashboard_without_a_logs_root_names_the_flag(venv, tmp_path):
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    res = _cli(venv, "dashboard", cwd=empty, check=False)
    assert res.returncode == 2 and "--logs DIR" in res.stderr and res.stderr.count("\n") == 1


def test_installed_dashboard_serves_runs_and_the_paper_numbers_in_chromium(venv, light_runs):
    need_chromium()
    port = free_port()
    # no --logs: ./runs of the user's folder is the default
    proc = subprocess.Popen(
        [venv["bin"] / "aah-viz", "dashboard", "--port", str(port)],
        cwd=venv["work"],
        env=venv["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: aah-viz and the Streamlit server it starts
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, "the installed aah-viz dashboard")
        with chromium() as browser:
            page = new_page(browser, height=2000)
            open_page(page, url, "Runs")
            assert str(light_runs) in page.locator('[data-testid="stSidebar"]').inner_text()
            # the synthetic run's window heatmap, then our runs beside the paper's numbers
            for path, title in (("windows?run=synth", "Windows"), ("compare", "Compare")):
                open_page(page, f"{url}/{path}", title)
                wait_selector(page, ".js-plotly-plot .main-svg", f"a chart on {title}")
                page.screenshot(path=str(ARTIFACTS / f"package-{title.lower()}.png"))
                assert page.locator('[data-testid="stException"]').count() == 0, path
                if title == "Windows":
                    wait_selector(page, ".js-plotly-plot .heatmaplayer", "the window heatmap")
                    assert "No head rows recorded" not in page.locator('[data-testid="stMain"]').inner_text()
            # the Compare page found the packaged reference without being told where it is
            text = page.locator('[data-testid="stMain"]').inner_text()
            assert "No reference folder configured" not in text
            assert "could not be imported" not in text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_torch_extra_trains_two_steps_and_probes_with_the_bundled_set(venv, light_runs):
    _run(
        [venv["py"], "-m", "pip", "install", "--quiet", f"{venv['wheel']}[torch]"],
        cwd=venv["work"],
        env=venv["env"],
    )
    _cli(venv, "train", "--preset", "tiny", "--steps", "2", "--seed", "0", "--out", "runs/tiny")
    run = venv["work"] / "runs" / "tiny"
    assert _cli(venv, "validate", "runs/tiny").stdout.strip().endswith("valid")
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads(_cli(venv, "probe", "runs/tiny", "--max-docs", "4", "--no-progress", "--json").stdout)
    site = venv["py"].parent.parent / "lib"
    assert Path(summary["syntax"]).is_relative_to(site) and Path(summary["coref"]).is_relative_to(site)
    heads = pd.read_parquet(run / "probe_heads")
    assert len(heads.groupby(["layer", "head"])) == manifest["n_layer"] * manifest["n_head"]
    assert _cli(venv, "validate", "runs/tiny").stdout.strip().endswith("valid")
