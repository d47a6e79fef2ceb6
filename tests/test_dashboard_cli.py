"""``aah-viz dashboard`` and ``aah-viz bench dashboard`` wiring, and the dashboard without torch."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import waiting
from browser_harness import wait_healthy

from aah_viz.cli import build_parser, main
from aah_viz.cli import dashboard as dashboard_cli

REPO = Path(__file__).resolve().parents[1]


def test_dashboard_binds_localhost_headless_and_passes_the_logs_root(tmp_path):
    args = build_parser().parse_args(["dashboard", "--logs", str(tmp_path)])
    assert args.address == "127.0.0.1" and args.port == 8501
    cmd = dashboard_cli.streamlit_command(tmp_path, args.port, args.address, None)
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4] == str(REPO / "aah_viz" / "dashboard" / "app.py")
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"  # no Deploy button in a user's tool
    assert cmd[cmd.index("--") + 1 :] == ["--logs", str(tmp_path)]


def test_app_reads_the_logs_root_from_its_arguments_or_the_environment(tmp_path, monkeypatch):
    from aah_viz.dashboard import config

    monkeypatch.delenv(config.LOGS_ENV, raising=False)
    assert config.logs_root(["--logs", str(tmp_path)]) == tmp_path.resolve()
    monkeypatch.setenv(config.LOGS_ENV, str(tmp_path / "x"))
    assert config.logs_root([]) == (tmp_path / "x").resolve()
    monkeypatch.delenv(config.LOGS_ENV)
    monkeypatch.chdir(tmp_path)
    assert config.logs_root([]) == REPO / "sample_logs"  # from a checkout, without ./runs
    (tmp_path / "runs").mkdir()
    assert config.logs_root([]) == tmp_path / "runs"  # ./runs wins: where `aah-viz train --out runs/...` writes


def test_the_packaged_reference_is_the_default_and_imports(tmp_path, monkeypatch):
    from aah_viz.dashboard import config
    from aah_viz.importers.reference import import_reference

    monkeypatch.delenv(config.REFERENCE_ENV, raising=False)
    ref = config.reference_dir([])
    assert ref == REPO / "aah_viz" / "data" / "reference" / "paper"
    assert "shared" not in ref.parts
    written = import_reference(ref, tmp_path)
    # one run per method of Table 1 and one per Qwen3-4B heatmap file, counted from the files themselves
    with open(ref / "aah_v3_4096_table1_training.csv", newline="") as fh:
        methods = {row["method"] for row in csv.DictReader(fh)}
    heatmaps = list(ref.glob("qwen3_4b_*_heatmap.csv"))
    assert len(written) == len(methods) + len(heatmaps) and len(heatmaps) == 4


def test_the_dashboards_private_reference_copy_goes_with_its_process(tmp_path):
    """The reference is imported into a temporary folder per process; it must not outlive the process."""
    script = (
        "import sys\n"
        "from aah_viz.dashboard import cache, config\n"
        "ref = str(config.reference_dir([]))\n"
        "root, keys = cache.reference_runs(ref, cache.reference_stamp(ref))\n"
        "print(root, len(keys))\n"
    )
    res = waiting.run(
        [sys.executable, "-c", script], "the reference import", capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    root, n = res.stdout.split()[-2:]
    assert int(n) > 0 and Path(root).name.startswith("aah-viz-reference-")
    assert not Path(root).exists()


def test_dashboard_refuses_a_missing_logs_root(tmp_path, capsys):
    assert main(["dashboard", "--logs", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and "--logs" in err and err.count("\n") == 1


def test_bench_dashboard_json_on_a_small_run():
    res = waiting.run(
        [
            sys.executable,
            "-m",
            "aah_viz",
            "bench",
            "dashboard",
            "--json",
            "--quiet",
            "--layers",
            "2",
            "--heads",
            "4",
            "--steps",
            "60",
            "--repeats",
            "2",
            "--fallback",
        ],
        "aah-viz bench dashboard",
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    pages = {f["page"] for f in out["figures"]}
    assert {"training", "hierarchy", "windows", "stability", "probes", "compare"} <= pages
    for f in out["figures"]:
        assert set(f) >= {"page", "name", "seconds", "times", "payload_bytes"}
        assert f["payload_bytes"] > 1000 and f["seconds"] > 0
        assert len(f["times"]) == 2 and f["seconds"] == pytest.approx(
            sorted(f["times"])[0] / 2 + sorted(f["times"])[1] / 2, abs=2e-3
        )
    paired = out["without_summaries"]
    assert set(paired["ratios"]) == {"hierarchy", "head_timeline", "stability", "switch_rate", "controller_health"}
    for name, ratio in paired["ratios"].items():
        raw = paired["raw_s"][name]["wall"]
        assert len(raw["without_summaries"]) == len(raw["with_summaries"]) == ratio["n_pairs"] == 2
        want = np.median(np.asarray(raw["without_summaries"]) / np.asarray(raw["with_summaries"]))
        assert ratio["median"] == pytest.approx(want, rel=1e-3)
    assert out["run"]["head_rows"] == 2 * 4 * 60
    assert 0 < out["memory"]["peak_rss_mb_after_generation"] <= out["memory"]["peak_rss_mb"]


def test_bench_dashboard_pages_times_every_page_cold_and_warm_in_server_cpu_seconds():
    from aah_viz.dashboard.app import PAGES

    cmd = [sys.executable, "-m", "aah_viz", "bench", "dashboard", "--pages", "--json", "--quiet"]
    cmd += ["--layers", "2", "--heads", "4", "--steps", "60", "--repeats", "2"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["pages"]) == {url for _, _, url in PAGES}
    for name, page in out["pages"].items():
        assert page["problems"] == [], (name, page["problems"])  # every page drew without an error box
        assert page["cold_cpu_s"] > 0 and page["cold_wall_s"] > 0, name
        assert len(page["warm_cpu_times"]) == 2
        assert page["warm_cpu_s"] == pytest.approx(np.median(page["warm_cpu_times"]), abs=2e-3)
        goal = out["goals"]
        assert page["within_goal"] == (
            page["cold_cpu_s"] <= goal["cold_cpu_s"] and page["warm_cpu_s"] <= goal["warm_cpu_s"]
        )
    assert out["slowest_warm_cpu_s"] == max(p["warm_cpu_s"] for p in out["pages"].values())
    assert out["run"]["steps"] == 60


HIDE_TORCH = """
import sys
sys.modules["torch"] = None  # any "import torch" now raises ImportError
import importlib, pkgutil
import aah_viz.analysis, aah_viz.figures, aah_viz.dashboard
names = []
for pkg in (aah_viz.analysis, aah_viz.figures, aah_viz.dashboard):
    for info in pkgutil.iter_modules(pkg.__path__):
        names.append(f"{pkg.__name__}.{info.name}")
