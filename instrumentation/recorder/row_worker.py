"""Where a recorder's snapshots become rows and segments: one worker thread that writes them in order
while training goes on (``background``), or the calling thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class RowWorker:
    def __init__(self, background: bool):
        self.background = bool(background)
        self._pool = None
        self._futures: list = []

    def start(self) -> None:
        if self.background and self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aah-recorder")

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the worker thread, after what was submitted before; here without one."""
        if self._pool is None:
            fn(*args)
        else:
            self._futures.append(self._pool.submit(fn, *args))

    def raise_failed(self) -> None:
        """Re-raise, in the training thread, an error a background write met."""
        done = [f for f in self._futures if f.done()]
        self._futures = [f for f in self._futures if not f.done()]
        for f in done:
            f.result()

    def wait(self) -> None:
        """Return once everything submitted is written (raising what a write raised)."""
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
