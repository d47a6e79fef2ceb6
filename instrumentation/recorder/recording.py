"""``Recording``: where a ``RoutingRecorder`` writes its run and what the run's manifest says."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aah_viz.errors import ConfigError

DETAILS = ("full", "light", "minimal")
DEFAULT_FLUSH_EVERY = 50


@dataclass(frozen=True)
class Recording:
    """The run a recorder writes. ``detail``: ``full`` (everything, feature rows included), ``light`` (no
    feature rows, no logit vectors in ``tree``), ``minimal`` (``heads``, ``scalars`` and the lifecycle
    events only); ``flush_every`` closed steps per segment."""

    run_dir: Path
    detail: str = "full"
    flush_every: int = DEFAULT_FLUSH_EVERY
    resume_from_step: int | None = None  # None: a new run; else keep the recorded rows through this step
    seed: int | None = None
    preset: str | None = None
    steps: int | None = None
    data: Any = None
    overwrite: bool = False  # replace a run already in run_dir
    manifest_extra: dict = field(default_factory=dict)  # more manifest fields (``seq_len``: the blocks trained on)
    backend: Any = None
    run_id: str | None = None  # default: run_dir's name
    manifest: dict | None = None  # a whole manifest instead of one made from the fields above

    def __post_init__(self):
        if self.detail not in DETAILS:
            raise ConfigError(f"recorder detail {self.detail!r} is not one of {', '.join(DETAILS)}")
        if int(self.flush_every) < 1:
            raise ConfigError(f"recorder flush_every must be >= 1, got {self.flush_every}")
        object.__setattr__(self, "run_dir", Path(self.run_dir))
        object.__setattr__(self, "flush_every", int(self.flush_every))


RECORDING_FIELDS = frozenset(f.name for f in dataclasses.fields(Recording))


def recording_and_options(run_dir: str | Path, detail: str, options: dict) -> tuple[Recording, dict]:
    """An integration's keyword arguments split: the ``Recording`` fields, and the recorder's own options
    (``rank``, ``record_eval_forwards``, ``controller_init``, ``background``)."""
    fields = {k: v for k, v in options.items() if k in RECORDING_FIELDS}
    return Recording(run_dir, detail, **fields), {k: v for k, v in options.items() if k not in RECORDING_FIELDS}
