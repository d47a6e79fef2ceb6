"""Views that live in the address: a widget bound to a query parameter takes its value from a pasted
link, keeps it across page switches, and writes it back, so a copied address reproduces the view.

Only values that differ from the widget's default are written, so a plain page keeps a short
address. A value from the address that the widget cannot take (an unknown run, a range outside the
data) is dropped for the default, with a notice: the address is data, never trusted. The shared selection
(``selection``: run, layer, head, step, the ticked runs) goes through the same two calls,
:func:`arrived` and :func:`write`, as every bound widget.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import streamlit as st

from aah_viz.dashboard.safe_text import plain

SHOWN_CHARS = 60  # of a refused value in the notice
# seconds a notice stays: a page may take several seconds to draw below it (Streamlit's short toast is 4 s)
NOTICE_S = 12
SEEN = "address_seen"  # {param: the text this session last read from or wrote to the address}
KEEP = "address_keep_"  # session copy of each bound widget's value (Streamlit forgets widgets off the page)


# every parameter a page keeps in the address beside the selection's (run, layer, head, step, sel); a test
# reads every address.bound / choose / choose_some call of the dashboard and checks its name is here
PAGE_PARAMS = frozenset(
    ("band", "colour", "cols", "compare", "config", "doc", "emetric", "filter", "frontier", "group", "lens_vs",
     "level", "links", "logy", "mapall", "outliers", "procedure", "q", "query", "qwen", "range", "rel", "runs",
     "scalars", "smooth", "sweep", "x")
)  # fmt: skip
SAID = "address_said"  # the unknown parameters already said (each once)


def say_unknown(known) -> None:
    """A parameter no page takes (a typo: ``frun=``): said once in a notice and taken out of the address,
    never carried along silently."""
    said = st.session_state.setdefault(SAID, set())
    for param in [p for p in st.query_params if p not in known]:
        text = st.query_params.get(param) or ""
        if (param, text) not in said:
            said.add((param, text))
            shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
            st.toast(plain(f"The address's {param}={shown} is not a setting of any page; ignored."),
                     icon=":material/link_off:", duration=NOTICE_S)  # fmt: skip
        del st.query_params[param]


def arrived(param: str) -> str | None:
    """The parameter's text when the address says something this session has not read or written (a
    pasted link, a fresh tab), else None: a sidebar page switch drops the query and keeps the session's."""
    seen = st.session_state.setdefault(SEEN, {})
    text = st.query_params.get(param)
    if text is None or text == seen.get(param):
        return None
    seen[param] = text
    return text


def write(param: str, value, default, dump: Callable[[object], str] = str) -> None:
    """Put ``value`` in the address, or take ``param`` out when it is the default (a short address);
    only a change is written, so the browser history stays short."""
    seen = st.session_state.setdefault(SEEN, {})
    if value == default:
        if param in st.query_params:
            del st.query_params[param]
        seen.pop(param, None)
        return
    text = dump(value)
    if st.query_params.get(param) != text:
        st.query_params[param] = text
    seen[param] = text


def seed(param: str, key: str, default, parse: Callable[[str], object]) -> None:
    """Before the widget is drawn: its value from the address if the address says something new,
    else what this session had, else the default. ``parse`` raises ValueError for a value it refuses."""
    text = arrived(param)
    if text is not None:
        try:
            st.session_state[key] = parse(text)
            return
        except (ValueError, TypeError, KeyError, IndexError, OverflowError):
            # not a value this widget can take: the session's or the default, and the page says so
            shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
            st.toast(plain(f"The address's {param}={shown} is not one this page can show; using the default."),
                     icon=":material/link_off:", duration=NOTICE_S)  # fmt: skip
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(KEEP + key, default)


def publish(param: str, key: str, value, default, dump: Callable[[object], str] = str) -> None:
    """After the widget: remember its value and put it in the address (or take it out when default)."""
    st.session_state[KEEP + key] = value
    write(param, value, default, dump)


def bound(widget, param: str, key: str, default, parse=str, dump=str, fix=None, **kwargs):
    """Draw ``widget(key=key, **kwargs)`` bound to the query parameter ``param``; returns its value.
    ``fix(value)`` makes a value kept from earlier fit the widget's options now (or raises ValueError)."""
    seed(param, key, default, parse)
    if fix is not None:
        try:
            st.session_state[key] = fix(st.session_state[key])
        except (ValueError, TypeError, KeyError, IndexError):
            st.session_state[key] = default
    value = widget(key=key, **kwargs)
    publish(param, key, value, default, dump)
    return value


def choose(widget, param: str, key: str, options, default=None, **kwargs):
    """A one-of widget (selectbox, radio) bound to ``param``: the address names an option by its text,
    and a value kept from earlier stays only while it is still an option (else ``default``, the
    first option unless given)."""
    options = list(options)
    default = options[0] if default is None else default
    return bound(widget, param, key, default, parse=one_of(options), fix=within(options), options=options, **kwargs)


def choose_some(widget, param: str, key: str, options, default, **kwargs):
    """A multiselect bound to ``param`` (options joined by ``~``): values that are no longer options are
    dropped from a kept choice, and a choice left with none of them falls back to ``default``."""
    options = list(options)

    def kept(value) -> list:
        still = [o for o in value if o in options]
        return still if still or not value else [o for o in default if o in options]

    return bound(widget, param, key, default, parse=some_of(options), dump=join, fix=kept, options=options, **kwargs)


# ---- parsers for the usual widgets ------------------------------------------------------------


def one_of(options) -> Callable[[str], object]:
    options = list(options)
    by_text = {str(o): o for o in options}
    return lambda text: by_text[text]


def within(options) -> Callable[[object], object]:
    """A ``fix`` for a one-of widget: a value kept from earlier stays only while it is still an option."""
    options = list(options)

    def fix(value):
        if value not in options:
            raise ValueError(value)
        return value

    return fix


def some_of(options, sep: str = "~") -> Callable[[str], list]:
    options = list(options)
    by_text = {str(o): o for o in options}

    def parse(text: str) -> list:
        chosen = [by_text[t] for t in text.split(sep) if t in by_text]
        if not chosen:
            raise ValueError(text)  # nothing this widget knows: its default, not an empty choice
        return chosen

    return parse


def join(values, sep: str = "~") -> str:
    return sep.join(str(v) for v in values)


def flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


def flag_text(value) -> str:
    return "1" if value else "0"


def _finite(text: str) -> float:
    """A number from the address; ``inf``, ``1e400`` and ``nan`` are refused (int(inf) would raise OverflowError)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def number_in(lo: float, hi: float, cast=float) -> Callable[[str], object]:
    def parse(text: str):
        value = cast(_finite(text))
        if not lo <= value <= hi:
            raise ValueError(text)
        return value

    return parse


def range_in(lo: float, hi: float, cast=float) -> Callable[[str], tuple]:
    """``a,b`` with lo <= a < b <= hi (clipped into the data's range)."""

    def parse(text: str):
        a, b = (cast(_finite(t)) for t in text.split(","))
        a, b = max(cast(lo), a), min(cast(hi), b)
        if not a < b:
            raise ValueError(text)
        return (a, b)

    return parse


def range_text(value) -> str:
    """``a,b``: whole numbers whole (247104, never 2.47104e+05), others in their shortest form."""
    return ",".join(str(v) if isinstance(v, int) else f"{v:g}" for v in value)
