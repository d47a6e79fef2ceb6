"""No links inside a figure: Plotly draws ``<a href=...>`` in any title, legend, label or hover
text as a live SVG link, and a run's name or a table cell may carry one.

No figure builder draws a link of its own, so every ``<a`` tag found in a figure's strings is
untrusted text: its ``<`` becomes the entity ``&lt;``, which Plotly shows as the character.
"""

from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go

_LINK_TAG = re.compile(r"<(?=\s*/?\s*a\b)", re.IGNORECASE)


def unlinked(text: str) -> str:
    """``text`` with every anchor tag shown as characters."""
    return _LINK_TAG.sub("&lt;", text)


def _has_link(value) -> bool:
    if isinstance(value, str):
        return bool(_LINK_TAG.search(value))
    if isinstance(value, dict):
        return any(_has_link(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_link(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return any(_has_link(v) for v in value.ravel().tolist())
    return False


def _unlink(value):
    if isinstance(value, str):
        return unlinked(value)
    if isinstance(value, dict):
        return {k: _unlink(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unlink(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return np.array([_unlink(v) for v in value.ravel().tolist()], dtype=object).reshape(value.shape)
    return value


def without_links(fig: go.Figure) -> go.Figure:
    """``fig`` itself when none of its strings holds an anchor tag (the usual case: one walk, no copy),
    else a copy whose anchor tags are shown as text."""
    if not _has_link(_spec_in_place(fig)):
        return fig
    return go.Figure(_unlink(fig.to_dict()))


def _spec_in_place(fig: go.Figure):
    """The figure's data and layout as Plotly keeps them (``to_dict`` less its deep copy, which costs a page of ten
    charts more than the walk itself: only read here); ``to_dict`` where a Plotly keeps them otherwise."""
    data, layout = getattr(fig, "_data", None), getattr(fig, "_layout", None)
    if isinstance(data, list) and isinstance(layout, dict):
        return [data, layout]
    return fig.to_dict()
