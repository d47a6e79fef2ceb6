"""Do head groups mean anything? Which similarities give real, stable groups in which layers, and do
they agree with the span and probe groupings (the ``head_similarity`` table, issue 26)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis import head_similarity as hs
from aah_viz.figures import style

# Cell classes of the verdict grid, from nothing to real and stable.
CLASSES = ("no grouping", "chance", "stable only", "real only", "real and stable")
CLASS_COLORS = ("#f0f0f0", "#d9d9d9", "#9ecae1", "#fdae6b", "#31a354")
TARGETS = ("span", "probe")
MOST_TEXT_COLUMNS = 12  # beyond this many layers a cell's words would be a few pixels: colour and hover only


def cell_class(verdict, stability) -> int:
    """0 no grouping (undefined), 1 chance, 2 stable but not real, 3 real but not stable (or not
    measured), 4 real and stable."""
    if verdict not in (cv.REAL, cv.CHANCE):
        return 0
    real, stable = verdict == cv.REAL, stability == hs.STABLE
    return 4 if real and stable else 3 if real else 2 if stable else 1


def verdict_grid(table: pd.DataFrame, procedure: str = "method") -> pd.DataFrame:
    """One row per (similarity, layer) of the newest step: the cell class and its words."""
    cols = ["similarity", "layer", "cls", "text", "hover"]
    if table is None or table.empty:
        return pd.DataFrame(columns=cols)
    rows = hs.groupings(table[table["step"] == table["step"].max()])
    rows = rows[rows["procedure"] == procedure]
    out = []
    for _, r in rows.iterrows():
        cls = cell_class(r["verdict"], r["stability"])
        groups = "" if pd.isna(r["n_groups"]) else f"{int(r['n_groups'])} groups"
        bar = cv.chance_bar(r.to_dict())
        margin = r["silhouette"] - bar if np.isfinite(bar) and pd.notna(r["silhouette"]) else np.nan
        hover = (
            f"{r['similarity']}, layer {int(r['layer'])}: {CLASSES[cls]}<br>{groups}, origin {r['origin']}"
            f"<br>silhouette − chance {margin:+.3f}<br>split-half ARI {r['stability_ari']:.3f} ({r['stability']})"
            + (f"<br>{r['reason']}" if r["reason"] else "")
        )
        out.append({"similarity": r["similarity"], "layer": int(r["layer"]), "cls": cls,
                    "text": f"{CLASSES[cls]}<br>{groups}" if cls else "–", "hover": hover})  # fmt: skip
    return pd.DataFrame(out, columns=cols)


def _order(names) -> list[str]:
    return [s for s in hs.SIMILARITIES if s in set(names)]


def verdict_figure(table: pd.DataFrame, procedure: str = "method", title: str = "") -> go.Figure:
    """Similarities (rows) by layers (columns): does the similarity give real groups (beating both
    validity nulls), stable across two halves of the data, in that layer?"""
    grid = verdict_grid(table, procedure)
    if grid.empty:
        return style.empty_figure("no head_similarity table: run aah-viz head-similarity on this run", title)
    names, layers = _order(grid["similarity"]), sorted(grid["layer"].unique())
    z = np.full((len(names), len(layers)), np.nan)
    text = np.full(z.shape, "", dtype=object)
    hover = np.full(z.shape, "", dtype=object)
    for _, r in grid.iterrows():
        i, j = names.index(r["similarity"]), layers.index(r["layer"])
        z[i, j], text[i, j], hover[i, j] = r["cls"], r["text"], r["hover"]
    n = len(CLASSES)
    scale = []
    for k, color in enumerate(CLASS_COLORS):
        scale += [(k / n, color), ((k + 1) / n, color)]
    words = len(layers) <= MOST_TEXT_COLUMNS
    fig = go.Figure(
        go.Heatmap(
            z=z, x=[str(x) for x in layers], y=names, zmin=-0.5, zmax=n - 0.5, colorscale=scale,
            text=text, texttemplate="%{text}" if words else None, hovertext=hover, hoverinfo="text", xgap=2, ygap=2,
            colorbar=dict(tickvals=list(range(n)), ticktext=list(CLASSES), title="grouping"),
        )
    )  # fmt: skip
    fig.update_yaxes(autorange="reversed", title="head similarity")
    # layer numbers below the grid, upright: labels on top ran into the title
    fig.update_xaxes(side="bottom", title="layer", tickangle=0, type="category")
    return style.base_layout(fig, title, height=140 + 60 * len(names))


def agreement_grid(table: pd.DataFrame, target: str, procedure: str = "method") -> pd.DataFrame:
    """One row per (similarity, layer): the ARI of its grouping with ``target``'s and the verdict."""
    cols = ["similarity", "layer", "ari", "agreement", "p_value"]
    if table is None or table.empty:
        return pd.DataFrame(columns=cols)
    pairs = hs.agreements(table[table["step"] == table["step"].max()])
    pairs = pairs[(pairs["procedure"] == procedure) & ((pairs["similarity"] == target) | (pairs["other"] == target))]
    out = []
    for _, r in pairs.iterrows():
        name = r["other"] if r["similarity"] == target else r["similarity"]
        out.append({"similarity": name, "layer": int(r["layer"]), "ari": r["ari"], "agreement": r["agreement"],
                    "p_value": r["ari_p_value"]})  # fmt: skip
    return pd.DataFrame(out, columns=cols)


