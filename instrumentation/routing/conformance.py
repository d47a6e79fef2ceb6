"""Run conformance case files (reference inputs and outputs) through our clustering and hierarchy.

The file format (``docs/internals.md``, "Conformance files"): top-level ``cases``, each with a
``kind`` (``cluster_level0``, ``cluster_upper``, ``hierarchy``), its inputs and an ``expect``
object. A case is *exact* when every expected field matches (group order and member order
included), a *tie* when it does not but our closest decision was within float rounding of going
the other way (``TIE_MARGIN``: the reference's machine may have rounded it the other way, so its
order is no requirement elsewhere), and *different* otherwise. *same_partition* counts the cases
whose items are grouped together as expected, in any order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from aah_viz.errors import InputFormatError
from aah_viz.runlog import bounded_json
from instrumentation.routing.clustering import METRICS, cluster
from instrumentation.routing.hierarchy import build_hierarchy

CLUSTER_KINDS = ("cluster_level0", "cluster_upper")
KINDS = CLUSTER_KINDS + ("hierarchy",)
_REQUIRED = {
    "cluster_level0": ("threshold",),
    "cluster_upper": ("threshold",),
    "hierarchy": ("sim_threshold", "super_threshold", "max_depth"),
}
_CLUSTER_FACTS = ("origin", "forced_bipartition", "groups_before_merge")
# A decision this close to flipping (similarity units) is a tie: float32 rounding of the feature
# products differs between machines by about 1e-7; the factor of 100 leaves room for long sums.
TIE_MARGIN = 1e-5
STATUSES = ("exact", "tie", "different")


def _fail(where: str, what: str) -> InputFormatError:
    return InputFormatError(f"{where}: {what}; expected the conformance format of docs/internals.md")


def _check_matrix(X: Any, where: str) -> None:
    if not isinstance(X, list) or not X:
        raise _fail(where, "'X' must be a non-empty list of feature rows")
    width = None
    for r, row in enumerate(X):
        if not isinstance(row, list) or not row:
            raise _fail(where, f"'X' row {r} is not a non-empty list of numbers")
        if width is None:
            width = len(row)
        if len(row) != width:
            raise _fail(where, f"'X' row {r} has {len(row)} values, row 0 has {width}")
        for v in row:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise _fail(where, f"'X' row {r} holds {v!r}, not a finite number")


def _check_groups(groups: Any, where: str) -> None:
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in g) for g in groups
    ):
        raise _fail(where, "expected groups must be a list of lists of integers")


def validate_case(case: Any, where: str) -> None:
    """Raise InputFormatError naming ``where`` when ``case`` is not a well-formed case."""
    if not isinstance(case, dict):
        raise _fail(where, "a case must be a JSON object")
    kind = case.get("kind")
    if kind not in KINDS:
        raise _fail(where, f"unknown kind {kind!r} (allowed: {', '.join(KINDS)})")
    _check_matrix(case.get("X"), where)
    for key in _REQUIRED[kind]:
        value = case.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(where, f"missing or non-numeric {key!r}")
    metric_key = "upper_metric" if kind == "hierarchy" else "metric"
    if case.get(metric_key, "cosine") not in METRICS:
        raise _fail(where, f"unknown {metric_key} {case.get(metric_key)!r} (allowed: {', '.join(METRICS)})")
    expect = case.get("expect")
    if not isinstance(expect, dict):
        raise _fail(where, "missing 'expect' object")
    if kind == "hierarchy":
        levels = expect.get("levels")
        if not isinstance(levels, list) or not levels:
            raise _fail(where, "'expect.levels' must be a non-empty list of levels")
        for level in levels:
            _check_groups(level, where)
    else:
        _check_groups(expect.get("groups"), where)
        prev = case.get("prev_groups")
        if prev is not None and (
            not isinstance(prev, list) or len(prev) != len(case["X"]) or not all(isinstance(v, int) for v in prev)
        ):
            raise _fail(where, "'prev_groups' must be null or one integer label per row of 'X'")


def load_cases(path: str | Path) -> list[dict]:
    """Read and validate a conformance file; InputFormatError names the file and the bad case."""
    path = Path(path)
    try:
        text = bounded_json.read_regular(path).decode("utf-8")  # a FIFO named as the file: refused, not waited on
    except (OSError, UnicodeDecodeError) as err:
        raise InputFormatError(f"{path}: cannot read the conformance file ({err}); pass a readable JSON file") from err
    try:
        data = bounded_json.loads(text)
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # nested deeper than any conformance file
            raise InputFormatError(f"{path}: {err}") from None
        raise InputFormatError(
            f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
            "expected the conformance format of docs/internals.md"
        ) from err
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise _fail(str(path), "the top level must be an object with a 'cases' list")
    for i, case in enumerate(data["cases"]):
        validate_case(case, f"{path}: case {i}")
    return data["cases"]


def _tensor(X: list) -> torch.Tensor:
    return torch.tensor(X, dtype=torch.float32)


def _finite(x: float) -> float | None:
    """JSON has no infinity: a margin where nothing was compared is None."""
    return x if math.isfinite(x) else None


def run_case(case: dict) -> dict:
    """Run one case through our routines; returns the fields its ``expect`` can hold, and the
    decision margin of our clustering (how near a tie its closest comparison was)."""
    kind = case["kind"]
    X = _tensor(case["X"])
    if kind == "hierarchy":
        h = build_hierarchy(
            X,
            sim_threshold=case["sim_threshold"],
            super_threshold=case["super_threshold"],
            max_depth=int(case["max_depth"]),
            upper_metric=case.get("upper_metric", "cosine"),
            normdiff_scale=case.get("normdiff_scale", 16.0),
            min_group_size=int(case.get("min_group_size", 1)),
            churn_penalty=case.get("churn_penalty", 0.0),
            group_feature_mode=case.get("group_feature_mode", "mean"),
            prev_labels=case.get("prev_groups"),
            upper_l2_threshold=case.get("upper_l2_threshold", 0.0),
        )
        margin = min((a.decision_margin for a in h.attempts), default=math.inf)
        return {"levels": h.topology(), "stop_reason": h.stop_reason, "decision_margin": _finite(margin)}
    res = cluster(
        X,
        threshold=case["threshold"],
        metric=case.get("metric", "cosine"),
        prev_labels=case.get("prev_groups"),
        allow_forced_bipartition=bool(case.get("allow_forced_bipartition", kind == "cluster_level0")),
        min_group_size=int(case.get("min_group_size", 1)),
        churn_penalty=case.get("churn_penalty", 0.0),
        normdiff_scale=case.get("normdiff_scale", 16.0),
        upper_l2_threshold=case.get("upper_l2_threshold", 0.0),
        threshold_kind="sim_threshold" if kind == "cluster_level0" else "super_threshold",
    )
    return {
        "groups": res.groups,
        "origin": res.origin,
        "forced_bipartition": res.forced_bipartition,
        "groups_before_merge": res.groups_before_merge,
        "decision_margin": _finite(res.decision_margin),
    }


def _partition(groups: Iterable[Iterable[int]]) -> frozenset:
    return frozenset(frozenset(g) for g in groups)


def _level_partitions(levels: list) -> list[frozenset]:
    """Each level as a set partition of the heads (upper groups expanded to their leaf heads)."""
    out = []
    heads: list[frozenset] | None = None
    for groups in levels:
        if heads is None:
            heads = [frozenset(g) for g in groups]
        else:
            heads = [frozenset().union(*(heads[c] for c in g if 0 <= c < len(heads))) for g in groups]
        out.append(frozenset(heads))
    return out


def compare(case: dict, got: dict) -> tuple[bool, bool]:
    """(exact, same_partition) of our output against the case's expectation."""
    expect = case["expect"]
    if case["kind"] == "hierarchy":
        exact = got["levels"] == expect["levels"]
        same = _level_partitions(got["levels"]) == _level_partitions(expect["levels"])
        return exact, same
    exact = got["groups"] == expect["groups"] and all(
        got[key] == expect[key] for key in _CLUSTER_FACTS if key in expect
    )
    return exact, _partition(got["groups"]) == _partition(expect["groups"])


