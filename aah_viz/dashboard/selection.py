"""What the user chose, shared by every page and kept in the address like any bound widget
(``address.arrived`` / ``address.write``):

- the ticked runs of the Runs page (``?sel=NAME~NAME``; absent: every run);
- the selection, one per session: run, layer, head and routing update
  (``?run=...&layer=...&head=...&step=...``). Every page reads it and writes it back, so a page
  switch keeps it and a copied address reopens the same view in a fresh tab.
"""

from __future__ import annotations

import streamlit as st

from aah_viz.dashboard import address, session
from aah_viz.dashboard.safe_text import plain
from aah_viz.errors import AAHVizError

SELECTED = "selected_runs"
TICKED_PARAM = "sel"
SELECTION = "selection"  # {"run": key, "layer": int, "head": int | None, "step": int | None}
PARAMS = ("run", "layer", "head", "step")


# ---- the ticked runs ---------------------------------------------------------------------------


def _ticked_address(good: list[str]) -> None:
    """A new ``sel=`` (a pasted link, a fresh tab) becomes the session's ticked runs (unknown names
    dropped), and the session's are written back (a sidebar page switch drops the query). Every run
    ticked, or none, writes nothing."""
    text = address.arrived(TICKED_PARAM)
    if text is not None:
        try:
            st.session_state[SELECTED] = address.some_of(good)(text)
        except ValueError:
            pass  # no run this logs root knows: keep the session's
    chosen = [k for k in good if k in set(st.session_state.get(SELECTED, good))]
    want = address.join(chosen) if chosen and len(chosen) < len(good) else None
    address.write(TICKED_PARAM, want, None)


def ticked() -> bool:
    """Whether the user chose some runs (not every one) on the Runs page or through the address."""
    good = session.good_keys()
    chosen = [k for k in st.session_state.get(SELECTED, good) if k in good]
    return 0 < len(chosen) < len(good)


def selected_keys() -> list[str]:
    good = session.good_keys()
    _ticked_address(good)
    chosen = [k for k in st.session_state.get(SELECTED, good) if k in good]
    return chosen or good


def set_selected(keys: list[str]) -> None:
    st.session_state[SELECTED] = list(keys)


# ---- the selection: run, layer, head, step ------------------------------------------------------


def current() -> dict:
    return st.session_state.setdefault(SELECTION, {"run": None, "layer": 0, "head": None, "step": None})


def select(**values) -> None:
    """Change parts of the selection (run, layer, head, step); the address follows at the page's end."""
    sel = current()
    for name, value in values.items():
        if name not in PARAMS:
            raise KeyError(name)
        sel[name] = value


def head_clicked(points: list[dict]) -> None:
    """A click on a head cell (customdata [layer, head, ...]) selects that layer and head."""
    for p in points:
        cd = p.get("customdata")
        if isinstance(cd, dict):  # a numpy customdata row arrives as {"0": layer, "1": head, ...}
            cd = [cd.get("0"), cd.get("1")]
        if isinstance(cd, (list, tuple)) and len(cd) >= 2 and cd[0] is not None and cd[1] is not None:
            layer, head = int(cd[0]), int(cd[1])
            if layer >= 0 and head >= 0:  # group nodes of the hierarchy carry -1
                select(layer=layer, head=head)
                return


def _int_or_none(text) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def read_address() -> None:
    """Take the parts of the selection the address says something new about (a fresh tab, a pasted
    link); an empty parameter says nothing, an unknown run is refused with a message."""
    sel = current()
    text = address.arrived("run")
    if text:
        try:
            sel["run"] = session.check_key(text)
        except AAHVizError as err:
            st.error(plain(f"query parameter run={text!r} ignored: {err}"))
    for name in ("layer", "step"):
        value = _int_or_none(address.arrived(name))
        if value is not None:
            sel[name] = value
    text = address.arrived("head")
    if text:
        sel["head"] = _int_or_none(text)  # not a number: no head


def write_address() -> None:
    """Mirror the selection into the address (each part that is set; only what changed)."""
    sel = current()
    for name in PARAMS:
        address.write(name, sel.get(name), None)
