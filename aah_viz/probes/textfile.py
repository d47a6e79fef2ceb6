"""Reading a user's text file with errors that name the file and say what was expected."""

from __future__ import annotations

from pathlib import Path

from aah_viz.errors import InputFormatError


def read_user_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; ``what`` names the expected format in the error messages."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFormatError(f"{path}: no such file; give the path of a {what} file") from None
    except UnicodeDecodeError as err:
        raise InputFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); {what} is UTF-8") from None
    if not text.strip():
        raise InputFormatError(f"{path}: the file is empty; expected {what}")
    return text