def status(case: dict, got: dict) -> str:
    """``exact``, ``tie`` (not exact, but our decisions were within ``TIE_MARGIN`` of a tie) or ``different``."""
    exact, _ = compare(case, got)
    if exact:
        return "exact"
    margin = got.get("decision_margin")
    return "tie" if margin is not None and margin <= TIE_MARGIN else "different"


def check_cases(cases: list[dict], progress: bool = False) -> dict:
    """Run every case; the report is ``{"cases", "exact", "tie", "different", "same_partition",
    "failures"}``, a failure for every case that is not exact (with its ``status``)."""
    iterator: Iterable = enumerate(cases)
    if progress:
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (CI logs, pipes)
        iterator = tqdm(iterator, total=len(cases), desc="conformance", unit="case", leave=False, disable=None)
    counts = dict.fromkeys(STATUSES, 0)
    n_same = 0
    failures = []
    for index, case in iterator:
        got = run_case(case)
        kind = status(case, got)
        same = compare(case, got)[1]
        counts[kind] += 1
        n_same += same
        if kind != "exact":
            shown = {k: got[k] for k in case["expect"] if k in got}
            failures.append(
                {
                    "index": index,
                    "kind": case["kind"],
                    "status": kind,
                    "same_partition": same,
                    "decision_margin": got["decision_margin"],
                    "expected": case["expect"],
                    "got": shown,
                }
            )
    return {"cases": len(cases), **counts, "same_partition": n_same, "failures": failures}


def passed(report: dict, strict: bool = False) -> bool:
    """Every case exact (``strict``), or none different: ties are the reference machine's rounding."""
    return report["exact"] == report["cases"] if strict else report["different"] == 0


def check_file(path: str | Path, progress: bool = False) -> dict:
    """Load a conformance file and run all its cases."""
    return check_cases(load_cases(path), progress=progress)
