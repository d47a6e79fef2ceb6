"""Lens: what one head reads on real text, token by token, and what its executed window cuts
(``aah-viz lens`` records it)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from aah_viz.analysis import lens
from aah_viz.dashboard import address, cache, page_head, pickers, selection, session
from aah_viz.dashboard.common import chart, guarded, plain
from aah_viz.dashboard.labels import scores_words
from aah_viz.dashboard.lens_view import token_html
from aah_viz.figures.lens import distance_map_figure, tokens_figure

TOKEN_VIEW_HEIGHT = 130  # plus a line per 14 tokens


# The lens tables are read once and kept as they are (``tables``: a resource, never copied, which
# nothing here changes); a redraw takes only the small pieces it shows, each cached by itself, so it
# never copies the whole lens (megabytes at SmolLM2's size) out of a cache.
@st.cache_resource(show_spinner=False, max_entries=8)
def tables(root: str, key: str, token: int) -> dict[str, pd.DataFrame]:
    return lens.lens_tables(cache.open_run(root, key))


@st.cache_data(show_spinner=False)
def doc_texts(root: str, key: str, token: int) -> dict[int, tuple[str, ...]]:
    """Each document of the run's lens (its newest step) as its tokens ({} without a lens): the
    tokens table alone, for finding the same document in other runs."""
    run = cache.open_run(root, key)
    if not {"attention_samples", "lens_tokens"} <= set(run.tables()):
        return {}
    t = run.table("lens_tokens")
    if t.empty:
        return {}
    t = t[t["step"] == t["step"].max()]
    return {int(d): tuple(g.sort_values("position")["token"]) for d, g in t.groupby("doc")}


@st.cache_data(show_spinner=False)
def doc_names(root: str, key: str, token: int) -> dict[int, str]:
    t = tables(root, key, token)
    return lens.doc_names(t["lens_tokens"]) if t else {}


@st.cache_data(show_spinner=False)
def doc_parts(root: str, key: str, token: int, doc: int) -> dict[str, pd.DataFrame]:
    """One document's tokens, links and per-head summary."""
    t = tables(root, key, token)
    return {
        "tokens": lens.doc_tokens(t, doc),
        "links": lens.doc_links(t, doc),
        "summary": lens.head_summary(t["attention_samples"], doc),
    }


MAP_ROWS = 72  # heads the distance map shows at once (a row each): more, and it pages by layers


@st.cache_data(show_spinner=False)
def head_view(root: str, key: str, token: int, doc: int, layer: int, head: int) -> pd.DataFrame:
    """The selected head's rows of one document, by query."""
    return lens.head_rows(tables(root, key, token)["attention_samples"], doc, layer, head)


@st.cache_data(show_spinner=False)
def distances(root: str, key: str, token: int, doc: int, n_layer: int, n_head: int):
    return lens.distance_map(tables(root, key, token)["attention_samples"], doc, n_layer, n_head)


def _same_document_runs(root: str, key: str, texts: tuple[str, ...]) -> list[str]:
    """Other runs whose lens holds a document with exactly these tokens (another configuration)."""
    out = []
    for other in session.good_keys():
        if other == key:
            continue
        for doc, theirs in doc_texts(root, other, session.token(other)).items():
            if theirs == texts:
                out.append(f"{other}#{doc}")
                break
    return out


