"""Untrusted text in Markdown and in figures, without a browser (tests/test_browser_hostile_text.py
checks the same in Chromium on every page)."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from aah_viz.dashboard.safe_text import JOINER, plain
from aah_viz.figures.text import without_links

HOSTILE = (
    "[Session expired](https://evil.example/login) ![b](https://evil.example/t.png) www.evil.example "
    "me@evil.example <img src=x> :red[RED] :material/home: :smile: &amp; *em* `code` $x$"
)
# the patterns Streamlit's Markdown (remark-gfm's autolink literals, its directives and icons) finds in
# text after escapes are resolved
AUTOLINK = re.compile(r"https?://|www(?=\.)|[-.\w+]+@[-\w]+(?:\.[-\w]+)+", re.IGNORECASE)
DIRECTIVE = re.compile(r":[A-Za-z][\w/-]*[\[:]")


def _resolved(markdown: str) -> str:
    """The text a Markdown parser sees once backslash escapes are taken away."""
    return re.sub(r"\\(.)", r"\1", markdown)


def test_plain_text_has_no_autolink_directive_or_unescaped_markup():
    out = plain(HOSTILE)
    seen = _resolved(out)
    assert not AUTOLINK.search(seen) and not DIRECTIVE.search(seen)
    assert seen.replace(JOINER, "") == HOSTILE  # the reader sees every character, nothing else
    assert not re.search(r"(?<!\\)[\[\]<>!*`$&]", out)  # no markup character left unescaped


def test_plain_text_starts_no_block():
    for text, start in (("# head", "\\#"), ("- item", "\\-"), ("1. item", "1\\."), ("> quote", "\\>")):
        assert plain(text).startswith(start)
    assert "\n" not in plain("line\n# two")


def test_a_figure_shows_anchor_tags_as_text():
    fig = go.Figure(go.Scatter(x=[1], y=[1], name="<a href='https://evil.example'>run</a>", text=["<A HREF=x>t</A>"]))
    fig.update_layout(title="run <a href=https://evil.example>x</a> <b>bold</b>")
    clean = without_links(fig)
    spec = clean.to_json()
    assert "<a" not in spec.lower().replace("\\u003c", "<").replace("&lt;a", "")
    assert clean.layout.title.text == "run &lt;a href=https://evil.example>x&lt;/a> <b>bold</b>"  # other tags stay
    ordinary = go.Figure(go.Bar(x=[1], y=[2], name="a <b>b</b>"))
    assert without_links(ordinary) is ordinary  # nothing to change: the same figure, no copy
