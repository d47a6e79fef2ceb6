"""A clean stop on a signal: long work finishes its current whole piece, saves it and ends in one line.

One class for every such loop: training (``instrumentation.training.loop``: SIGTERM), the lens
(``instrumentation.measure.lens``) and the probe (``instrumentation.measure.probing``), both on SIGINT and SIGTERM.
Standard library only, so both sides of the package can hold one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence


class StopRequest:
    """A signal of ``signals`` (default SIGTERM) during the ``with`` block asks the work to stop at its next
    whole state: ``requested`` becomes the signal's name, which the work checks (training writes the step's
    rows and a checkpoint and closes the run as ``stopped``, so a plain ``kill`` never leaves a half-closed
    run). A second signal acts as usual: the first puts every handler back. Handlers are installed only in the
    main thread (elsewhere Python refuses them); :meth:`request` asks the same from code, in any thread.
    Training disables it under torchrun, where every rank would have to agree on the step and the
    launcher's SIGKILL follows anyway."""

    def __init__(self, enabled: bool = True, signals: Sequence[signal.Signals] = (signal.SIGTERM,)):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signals = tuple(signals)
        self.requested: str | None = None
        self._previous: dict = {}

    def request(self, reason: str) -> None:
        """Ask the work to stop, as a signal would; ``reason`` is named in its message."""
        self.requested = reason

    def _handle(self, signum, frame) -> None:
        self.requested = signal.Signals(signum).name
        self._restore()  # a second signal is not delayed

    def _restore(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous = {}

    def __enter__(self) -> StopRequest:
        if self.enabled:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self._restore()
