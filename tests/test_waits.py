"""Every wait in the tests has a deadline of minutes and says what it waited for (tests/waiting.py).

A short deadline makes a test depend on the machine's speed: on a loaded machine (load 12-19 on 2
cores) a one-minute wait for a page failed a correct dashboard. This reads every test module and
finds the waits whose deadline is a number under five minutes: a ``timeout=`` (Playwright's in
milliseconds), an AppTest ``default_timeout=``, a ``time.monotonic() + N`` deadline; and a whole
test's ``pytest.mark.timeout`` under half an hour (it holds several waits). A short wait
is allowed only as a probe whose running out is caught on the spot (inside ``try``), and pauses
between polls (``wait_for_timeout``, ``sleep``) are not deadlines.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest
from waiting import PATIENCE_S, TEST_S, GaveUp, until, waiting_for

TESTS = Path(__file__).resolve().parent
PLAYWRIGHT_MS = ("wait_for", "wait_for_selector", "wait_for_function", "goto", "expect_download", "click", "reload")
NOT_DEADLINES = ("wait_for_timeout", "sleep", "mark")


def _number(node) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _catches_timeout(handler: ast.ExceptHandler) -> bool:
    names = ast.unparse(handler.type) if handler.type is not None else "Exception"
    return any(word in names for word in ("Timeout", "OSError", "Exception"))


def _short_waits(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    inside_try: set[int] = set()  # waits whose running out is caught right there: probes
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_timeout(h) for h in node.handlers):
            for stmt in node.body:
                inside_try.update(id(n) for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in inside_try:
            continue
        seconds = None
        if isinstance(node, ast.Call) and _name(node) not in NOT_DEADLINES:
            for kw in node.keywords:
                value = _number(kw.value)
                if kw.arg in ("timeout", "default_timeout") and value is not None:
                    seconds = value / 1000 if _name(node) in PLAYWRIGHT_MS else value
        if isinstance(node, ast.Call) and _name(node) == "timeout" and "mark" in ast.unparse(node.func):
            value = _number(node.args[0]) if node.args else None  # a whole test of several waits: TEST_S
            if value is not None and value < TEST_S:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)} (a test of several waits)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = node.left
            if isinstance(left, ast.Call) and _name(left) == "monotonic":
                seconds = _number(node.right)
        if seconds is not None and seconds < PATIENCE_S:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:90]} ({seconds:g} s)")
    return found


def test_no_test_waits_less_than_minutes():
    paths = [p for p in sorted(TESTS.glob("*.py")) if p.name != Path(__file__).name]  # this one shows short waits
    short = [line for path in paths for line in _short_waits(path)]
    assert not short, "waits with a deadline under five minutes:\n" + "\n".join(short)


def test_the_reader_finds_a_short_wait(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\n"
        "page.wait_for_selector('x', timeout=60000)\n"
        "deadline = time.monotonic() + 60\n"
        "subprocess.run(cmd, timeout=120)\n"
        "try:\n    page.wait_for_selector('y', timeout=2000)\nexcept TimeoutError:\n    pass\n"
        "try:\n    proc.wait(timeout=10)\nfinally:\n    pass\n"
        "page.wait_for_timeout(200)\n"
        "page.wait_for_selector('z', timeout=300000)\n"
        "pytestmark = pytest.mark.timeout(300)\n"
    )
    assert sorted(int(line.split(":")[1]) for line in _short_waits(sample)) == [2, 3, 4, 10, 15]


def test_a_wait_that_gives_up_says_what_it_waited_for():
    ticks = iter(range(10**6))
    with pytest.raises(GaveUp, match=r"gave up after 0 s waiting for the moon: still dark"):
        until(lambda: False, "the moon", timeout=0.0, sleep=lambda s: next(ticks), detail=lambda: "still dark")
    assert until(lambda: 7, "seven") == 7
    with pytest.raises(GaveUp, match="waiting for a child to exit"):
        with waiting_for("a child to exit", timeout=1):
            import subprocess

            subprocess.run(["sleep", "5"], timeout=0.05)
    with pytest.raises(ValueError):  # other errors pass through unchanged
        with waiting_for("nothing"):
            raise ValueError("x")
    assert time.monotonic() > 0
