"""Cluster validity over training: how similar the heads are, and whether their groups beat chance."""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.analysis import cluster_validity as cv
from aah_viz.analysis.curves import step_bins
from aah_viz.figures import style

VALIDITY_PANELS = (
    "pairwise cosine similarity of the heads' routing features (min / median / max over pairs)",
    "silhouette minus chance (the larger 95th percentile of both nulls); above 0: real groups",
    "share of layers whose level-0 partition is a forced split / beats both nulls",
)


def binned_validity(validity: pd.DataFrame, max_points: int = 600) -> pd.DataFrame:
    """Per step bin, over layers: mean similarity (min, median, max), mean silhouette margin over
    the chance bar, and the shares of forced and of real partitions."""
    cols = ["step", "sim_min", "sim_median", "sim_max", "margin", "forced_share", "real_share", "assessed"]
    if validity.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    v = validity.copy()
    for col in ("sim_min", "sim_median", "sim_max", "silhouette", "null_p95", "refit_p95"):
        v[col] = pd.to_numeric(v[col], errors="coerce") if col in v else np.nan
    v["margin"] = v["silhouette"] - v[["null_p95", "refit_p95"]].max(axis=1, skipna=True)
    v["forced"] = (v["origin"] == cv.FORCED).astype("float64")
    v["real"] = (v["verdict"] == cv.REAL).astype("float64")
    v["assessed"] = (v["verdict"] != cv.UNDEFINED).astype("float64")
    v["bin"] = step_bins(v["step"].to_numpy(), max_points)
    g = v.groupby("bin")
    out = g.agg(
        step=("step", "mean"),
        sim_min=("sim_min", "mean"),
        sim_median=("sim_median", "mean"),
        sim_max=("sim_max", "mean"),
        margin=("margin", "mean"),
        forced_share=("forced", "mean"),
        assessed=("assessed", "sum"),
    )
    real = v[v["assessed"] > 0].groupby("bin")["real"].mean()
    out["real_share"] = real.reindex(out.index)
    return out.reset_index(drop=True)[cols]


def validity_figure(validity: pd.DataFrame, threshold: float | None, title: str = "", max_points: int = 600):
    """Three panels over training (means over layers per step bin): pairwise head similarity against
    the clustering threshold; silhouette above (or below) chance; shares of forced and real partitions."""
    b = binned_validity(validity, max_points)
    if b.empty:
        return style.empty_figure("no level-0 partitions recorded (grouping off, or no routing update yet)", title)
    fig = style.stacked_panels(VALIDITY_PANELS, spacing=0.08)
    x = b["step"].to_numpy(dtype=np.float64)
    for col, dash, name in (("sim_max", "dot", "max"), ("sim_median", "solid", "median"), ("sim_min", "dash", "min")):
        y = b[col].to_numpy(dtype=np.float64)
        if np.isfinite(y).any():
            style.add_line(fig, x, y, f"similarity {name}", 1, color="#1f77b4", dash=dash)
    if threshold is not None and np.isfinite(threshold):
        fig.add_hline(y=float(threshold), line=dict(color="#d62728", dash="dash"), row=1, col=1)
        fig.add_annotation(
            text=f"threshold {threshold:.2f}",
            x=1.0,
            xref="x domain",
            y=float(threshold),
            yref="y",
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            font=dict(color="#d62728", size=11),
        )
    margin = b["margin"].to_numpy(dtype=np.float64)
    if np.isfinite(margin).any():
        style.add_line(fig, x, margin, "silhouette − chance", 2, color="#2ca02c")
        fig.add_hline(y=0.0, line=dict(color="#7f7f7f", width=1), row=2, col=1)
    else:
        # in paper coordinates: Plotly draws no axes for a panel without traces, so "x2 domain" would not exist
        low, high = fig.layout.yaxis2.domain
        fig.add_annotation(
            text=no_silhouette_reason(validity), showarrow=False, xref="paper", yref="paper", x=0.5, y=(low + high) / 2
        )
    style.add_line(fig, x, b["forced_share"].to_numpy(dtype=np.float64), "forced split", 3, color="#ff7f0e")
    real = b["real_share"].to_numpy(dtype=np.float64)
    if np.isfinite(real).any():
        style.add_line(fig, x, real, "real (beats both nulls)", 3, color="#9467bd")  # not the silhouette's green
    fig.update_yaxes(title="cosine", row=1, col=1, title_font=dict(size=12))
    fig.update_yaxes(title="silhouette", row=2, col=1, title_font=dict(size=12))
    fig.update_yaxes(title="layers / L", range=[0, 1.02], row=3, col=1, title_font=dict(size=12))
    fig.update_annotations(font_size=12)
    fig.update_xaxes(title=style.STEP, row=3, col=1)
    # the recorded steps, always: an empty panel (no silhouettes) otherwise widens the shared axis to
    # steps before training began
    lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
    fig.update_xaxes(range=[lo, hi] if hi > lo else [lo - 1, hi + 1])
    return style.base_layout(fig, title, height=760)


def no_silhouette_reason(validity: pd.DataFrame) -> str:
    """Why a run has no silhouette to draw: its partitions have none (every head alone, one group, ...),
    or the run predates their recording."""
    if "verdict" in validity and "silhouette" in validity and (validity["verdict"] == cv.UNDEFINED).all():
        origins = validity["origin"].astype(str).value_counts().index[:2]
        why = "; ".join(cv.ORIGIN_WORDS.get(o, o) for o in origins)
        return f"no silhouettes: no level-0 partition has one ({why})"
    return "silhouettes not recorded for this run (recorded by runs of this version on)"
