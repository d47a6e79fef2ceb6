"""The token view of the Lens page: a document's tokens, coloured by one head's attention from the
query under the pointer or the keyboard focus (CircuitsVis style), in a small HTML document.

Everything in it is data: token texts are escaped (``html.escape``) and the numbers travel as JSON
in which ``<``, ``>`` and ``&`` are escaped too, so no text of a user's document becomes markup or
script. The script only reads that JSON and sets colours and captions.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from aah_viz.figures.lens import visible_token


def _json(value) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def view_data(tokens: pd.DataFrame, rows: pd.DataFrame, links: pd.DataFrame) -> dict:
    """What the script needs: per query its keys and weights, window, cut and sink mass; the links."""
    by_query = {
        int(r.query): {
            "k": [int(k) for k in r.keys],
            "w": [round(float(w), 5) for w in r.weights],
            "win": int(r.window),
            "out": round(float(r.mass_outside), 5),
            "sink": round(float(r.mass_sink), 5),
        }
        for r in rows.itertuples()
    }
    link_rows = [
        {"q": int(r.query), "k": int(r.key), "kind": str(r.kind), "label": str(r.label), "gold": bool(r.gold)}
        for r in links.itertuples()
    ]
    return {"n": len(tokens), "rows": {str(q): v for q, v in by_query.items()}, "links": link_rows}


STYLE = """
body { font-family: system-ui, sans-serif; margin: 4px; color: #111; }
.doc { line-height: 2.3em; }
.tok { padding: 2px 3px; margin: 1px; border-radius: 3px; border: 1px solid #ddd; cursor: pointer;
       white-space: pre; display: inline-block; min-width: 0.6em; text-align: center; }
.tok:focus { outline: 2px solid #d62728; }
.tok.query { border: 2px solid #d62728; }
.tok.sink { box-shadow: inset 0 -3px 0 #ff7f0e; }
.tok.cut { text-decoration: line-through; text-decoration-color: #d62728; }
.tok.inwin { border-top: 3px solid #74c476; }
.tok.future { color: #aaa; }
.tok.gold { outline: 2px dashed #2ca02c; }
.tok.other { outline: 2px dashed #7f7f7f; }
.tok.special { font-style: italic; }
#status { margin-top: 8px; font-size: 0.9em; min-height: 3.2em; }
.legend { font-size: 0.8em; color: #555; margin-bottom: 6px; }
"""

SCRIPT = """
const data = JSON.parse(document.getElementById('lens-data').textContent);
const toks = Array.from(document.querySelectorAll('.tok'));
const status = document.getElementById('status');
let pinned = data.start;
function colour(w, max) {
  const a = max > 0 ? Math.min(1, w / max) : 0;
  return 'rgba(33, 113, 181, ' + a.toFixed(3) + ')';
}
function show(q) {
  const row = data.rows[String(q)];
  toks.forEach((el, j) => {
    el.classList.remove('query', 'cut', 'future', 'gold', 'other', 'inwin');
    el.style.background = '';
    el.style.color = '';
    el.setAttribute('aria-label', el.dataset.text + ', position ' + j);
    el.title = '';
  });
  if (!row) { status.textContent = 'no row for token ' + q; return; }
  const max = Math.max(...row.w, 1e-9);
  const weight = {};
  row.k.forEach((k, i) => { weight[k] = row.w[i]; });
  toks.forEach((el, j) => {
    if (j > q) { el.classList.add('future'); return; }
    const w = weight[j] || 0;
    el.style.background = colour(w, max);
    if (w > 0.55 * max) el.style.color = '#fff';
    const cut = j <= q - row.win && j >= data.kept;
    if (cut) el.classList.add('cut');
    if (j > q - row.win) el.classList.add('inwin');  // the band of the executed window
    el.dataset.weight = w.toFixed(4);
    const said = el.dataset.text + ', position ' + j + ', weight ' + w.toFixed(3) + (cut ? ', cut by the window' : '');
    el.setAttribute('aria-label', said);
    el.title = said;
  });
  toks[q].classList.add('query');
  const mine = data.links.filter(l => l.q === q);
  mine.forEach(l => { if (toks[l.k]) toks[l.k].classList.add(l.gold ? 'gold' : 'other'); });
  const strongest = row.k.slice(0, 3).map(
    (k, i) => '"' + toks[k].dataset.text + '" (' + k + ') ' + row.w[i].toFixed(3));
  const reach = row.win > q ? 'sees every earlier token (its ' + row.win + '-token window covers them); '
    : 'executes a ' + row.win + '-token window, which cuts ' + (100 * row.out).toFixed(1)
      + '% of its full-attention mass; ';
  status.textContent = 'query "' + toks[q].dataset.text + '" (position ' + q + '): ' + reach
    + (100 * row.sink).toFixed(1) + '% on the first token. Strongest keys: ' + strongest.join(', ') + '.'
    + (mine.length ? ' Links: ' + mine.map(
        l => l.kind + ' ' + l.label + ' to ' + l.k + (l.gold ? '' : ' (not gold)')).join(', ') + '.' : '');
}
toks.forEach((el, j) => {
  el.addEventListener('mouseenter', () => show(j));
  el.addEventListener('focus', () => show(j));
  el.addEventListener('click', () => { pinned = j; el.focus(); });
  el.addEventListener('keydown', (ev) => {
    if (ev.key === 'ArrowRight' && j + 1 < toks.length) { toks[j + 1].focus(); ev.preventDefault(); }
    if (ev.key === 'ArrowLeft' && j > 0) { toks[j - 1].focus(); ev.preventDefault(); }
    if (ev.key === 'Enter' || ev.key === ' ') { pinned = j; ev.preventDefault(); }
  });
});
document.querySelector('.doc').addEventListener('mouseleave', () => show(pinned));
show(pinned);
"""


def token_html(tokens: pd.DataFrame, rows: pd.DataFrame, links: pd.DataFrame, query: int, kept: int = 0) -> str:
    """The whole HTML document of the token view, opening on ``query``; ``kept``: the first positions the
    model keeps visible besides every window (its ``sink_tokens``), never shown as cut."""
    data = {**view_data(tokens, rows, links), "start": int(query), "kept": int(kept)}
    spans = []
    for j, (text, special) in enumerate(zip(tokens["token"], tokens["special"])):
        shown = html.escape(visible_token(text))  # escaped once: the page shows it, the script reads it back raw
        classes = "tok" + (" sink" if j == 0 else "") + (" special" if special else "")
        spans.append(f'<span class="{classes}" tabindex="0" data-text="{shown}">{shown}</span>')
    legend = (
        '<div class="legend">Point at or tab to a token: earlier tokens take the blue of the selected head\'s '
        "weight from it (full attention); green line above: the executed window; struck through: cut by it "
        "(its weight still shown); orange underline: the "
        "first token (the sink); dashed green: the query's gold link. Arrow keys move, Enter or a click pins.</div>"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>{legend}"
        f"<div class='doc' role='group' aria-label='document tokens'>{''.join(spans)}</div>"
        f"<div id='status' role='status' aria-live='polite'></div>"
        f"<script type='application/json' id='lens-data'>{_json(data)}</script>"
        f"<script>{SCRIPT}</script></body></html>"
    )


LENS_PAGE = str(Path(__file__).with_name("views") / "lens.py")


def link_to_lens(run, layer: int, head: int | None) -> None:
    """Under a heatmap whose click selects a head: a link to the Lens page on that head, where the
    run has a lens (the selection travels with the session and the address)."""
    import streamlit as st

    if head is None or "attention_samples" not in run.tables():
        return
    st.page_link(
        LENS_PAGE,
        label=f"What L{layer}H{head} reads, token by token: the Lens page",
        icon=":material/arrow_forward:",
    )
