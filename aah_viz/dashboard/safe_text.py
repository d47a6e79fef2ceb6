"""Untrusted text (an address's query value, a run's name or manifest field, a table cell, a file
name) as literal text inside Streamlit Markdown: shown character for character, never a link, an
image, HTML or a directive.

Backslash escapes are not enough: Streamlit's Markdown turns bare ``https://``, ``www.`` and e-mail
addresses into links, and ``:material/name:`` into an icon, by searching the text *after* escapes
are resolved. A word joiner (U+2060, invisible and zero-width) inside each of those patterns breaks
them while the reader sees the same characters.
"""

from __future__ import annotations

import re

JOINER = "\u2060"  # word joiner: no width, no glyph, no line break opportunity
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~$#!&])")  # starts of links, images, HTML, emphasis, code, math, ...
_COLON = re.compile(r":(?=\S)")  # URL schemes (https://), directives (:red[...]), icons and emoji (:name:)
_AT = re.compile(r"@")  # e-mail autolinks (name@host.tld) and mentions
_WWW = re.compile(r"(?i)\b(www)\.")  # www. autolinks


def plain(text) -> str:
    """``text`` as literal inline Markdown: one line, every structure escaped or broken.

    Line breaks become spaces and a leading list, heading or quote marker is escaped, so no block
    can start.
    """
    flat = " ".join(str(text).splitlines())
    flat = _MARKDOWN.sub(r"\\\1", flat)
    flat = _COLON.sub(":" + JOINER, flat)
    flat = _AT.sub("@" + JOINER, flat)
    flat = _WWW.sub(r"\1" + JOINER + ".", flat)
    flat = re.sub(r"^(\s*)(\d+)([.)])", r"\1\2\\\3", flat)  # "1. " would start a list
    return re.sub(r"^(\s*)([-+=])", r"\1\\\2", flat)
