"""Our clustering and hierarchy reproduce the reference's conformance cases: exactly on the machine
that made the file, and elsewhere exactly but for ties (a decision within float rounding of going
the other way, which that machine's rounding settled)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import machine_fingerprint as fp  # noqa: E402
import reference_replay as rr  # noqa: E402

from aah_viz.errors import InputFormatError  # noqa: E402
from instrumentation.routing.conformance import TIE_MARGIN, check_cases, load_cases, passed, run_case, status  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES_FILE = REPO.parent / "shared" / "reference" / "conformance" / "clustering.json"


def _cases() -> list[dict]:
    if not CASES_FILE.is_file():  # the developers' folder beside a checkout; a user's clone has none
        pytest.skip(f"no reference conformance cases at {CASES_FILE}", allow_module_level=True)
    return load_cases(CASES_FILE)


CASES = _cases()
# Bit for bit only on the machine that made the file (every fingerprint field equal, as for the
# trajectories); elsewhere a case may differ only where it is a tie.
EXACT_HERE = fp.matches(fp.this_machine(), rr.recording_fingerprint(CASES_FILE))


def test_file_holds_all_kinds():
    kinds = {c["kind"] for c in CASES}
    assert len(CASES) == 240
    assert kinds == {"cluster_level0", "cluster_upper", "hierarchy"}


@pytest.mark.parametrize("index", range(len(CASES)))
def test_case_is_exact_or_a_tie(index):
    case = CASES[index]
    got = run_case(case)
    allowed = ("exact",) if EXACT_HERE else ("exact", "tie")
    assert status(case, got) in allowed, f"case {index} ({case['kind']}): expected {case['expect']}, got {got}"


def _tie_case(threshold: float) -> dict:
    """Two identical items against ``threshold``: at 1.0 their similarity (exactly 1.0) meets it with
    no margin at all, so either grouping is a rounding away; below it they group decisively."""
    return {
        "kind": "cluster_upper",
        "X": [[1.0, 0.0], [1.0, 0.0]],
        "threshold": threshold,
        "metric": "cosine",
        "expect": {"groups": [[0], [1]]},
    }


def test_a_decision_within_rounding_is_a_tie_and_a_decisive_one_is_different():
    tie, decisive = _tie_case(1.0), _tie_case(0.5)
    got_tie, got_decisive = run_case(tie), run_case(decisive)
    assert got_tie["decision_margin"] == 0.0 and got_decisive["decision_margin"] == 0.5  # |1 - threshold|
    assert got_tie["groups"] == got_decisive["groups"] == [[0, 1]]  # neither as expected
    assert (status(tie, got_tie), status(decisive, got_decisive)) == ("tie", "different")
    exact = {**decisive, "expect": {"groups": [[0, 1]]}}
    assert status(exact, run_case(exact)) == "exact"

    report = check_cases([exact, decisive, tie])
    assert {k: report[k] for k in ("cases", "exact", "tie", "different", "same_partition")} == {
        "cases": 3,
        "exact": 1,
        "tie": 1,
        "different": 1,
        "same_partition": 1,
    }
    assert [(f["index"], f["status"]) for f in report["failures"]] == [(1, "different"), (2, "tie")]
    assert not passed(report) and not passed(report, strict=True)
    ties_only = check_cases([exact, tie])
    assert passed(ties_only) and not passed(ties_only, strict=True)
    assert passed(check_cases([exact]), strict=True)


def test_report_counts_a_reordered_expectation_as_same_partition_only():
    case = copy.deepcopy(next(c for c in CASES if c["kind"] == "cluster_level0" and len(c["expect"]["groups"]) >= 2))
    case["expect"]["groups"] = case["expect"]["groups"][::-1]
    report = check_cases([case])
    assert report["cases"] == 1 and report["exact"] == 0 and report["same_partition"] == 1
    (failure,) = report["failures"]
    assert failure["index"] == 0 and failure["kind"] == "cluster_level0"
    assert failure["expected"]["groups"] == case["expect"]["groups"]
    assert failure["got"]["groups"] == case["expect"]["groups"][::-1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aah_viz", "conformance", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_cli_on_the_reference_file():
    proc = _cli(str(CASES_FILE))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cases"] == 240 and report["different"] == 0 and report["exact"] + report["tie"] == 240
    assert all(f["status"] == "tie" and f["decision_margin"] <= TIE_MARGIN for f in report["failures"])
    if EXACT_HERE:
        assert report["exact"] == 240
    strict = _cli(str(CASES_FILE), "--strict")
    assert strict.returncode == (0 if report["tie"] == 0 else 1)
    assert json.loads(strict.stdout) == report


def test_cli_reports_failures_with_exit_1(tmp_path):
    hierarchy = copy.deepcopy(next(c for c in CASES if c["kind"] == "hierarchy"))
    hierarchy["expect"]["levels"][0] = hierarchy["expect"]["levels"][0][::-1]
    upper = copy.deepcopy(next(c for c in CASES if c["kind"] == "cluster_upper" and c["expect"]["origin"] == "natural"))
    upper["expect"]["origin"] = "collapsed"
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [CASES[0], hierarchy, upper]}))
    proc = _cli(str(path))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cases"] == 3 and report["exact"] == 1
    assert [f["index"] for f in report["failures"]] == [1, 2]
    assert [f["kind"] for f in report["failures"]] == ["hierarchy", "cluster_upper"]
    assert report["failures"][0]["expected"] == hierarchy["expect"]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('{"cases": [', "not valid JSON"),
        ('{"about": "no cases"}', "'cases' list"),
        (
            '{"cases": [{"kind": "cluster_level0", "X": [[1, 2], [3]], "threshold": 0.7, "expect": {"groups": []}}]}',
            "case 0",
        ),
        ('{"cases": [{"kind": "mystery", "X": [[1]], "expect": {}}]}', "unknown kind"),
    ],
)
def test_malformed_file_raises_input_format_error(tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputFormatError) as err:
        load_cases(path)
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_cli_malformed_file_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"cases": [{"kind": "hierarchy", "X": [[1, 2]], "sim_threshold": 0.72, "expect": {}}]}')
    proc = _cli(str(path))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("aah-viz: error:"), proc.stderr
    assert "super_threshold" in lines[0] and str(path) in lines[0]
    assert proc.stdout == ""


def test_missing_file_raises_input_format_error(tmp_path):
    with pytest.raises(InputFormatError, match="cannot read"):
        load_cases(tmp_path / "absent.json")
