"""Reading a user's JSON file without a hang or a traceback: a plain file only, nesting bounded.

``json.loads`` recurses once per nesting level, so a manifest of 100,000 ``[`` raises RecursionError; a
FIFO named ``manifest.json`` blocks a plain ``open().read()`` forever. ``read_regular`` opens without
blocking and refuses anything but a regular file; ``loads`` counts the nesting first (strings skipped)
and refuses more than ``MAX_DEPTH`` levels with ValueError, which callers already report as damage.
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path

MAX_DEPTH = 64  # no record aah-viz writes nests deeper than a handful of levels


# a JSON string (escapes included; an unterminated one runs to the end; the loop unrolled, three times faster
# than the alternation ``"(?:[^"\\]|\\.)*"?`` it equals), and anything but a bracket
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str | bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON text, strings left out (the strings and every other
    character removed by regular expressions first: a dashboard reads a thousand summaries at once)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def loads(text: str | bytes, max_depth: int = MAX_DEPTH):
    """``json.loads`` for text of at most ``max_depth`` nesting levels; ValueError (JSONDecodeError's base) else."""
    # nesting never exceeds the number of opening brackets: a small record passes on that count alone
    opens = text.count(b"[") + text.count(b"{") if isinstance(text, bytes) else text.count("[") + text.count("{")
    if opens > max_depth and nesting_depth(text) > max_depth:
        raise ValueError(f"JSON nested more than {max_depth} levels deep")
    return json.loads(text)


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of ``path`` when it is a regular file (a FIFO, a device or a socket would block or never
    end): OSError otherwise, FileNotFoundError when it is absent."""
    fd = os.open(Path(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)
