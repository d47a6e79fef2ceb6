"""Waiting in tests: every wait has a deadline of minutes and says what it waited for when it gives up.

A test may wait for a condition, never for a duration: a loaded machine (load 12-19 on 2 cores) takes
far longer than an idle one, so a deadline is set far beyond any plausible machine and exists only to
end a test that would otherwise hang. The message names the condition, so a failure says what did
not happen instead of only that a clock ran out.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

PATIENCE_S = 300.0  # five minutes: no plausible machine needs this long for one page, server or command
PATIENCE_MS = int(PATIENCE_S * 1000)  # the same deadline in Playwright's unit
COMMAND_S = 900.0  # a whole command line (a build, an install, a training run of a few steps)
TEST_S = 1800  # a whole test of several waits (pytest-timeout's guard against a hang, not a speed test)

T = TypeVar("T")


class GaveUp(AssertionError):
    """A wait reached its deadline; the message says what it was waiting for and for how long."""


def gave_up(what: str, seconds: float, detail: str = "") -> GaveUp:
    tail = f": {detail}" if detail else ""
    return GaveUp(f"gave up after {seconds:.0f} s waiting for {what}{tail}")


def until(
    condition: Callable[[], T],
    what: str,
    timeout: float = PATIENCE_S,
    interval: float = 0.2,
    sleep: Callable[[float], object] = time.sleep,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` until it returns something truthy and return that; past ``timeout`` seconds
    raise :class:`GaveUp` naming ``what`` (and ``detail()``, e.g. the last state seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise gave_up(what, timeout, detail() if detail else "")
        sleep(interval)


def _is_timeout(err: BaseException) -> bool:
    # Playwright's TimeoutError and subprocess' TimeoutExpired, without importing Playwright here
    return isinstance(err, (TimeoutError, subprocess.TimeoutExpired)) or type(err).__name__ == "TimeoutError"


@contextmanager
def waiting_for(what: str, timeout: float = PATIENCE_S):
    """Around a call that waits on its own (Playwright, ``subprocess``): its timeout becomes a
    :class:`GaveUp` that names what was awaited."""
    try:
        yield
    except Exception as err:
        if _is_timeout(err):
            raise gave_up(what, timeout, str(err).splitlines()[0] if str(err) else "") from err
        raise


def run(cmd, what: str, timeout: float = COMMAND_S, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` with a deadline of minutes that names the command's purpose when it passes."""
    with waiting_for(what, timeout):
        return subprocess.run(cmd, timeout=timeout, **kwargs)
