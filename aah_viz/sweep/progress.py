"""The one progress view of a sweep: trials done, running, failed, and the time left.

The estimate is the mean duration of the trials finished in this call, times the trials still to run, over
the workers; before the first one finishes there is none. Thread-safe: executors report from worker threads.
"""

from __future__ import annotations

import math
import threading
import time


def duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m"


class SweepProgress:
    def __init__(self, total: int, *, already_done: int, workers: int, show: bool = True, clock=time.monotonic):
        self.total = total
        self.done = already_done
        self.failed: list[str] = []
        self.running = 0
        self.workers = max(1, workers)
        self._clock = clock
        self._started: dict[str, float] = {}
        self._durations: list[float] = []
        self._lock = threading.Lock()
        self._bar = None
        if show:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=already_done, desc="sweep", unit="trial", dynamic_ncols=True)
            self._bar.set_postfix_str(self.text(), refresh=True)

    def left_s(self) -> float | None:
        if not self._durations:
            return None
        to_run = self.total - self.done - len(self.failed)
        return sum(self._durations) / len(self._durations) * math.ceil(to_run / self.workers)

    def text(self) -> str:
        left = self.left_s()
        return (
            f"done {self.done}/{self.total}, running {self.running}, failed {len(self.failed)}, "
            f"left {'?' if left is None else duration_text(left)}"
        )

    def event(self, kind: str, trial, code) -> None:
        with self._lock:
            now = self._clock()
            if kind == "start":
                self.running += 1
                self._started[trial.name] = now
            else:
                self.running -= 1
                began = self._started.pop(trial.name, now)
                if code == 0:
                    self.done += 1
                    self._durations.append(now - began)
                else:
                    self.failed.append(trial.name)
            if self._bar is not None:
                self._bar.set_postfix_str(self.text(), refresh=kind == "start")
                if kind == "end":
                    self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