def agreement_figure(table: pd.DataFrame, procedure: str = "method", title: str = "") -> go.Figure:
    """ARI of each similarity's grouping with the span grouping and with the probe grouping, per layer;
    cells marked "agree" beat the permutation null (p <= 0.05)."""
    grids = {t: agreement_grid(table, t, procedure) for t in TARGETS}
    if all(g.empty for g in grids.values()):
        return style.empty_figure("no span or probe grouping in the head_similarity table to agree with", title)
    shown = [t for t in TARGETS if not grids[t].empty]  # a grouping the table lacks gets no empty panel
    fig = make_subplots(rows=1, cols=len(shown), horizontal_spacing=0.12,
                        subplot_titles=[f"agreement with the {t} grouping (ARI)" for t in shown])  # fmt: skip
    missing = [t for t in TARGETS if t not in shown]
    if missing:
        fig.add_annotation(text=f"no {' or '.join(missing)} grouping in this run's head_similarity table",
                           showarrow=False, x=1.0, y=1.0, xref="paper", yref="paper", xanchor="right",
                           yanchor="bottom", yshift=24, font=dict(size=12))  # fmt: skip
    for col, target in enumerate(shown, start=1):
        g = grids[target]
        names, layers = _order(g["similarity"]), sorted(g["layer"].unique())
        z = np.full((len(names), len(layers)), np.nan)
        text = np.full(z.shape, "", dtype=object)
        for _, r in g.iterrows():
            i, j = names.index(r["similarity"]), layers.index(r["layer"])
            z[i, j] = r["ari"]
            mark = "agree" if r["agreement"] == hs.AGREE else ("–" if r["agreement"] == hs.UNDEFINED else "")
            text[i, j] = f"{r['ari']:.2f}<br>{mark}" if pd.notna(r["ari"]) else mark
        fig.add_trace(
            go.Heatmap(z=z, x=[str(x) for x in layers], y=names, zmin=-0.2, zmax=1.0, colorscale="Greens",
                       text=text, texttemplate="%{text}" if len(layers) <= MOST_TEXT_COLUMNS // 2 else None,
                       xgap=2, ygap=2, showscale=col == len(shown),
                       colorbar=dict(title="ARI"), hovertemplate="%{y}, %{x}: ARI %{z:.3f}<extra></extra>"),
            row=1, col=col,
        )  # fmt: skip
        fig.update_yaxes(autorange="reversed", row=1, col=col)
        fig.update_xaxes(title="layer", tickangle=0, type="category", row=1, col=col)
    return style.base_layout(fig, title, height=180 + 50 * len(hs.SIMILARITIES))
