"""Guide: the user docs of a checkout (``docs/NAME.md``) inside the dashboard, so a page can link the
page that explains it (``/guide?doc=real-model``). Only a plain name of a file in ``docs/`` is read."""

from __future__ import annotations

import re

import streamlit as st

from aah_viz.dashboard import config
from aah_viz.dashboard.safe_text import plain

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
DEFAULT = "dashboard"


def docs_dir():
    root = config.checkout_root()
    return None if root is None or not (root / "docs").is_dir() else root / "docs"


def link(doc: str) -> str:
    """The address of a doc inside the dashboard (a Markdown link target)."""
    return f"/guide?doc={doc}"


def render() -> None:
    st.title("Guide")
    wanted = str(st.query_params.get("doc") or DEFAULT)
    folder = docs_dir()
    if folder is None:
        st.info(plain(f"The docs ship with the source repository: read docs/{wanted}.md there."))
        return
    names = sorted(p.stem for p in folder.glob("*.md") if NAME.match(p.stem))
    if not NAME.match(wanted) or wanted not in names:
        st.warning(plain(f"No doc named {wanted!r}; showing {DEFAULT}."))
        wanted = DEFAULT if DEFAULT in names else names[0]
    doc = st.selectbox("Doc", names, index=names.index(wanted), key="guide_doc")
    if doc != wanted or st.query_params.get("doc") != doc:
        st.query_params["doc"] = doc
    st.caption(f"docs/{doc}.md")
    # the docs are the project's own text; images are left out (they are files beside the doc)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", (folder / f"{doc}.md").read_text(encoding="utf-8"))
    st.markdown(text)


if __name__ == "__main__":
    render()
