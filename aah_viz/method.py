"""Numbers of the method (``docs/method.md``) that the model and the light side share, typed once."""

from __future__ import annotations

# level-0 similarity threshold tau (method section 5.2, the paper's base value): the model's default, and
# what the light side takes for a run whose config does not record one
SIM_THRESHOLD = 0.72
