"""What ``--json`` prints: strict JSON (no NaN or Infinity, which ``jq`` and most parsers refuse)."""

from __future__ import annotations

import json
from typing import Any

from aah_viz.runlog.manifest import to_jsonable


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as strict JSON: NaN becomes null, infinities "inf"/"-inf", numpy values plain numbers."""
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)