def _kept(manifest: dict) -> int:
    """The first positions the run's model keeps visible besides every window (its sink_tokens)."""
    value = (manifest.get("config") or {}).get("sink_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _token_view(parts: dict, rows: pd.DataFrame, query: int, height: int, kept: int) -> None:
    # our own HTML around the document's tokens, every text escaped (lens_view): never a user's markup
    st.iframe(token_html(parts["tokens"], rows, parts["links"], query, kept), height=height)


def _head_caption(summary: pd.DataFrame, layer: int, head: int, n_tokens: int, prefix: str = "") -> None:
    """The head's window on the document, the mass it cuts and the mass on the first token."""
    this = summary[(summary["layer"] == layer) & (summary["head"] == head)]
    if this.empty:
        return
    r = this.iloc[0]
    window = int(r["window"])
    if window >= n_tokens:  # full attention on this document (or a window longer than it)
        what = f"sees every earlier token on this document (its {window}-token window covers it): nothing is cut"
    else:
        what = (
            f"executes a {window}-token window on this document; over its queries the window cuts "
            f"{r['mass_outside']:.1%} of the full-attention mass on average"
        )
    sink = f"its queries put {r['mass_sink']:.1%} of their full-attention mass on the first token, on average"
    st.caption(plain(f"{prefix}L{layer}H{head} {what}; {sink}."))


PROBE_OF_SOURCE = {"syntax": "syntax", "coref": "coref"}


def _probe_scores(root: str, key: str, tok: int, layer: int, head: int, source: str) -> None:
    """The head's scores from the run's probe tables (aah-viz probe) for the kind of link shown."""
    probe = PROBE_OF_SOURCE.get(source)
    heads = cache.probe_tables(root, key, tok).get("probe_heads")
    if probe is None or heads is None or heads.empty:
        return
    mine = heads[(heads["probe"] == probe) & (heads["layer"] == layer) & (heads["head"] == head)]
    if mine.empty:
        return
    mine = mine[mine["step"] == mine["step"].max()]
    scores = scores_words(mine["metric"], mine["value"])
    st.caption(plain(f"L{layer}H{head} in the run's {probe} probe (aah-viz probe, all its data): {scores}"))


def _pick_other(root: str, key: str, texts: tuple[str, ...]) -> str | None:
    """Another run's lens of this document to show beside this one ("RUN#DOC"), where there is one and
    it is picked (the address keeps it)."""
    others = _same_document_runs(root, key, texts)
    if not others:
        return None
    labels = {o: session.label(o.rsplit("#", 1)[0]) for o in others}
    pick = address.choose(
        st.selectbox,
        "lens_vs",
        "lens_vs",
        ["none", *others],
        label="Side by side with (the same document in another run's lens: another configuration of the model)",
        format_func=lambda o: "none" if o == "none" else labels[o],
    )
    return None if pick == "none" else pick


def _relation(links: pd.DataFrame, rows: pd.DataFrame, layer: int, head: int) -> tuple[pd.DataFrame | None, str]:
    """A picker of the document's gold relations; the chosen one's arcs, and how often the head reads along them."""
    if links is None or not len(links):
        return None, ""
    deps = sorted({str(v) for v in links.loc[links["kind"] == "dep", "label"]})
    options = ["none", *deps, *(["coref"] if (links["kind"] == "coref").any() else [])]
    relation = address.choose(
        st.selectbox,
        "rel",
        "lens_relation",
        options,
        label="Relation arcs",
        format_func=lambda r: {"none": "only the pinned query's", "coref": "coreference (pronoun to antecedent)"}.get(
            r, r
        ),
        help="Draw every gold arc of one relation in this document over the tokens (below), and count how "
        "often the head's strongest key from the arc's later end is its other end.",
    )
    if relation == "none":
        return None, ""
    arcs = lens.relation_arcs(links, relation)
    hits, seen = lens.arc_agreement(rows, arcs)
    st.caption(
        plain(
            f"{relation}: {len(arcs)} gold arcs in this document; from the later end of {hits} of {seen}, "
            f"L{layer}H{head}'s strongest key is the other end."
        )
    )
    return arcs, f"{relation}: every gold arc"


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Lens", summary_header=False)
    if opened is None:
        return
    key, root, tok, m = opened
    names = doc_names(root, key, tok)
    if not names:
        st.info(
            "This run has no lens. `aah-viz lens RUN --syntax FILE.conllu` (or `--coref GAP.tsv`, `--text FILE`) "
            "runs its model on a few documents and records, per head and token, what it reads under full "
            "attention and what its executed window cuts (docs/lens.md)."
        )
        return
    doc = address.choose(st.selectbox, "doc", "lens_doc", list(names), label="Document", format_func=names.get)
    parts = doc_parts(root, key, tok, doc)
    tokens = parts["tokens"]
    c1, c2, c3 = st.columns([1, 1, 3])
    layer = pickers.pick_layer(m["n_layer"], where=c1)
    head = pickers.pick_head(m["n_head"], where=c2)
    head = 0 if head is None else head
    last = len(tokens) - 1
    query = address.bound(
        c3.slider,
        "query",
        "lens_query",
        last,
        parse=lambda text: min(max(int(text), 0), last),
        fix=lambda v: min(max(int(v), 0), last),
        label="Query token (pinned; point at a token below to look from it)",
        min_value=0,
        max_value=last,
    )
    pick = _pick_other(root, key, tuple(tokens["token"]))
    st.subheader(f"L{layer}H{head}")
    rows = head_view(root, key, tok, doc, layer, head)
    if pick is None:
        height = TOKEN_VIEW_HEIGHT + 40 * (len(tokens) // 14 + 1)
        _token_view(parts, rows, query, height, _kept(m))
        _head_caption(parts["summary"], layer, head, len(tokens))
    else:  # two configurations of the document, side by side, the same head and query
        other, other_doc = pick.rsplit("#", 1)
        height = TOKEN_VIEW_HEIGHT + 60 + 40 * (len(tokens) // 10 + 1)  # half the width: fewer tokens a line
        o_tok = session.token(other)
        sides = (
            (key, parts, rows, _kept(m)),
            (
                other,
                doc_parts(root, other, o_tok, int(other_doc)),
                head_view(root, other, o_tok, int(other_doc), layer, head),
                _kept(cache.manifest(root, other, o_tok)),
            ),
        )
        for column, (k, side_parts, side_rows, kept) in zip(st.columns(2), sides):
            with column:
                st.markdown(plain(session.label(k)))
                _token_view(side_parts, side_rows, query, height, kept)
                _head_caption(side_parts["summary"], layer, head, len(tokens), f"{session.label(k)}: ")
    _probe_scores(root, key, tok, layer, head, str(tokens["source"].iloc[0]))
    arcs, arcs_name = _relation(parts["links"], rows, layer, head)
    at_query = rows[rows["query"] == query]
    if len(at_query):
        row = at_query.iloc[0].to_dict()
        chart(
            tokens_figure(
                tokens,
                row,
                parts["links"],
                f"L{layer}H{head} from token {query}",
                kept=_kept(m),
                arcs=arcs,
                arcs_name=arcs_name,
            ),
            key="lens_tokens_fig",
            name=f"tokens-doc{doc}-L{layer}H{head}-q{query}",
        )
    st.subheader("Heads × distance on this document")
    n_layer, n_head = int(m["n_layer"]), int(m["n_head"])
    matrix, labels = distances(root, key, tok, doc, n_layer, n_head)
    lo, hi = _map_layers(n_layer, n_head, layer)
    chart(
        distance_map_figure(
            matrix[lo * n_head : (hi + 1) * n_head],
            labels,
            n_head,
            "mean weight of each head's strongest keys by distance"
            + ("" if (lo, hi) == (0, n_layer - 1) else f" (layers {lo}-{hi})" if hi > lo else f" (layer {lo})"),
            selected=(layer, head),
            first_layer=lo,
        ),
        key="lens_map",
        name=f"lens-distance-doc{doc}",
        on_select=selection.head_clicked,
    )
    st.caption(
        "Click a head to look through it above. Weights are those of each query's strongest keys as recorded "
        "(aah-viz lens --top-k), averaged over the document's queries."
    )


def _map_layers(n_layer: int, n_head: int, layer: int) -> tuple[int, int]:
    """The layers the heads x distance map shows: every layer of a small model; of a large one (SmolLM2's 270
    heads made a 4,800 px map) the block of layers holding the selected layer (a click on the map stays in its
    block; the layer picker moves it), or every layer when asked."""
    per_map = max(1, MAP_ROWS // max(n_head, 1))
    if n_layer <= per_map:
        return 0, n_layer - 1
    every = address.bound(
        st.toggle,
        "mapall",
        "lens_map_all",
        False,
        parse=address.flag,
        dump=address.flag_text,
        label=f"All {n_layer} layers on the map",
        help=f"{n_layer * n_head} heads; by default the map shows the {per_map} layers around the selected one.",
    )
    if every:
        return 0, n_layer - 1
    lo = (int(layer) // per_map) * per_map
    return lo, min(lo + per_map, n_layer) - 1


if __name__ == "__main__":
    render()
