"""Interrupt a real ``aah-viz`` command once its progress bar shows a finished item (the probe's and
the lens's interruption tests)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 600  # waits are for a condition; this is only how long before saying which one never came


def interrupt_after_progress(cmd: list[str], command: str, item: str, desc: str = "") -> tuple[int, str]:
    """Start ``cmd``, send SIGINT once its progress bar shows a finished ``item``, return (code, stderr).

    ``command`` and ``item`` name them in a failure ("the lens", "document"); ``desc``, the bar's own name,
    tells it from other bars the command shows first (a model's loading)."""
    finished = re.escape(desc.encode()) + rb"[^\r\n]*?\| *[1-9]\d*/\d+ \["
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    seen = bytearray()

    def read() -> None:
        while chunk := os.read(proc.stderr.fileno(), 4096):
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + DEADLINE_S
    while not re.search(finished, bytes(seen)):
        if proc.poll() is not None:
            pytest.fail(f"{command} ended (code {proc.returncode}) before a finished {item}: {seen[-500:]!r}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no progress bar with a finished {item} within {DEADLINE_S} s: {seen[-500:]!r}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=DEADLINE_S)
    reader.join(timeout=DEADLINE_S)
    return code, seen.decode(errors="replace")
