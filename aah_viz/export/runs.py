"""The runs of a table: opened from the paths named, grouped by configuration, put in the paper's order,
and those not finished named.

Runs whose candidate windows or sequence lengths differ are never mixed in one table:
:func:`check_same_config` raises :class:`MixedConfigError` naming them; :func:`split_by_config`
groups them instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from aah_viz.errors import AAHVizError, RunLogError
from aah_viz.regimes import paper_rank
from aah_viz.runlog import load_run, run_dirs
from aah_viz.runlog.containment import refuse_escapes


class MixedConfigError(AAHVizError):
    """Runs with different candidate windows or sequence lengths were asked for in one table."""


def collect_runs(paths: Iterable[str | os.PathLike]) -> list:
    """Open every run named: a run directory itself, or a folder holding run directories."""
    found = run_dirs(paths)
    for run_dir in found:  # a link out of a run: its tables are not read through it
        refuse_escapes(run_dir, "read")
    runs = [load_run(run_dir) for run_dir in found]
    if not runs:
        raise RunLogError("no runs given; name at least one run directory or folder of runs")
    return runs


def open_runs(runs) -> list:
    """Runs as opened runs (a run directory is opened, an opened run kept)."""
    return [r if hasattr(r, "manifest") else load_run(r) for r in runs]


def in_paper_order(runs) -> list:
    """The paper's regime order, then seed, then run id."""
    return sorted(runs, key=lambda r: (paper_rank(r.regime), r.seed if r.seed is not None else -1, r.run_id))


def config_of(run) -> tuple[int | None, tuple[int, ...]]:
    """(sequence length, candidate windows). The plain-attention baseline has no candidate windows
    in effect, so it is compatible with any set (its windows are reported as ``()``)."""
    windows = () if run.regime == "full_attention" else tuple(int(w) for w in run.windows)
    return (run.seq_len, windows)


def config_label(cfg: tuple) -> str:
    """A configuration in file names and labels: ``T128_w16-32-64-128``."""
    seq_len, windows = cfg
    return f"T{seq_len}_w" + "-".join(str(w) for w in windows)


def config_words(cfg: tuple) -> str:
    """A configuration as a reader takes it: ``T = 128, windows 16/32/64/128``; the baseline's alone
    ``T = 75, full attention``."""
    seq_len, windows = cfg
    size = f"T = {seq_len}" if seq_len is not None else "T unknown"
    if not windows:
        return f"{size}, full attention"
    return f"{size}, {'window' if len(windows) == 1 else 'windows'} " + "/".join(str(w) for w in windows)


def split_by_config(runs) -> dict[tuple, list]:
    """Runs grouped by (sequence length, candidate windows); baselines join every group of their T."""
    runs = open_runs(runs)
    groups: dict[tuple, list] = {}
    baselines = []
    for run in runs:
        cfg = config_of(run)
        if cfg[1]:
            groups.setdefault(cfg, []).append(run)
        else:
            baselines.append(run)
    for run in baselines:
        homes = [cfg for cfg in groups if cfg[0] == run.seq_len]
        if not homes:
            groups.setdefault((run.seq_len, ()), []).append(run)
        for cfg in homes:
            groups[cfg].append(run)
    return groups


def check_same_config(runs) -> tuple:
    """The shared (T, windows) of the runs, or :class:`MixedConfigError` saying which runs differ."""
    groups = split_by_config(runs)
    if len(groups) <= 1:
        return next(iter(groups), (None, ()))
    lines = []
    for (seq_len, windows), members in groups.items():
        names = ", ".join(sorted({r.run_id for r in members}))
        wtext = "/".join(str(w) for w in windows) if windows else "none (full attention)"
        lines.append(f"seq_len {seq_len}, windows {wtext}: {names}")
    raise MixedConfigError(
        "runs with different candidate windows or sequence lengths cannot share one table ("
        + "; ".join(lines)
        + "); export them separately, or pass --allow-mixed to split the table by configuration"
    )


def unfinished_notes(runs) -> list[str]:
    """One note naming the runs whose values are not final: still training, interrupted or failed."""
    described = []
    for run in runs:
        status = run.status
        if status in ("finished", "imported") or run.manifest.get("imported"):
            continue
        if status == "running":
            status = "still training" if run.being_written() else "interrupted"
        last, steps = run.manifest.get("last_step"), run.manifest.get("steps")
        where = f" at step {last}" + (f" of {steps}" if steps else "") if last is not None else ""
        described.append(f"{run.run_id} ({status}{where})")
    if not described:
        return []
    return [f"Not finished: {', '.join(described)}; their values are the last recorded ones, not final."]
