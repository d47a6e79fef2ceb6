"""A stop of a local sweep (SIGTERM, SIGHUP, Ctrl+C) against trials starting at that instant: each trial either
never starts or is among the processes the stop signals, never an unowned process left running."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from waiting import PATIENCE_S

from aah_viz.sweep.executors import LocalTrials


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_stop_while_a_trial_is_starting_reaches_that_trial():
    trials = LocalTrials()
    inside, release, started = threading.Event(), threading.Event(), []

    def launch():
        inside.set()
        assert release.wait(PATIENCE_S)
        started.append(sleeper())
        return started[-1]

    starter = threading.Thread(target=trials.start, args=(launch,))
    starter.start()
    assert inside.wait(PATIENCE_S)
    stopper = threading.Thread(target=trials.stop)
    stopper.start()
    stopper.join(1.0)  # a stop that does not wait for the start returns here, before the process exists
    release.set()
    starter.join(PATIENCE_S)
    stopper.join(PATIENCE_S)
    try:
        assert started[0].wait(timeout=PATIENCE_S) == -signal.SIGTERM
    finally:
        started[0].kill()


def test_after_a_stop_no_trial_starts_and_a_finished_one_keeps_its_exit_code():
    trials = LocalTrials()
    done = trials.start(lambda: subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]))
    assert trials.wait(done) == 3
    trials.stop()
    assert trials.start(lambda: (_ for _ in ()).throw(AssertionError("launched after the stop"))) is None
    assert done.returncode == 3  # a finished trial is not signalled after the fact
