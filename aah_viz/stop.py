"""A clean stop on SIGTERM: the loop finishes the current step, saves it and closes the run."""

from __future__ import annotations

import signal
import threading


class StopRequest:
    """SIGTERM during training asks the loop to stop after the current step: its rows and a checkpoint
    are written and the run is closed (as ``stopped``, with a ``terminated`` event), so a plain ``kill`` never
    leaves a half-closed run. A second SIGTERM acts as usual. Single-process runs only: under torchrun
    every rank would have to agree on the step, and the launcher's SIGKILL follows anyway."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested: str | None = None
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.requested = signal.Signals(signum).name
        signal.signal(signum, self._previous)  # a second signal is not delayed

    def __enter__(self) -> StopRequest:
        if self.enabled:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            signal.signal(signal.SIGTERM, self._previous)