names += ["aah_viz.cli.dashboard", "aah_viz.cli.bench_dashboard"]
for name in names:
    importlib.import_module(name)
from aah_viz.samples import add_synthetic_lens, make_synthetic_frontier_run, make_synthetic_run
from aah_viz.runlog import load_run
from aah_viz.figures import FIGURE_KINDS
path = make_synthetic_run(sys.argv[1], n_layer=2, n_head=4, steps=40)
add_synthetic_lens(path, 39, 2, 4)
run = load_run(path)
frontier = load_run(make_synthetic_frontier_run(sys.argv[1] + "_frontier"))
for kind, build in FIGURE_KINDS.items():
    build([frontier] if kind in ("frontier", "head_spans") else [run])
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
print(len(names))
"""


def test_dashboard_modules_import_and_build_without_torch(tmp_path):
    res = waiting.run(
        [sys.executable, "-c", HIDE_TORCH, str(tmp_path / "r")],
        "the import check",
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.strip()) >= 20


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_plain_kill_of_the_dashboard_stops_its_server(tmp_path, signame):
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "aah_viz", "dashboard", "--logs", str(tmp_path), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, "aah-viz dashboard")
        proc.send_signal(getattr(signal, signame))
        with waiting.waiting_for(f"aah-viz dashboard to exit after {signame}"):
            proc.wait(timeout=waiting.PATIENCE_S)
        with socket.socket() as s:  # the server is gone: nothing answers on its port any more
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
