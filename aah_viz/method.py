"""Numbers of the method (``docs/method.md``) that the model and the light side share, typed once."""

from __future__ import annotations

# level-0 similarity threshold tau (method section 5.2, the paper's base value): the model's default, and
# what the light side takes for a run whose config does not record one
SIM_THRESHOLD = 0.72

# config keys that once existed but did nothing: configs, manifests and checkpoints that still carry them
# load (the model drops them), and they never tell runs apart (a run recording them is set up as one without)
RETIRED_KEYS = frozenset(
    {"diagnostic_detail", "mask_cache_size", "resolution_collapse_min_frac", "resolution_collapse_max_frac"}
)
