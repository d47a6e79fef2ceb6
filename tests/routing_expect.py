"""What the ``aah/`` scalars of a step must be, read straight from a run directory's tables with pandas.

Written apart from ``aah_viz.reporting`` (no shared code but the run reader), so the reporting tests
compare what a logger received with the run directory, not one computation with itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aah_viz.runlog import load_run


def _tables(run_dir) -> dict:
    run = load_run(run_dir)
    return {
        "run": run,
        "scalars": run.table("scalars"),
        "heads": run.table("heads"),
        "updates": run.events("routing_update"),
        "tree": run.table("tree"),
    }


def expected_scalars(run_dir, step: int, per_layer: bool = False, tables: dict | None = None) -> dict[str, float]:
    tables = tables or _tables(run_dir)
    run = tables["run"]
    out = {}
    sc = tables["scalars"]
    model = sc[sc["layer"].isna() & (sc["step"] == step)]
    for name, key in (
        ("acr", "acr"),
        ("acr_causal", "causal_coverage"),
        ("realised_work", "realised_work"),
        ("controller_grad_norm", "controller_grad_norm"),
    ):
        rows = model[model["name"] == name]["value"].dropna()
        if len(rows):
            out[f"aah/{key}"] = float(rows.iloc[-1])
    heads = tables["heads"]
    at = heads[heads["step"] == step]
    for w in run.windows:
        out[f"aah/window_share/w{w}"] = float((at["window"] == w).mean())
    if per_layer:
        for layer, g in at.groupby("layer"):
            out[f"aah/mean_window/layer{int(layer):02d}"] = float(g["window"].mean())
    for level in range(run.max_depth):
        col = f"group_l{level}"
        counts = []
        for _, g in at.groupby("layer"):
            n = g[col].dropna().nunique()
            # a level with as many groups as the level below merged nothing: the same level again
            if n > 0 and not (level and n == g[f"group_l{level - 1}"].dropna().nunique()):
                counts.append(n)
        if counts:
            out[f"aah/groups/l{level}"] = float(np.mean(counts))
    events = tables["updates"]
    events = events[events["step"] <= step].sort_values("step", kind="stable")
    rates = []
    for _, g in events.groupby("layer"):
        rate = json.loads(g["detail"].iloc[-1]).get("group_change_rate")
        if rate is not None:
            rates.append(rate)
    if rates:
        out["aah/group_change_rate"] = float(np.mean(rates))
    tree = tables["tree"]
    tree = tree[(tree["level"] == 0) & (tree["step"] <= step)].sort_values("step", kind="stable")
    if len(tree):
        last = [g["origin"].iloc[-1] for _, g in tree.groupby("layer")]
        out["aah/forced_share"] = float(np.mean([o == "forced_bipartition" for o in last]))
    return out


def read_tensorboard(logdir: str | Path, prefix: str = "") -> dict[str, dict[int, float]]:
    """Every scalar tag under ``logdir`` (one run folder) with TensorBoard's own reader: {tag: {step: value}}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["scalars"]:
        if tag.startswith(prefix):
            out[tag[len(prefix) :]] = {e.step: e.value for e in acc.Scalars(tag)}
    return out


def check_against_run(logged: dict[str, dict[int, float]], run_dir, step_of, per_layer=False) -> set[int]:
    """Every logged ``aah/`` value equals the run directory's at the recorder step ``step_of(logged step)``,
    and every scalar the run holds at that step was logged. Returns the recorder steps checked."""
    aah = {k: v for k, v in logged.items() if k.startswith("aah/")}
    assert aah, f"no aah/ scalars among {sorted(logged)}"
    logged_steps = set().union(*(set(v) for v in aah.values()))
    checked = set()
    tables = _tables(run_dir)
    for logged_step in sorted(logged_steps):
        step = step_of(logged_step)
        want = expected_scalars(run_dir, step, per_layer=per_layer, tables=tables)
        got = {k: v[logged_step] for k, v in aah.items() if logged_step in v}
        assert set(got) == set(want), (step, sorted(set(got) ^ set(want)))
        for key, value in want.items():
            assert np.isclose(got[key], value, rtol=1e-6, atol=1e-6), (step, key, got[key], value)
        checked.add(step)
    return checked
