"""``instrumentation.probe_target``: the probe as a library call, with a progress callback and a stop request
instead of a bar and signals, writing the tables it returns."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from aah_viz.cli import main  # noqa: E402
from aah_viz.probes.progress import FOLDER, ProbeInterrupted  # noqa: E402
from aah_viz.runlog import load_run  # noqa: E402
from aah_viz.stop import StopRequest  # noqa: E402
from instrumentation import ProbeSettings, probe_target  # noqa: E402

pytestmark = pytest.mark.torch
SETTINGS = ProbeSettings(max_docs=2, min_count=10, threads=1, batch_size=1, bootstrap=50, null_draws=20)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("library") / "run"
    args = ["train", "--preset", "tiny", "--steps", "4", "--n-docs", "20", "--out", str(run), "--threads", "1"]
    assert main([*args, "--no-progress", "--set", "warmup_steps=1"]) == 0
    return run


def _sorted(df: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """``df`` in ``like``'s columns, rows sorted by its columns that are not floats."""
    keys = [c for c in like.columns if not pd.api.types.is_float_dtype(like[c])]
    return df[list(like.columns)].sort_values(keys).reset_index(drop=True)


def _rows(df: pd.DataFrame, columns) -> list[tuple]:
    """The rows as plain tuples (a missing value of any kind as one mark), in one order."""
    return sorted(
        (tuple("NA" if pd.isna(v) else v for v in row) for row in df[list(columns)].itertuples(index=False)), key=repr
    )


def test_the_call_reports_progress_and_writes_the_tables_it_returns(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    heard = []
    done = probe_target(run, SETTINGS, progress=lambda n, total: heard.append((n, total)))
    total = heard[0][1]
    assert heard[0] == (0, total) and heard[-1] == (total, total) and total > 1
    assert [n for n, _ in heard] == list(range(total + 1))  # one report per input, in order
    assert done.run_dir == run and done.step == int(load_run(run).manifest["last_step"])
    assert done.threads == {"torch": 1, "blas": done.threads["blas"]} and done.threads["blas"] in (None, 1)
    stored = load_run(run)
    for name, table in done.result.tables().items():
        if len(table):
            assert _rows(stored.table(name), table.columns) == _rows(table, table.columns)
    assert not (run / FOLDER).exists()


def test_a_requested_stop_saves_what_is_finished_and_the_next_call_continues(trained_run, tmp_path):
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    shutil.copytree(trained_run, stopped)
    shutil.copytree(trained_run, whole)
    stop = StopRequest(enabled=False)  # no signals: asked from code
    stop.request("the caller")
    with pytest.raises(ProbeInterrupted, match=r"probe stopped by the caller after \d+ of \d+ inputs"):
        probe_target(stopped, SETTINGS, stop=stop)
    assert (stopped / FOLDER).is_dir() and "probe_heads" not in load_run(stopped).tables()

    heard = []
    again = probe_target(stopped, SETTINGS, progress=lambda n, total: heard.append(n))
    assert heard[0] > 0  # it started after the saved inputs
    uninterrupted = probe_target(whole, SETTINGS)
    for name in ("probe_heads", "probe_relations"):
        got, want = again.result.tables()[name], uninterrupted.result.tables()[name]
        pd.testing.assert_frame_equal(_sorted(got, want), _sorted(want, want), check_exact=False, rtol=1e-9)
