"""Probe results a researcher reads: relations against their baseline, coreference by distance,
needed against executed windows, and head groups against probe clusters with their null band."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.figures import style

GREY = "#b0b0b0"
TARGET_COLORS = {"kmeans:profile": "#1f77b4", "agglomerative:profile": "#2ca02c", "js_agglomerative": "#9467bd"}
# the clusterings a legend names in words (the table keeps the names aah-viz compare writes)
TARGET_WORDS = {
    "kmeans:profile": "k-means of probe profiles",
    "agglomerative:profile": "Ward clusters of probe profiles",
    "js_agglomerative": "clusters of attention (JS distance)",
}
# the relation chart's colours, as the diverging heatmaps read: blue above the baseline, red below, grey unsure
ABOVE, BELOW, UNSURE = "#1f77b4", "#d62728", "#9a9a9a"
BASELINE_COLORS = {
    "nearest_mention": "#d62728",
    "same_head": "#ff7f0e",
    "rule": "#8c564b",
    "nearest_name": "#e377c2",
    "first_name": "#7f7f7f",
}


def head_name(layer, head) -> str:
    return f"L{int(layer)}H{int(head)}"


def relations_view(relations: pd.DataFrame) -> pd.DataFrame:
    """``probe_relations`` at its newest step as a reading table: best head, baseline, difference
    with its interval, and whether the best head is positional."""
    if relations.empty:
        return pd.DataFrame()
    rel = relations[relations["step"] == relations["step"].max()].sort_values("count", ascending=False)
    out = pd.DataFrame(
        {
            "relation": rel["relation"],
            "count": rel["count"],
            "best head": [head_name(a, b) for a, b in zip(rel["best_layer"], rel["best_head"])],
            "direction": rel["direction"],
            "best acc": rel["best_acc"],
            "baseline": [f"{int(k):+d}" for k in rel["baseline_offset"]],
            "baseline acc": rel["baseline_acc"],
        }
    )
    if "delta" in rel:
        out["best − baseline"] = rel["delta"]
        out["95% interval"] = [
            "" if pd.isna(lo) else f"[{lo:+.3f}, {hi:+.3f}]"
            for lo, hi in zip(rel["delta_ci_low"], rel["delta_ci_high"])
        ]
    if "positional" in rel:
        out["positional"] = [
            f"yes ({int(o):+d}, {s:.0%})" if bool(p) else ""
            for p, o, s in zip(rel["positional"], rel["positional_offset"], rel["positional_share"])
        ]
    return out.reset_index(drop=True)


def claim_labels(claims: pd.DataFrame) -> list[str]:
    """``syntax obj (dependent to head)``, ``coref``: a target's name for tables and axes."""
    out = []
    for probe, rel, d in zip(claims["probe"], claims["relation"], claims["direction"]):
        if probe == "coref":
            out.append("coreference")
        else:
            out.append(f"{rel} ({str(d).replace('_', ' ')})" if isinstance(d, str) and d else str(rel))
    return out


def _interval(lo, hi) -> str:
    return "" if pd.isna(lo) else f"[{lo:.3f}, {hi:.3f}]"


def claims_view(claims: pd.DataFrame) -> pd.DataFrame:
    """``probe_claims`` at its newest step as a reading table, selection-aware numbers first: the best
    head's split-half score and its adjusted p against the best of all heads under shuffled answers,
    then its accuracy with an interval, the strongest baseline and whether the head beats it."""
    if claims.empty:
        return pd.DataFrame()
    c = claims[claims["step"] == claims["step"].max()].sort_values(["probe", "count"], ascending=[False, False])
    best = [
        head_name(a, b) + (f" {d}" if isinstance(d, str) and d in ("dep2head", "head2dep") else "")
        for a, b, d in zip(c["best_layer"], c["best_head"], c["best_direction"])
    ]
    return pd.DataFrame(
        {
            "target": claim_labels(c),
            "count": c["count"].to_numpy(),
            "best head": best,
            "split-half acc": c["split_half_acc"].to_numpy(),
            "null 95th pct": c["null_p95"].to_numpy(),
            "adjusted p": c["adjusted_p"].to_numpy(),
            "best acc": c["best_acc"].to_numpy(),
            "95% interval": [_interval(lo, hi) for lo, hi in zip(c["best_ci_low"], c["best_ci_high"])],
            "strongest baseline": c["baseline"].fillna("").to_numpy(),
            "baseline acc": c["baseline_acc"].to_numpy(),
            "best − baseline": [
                "" if pd.isna(d) else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for d, lo, hi in zip(c["delta"], c["delta_ci_low"], c["delta_ci_high"])
            ],
            "beats baseline": ["yes" if b is True or b == 1 else "no" for b in c["beats_baseline"]],
            "at the offset": ["" if pd.isna(s) else f"{s:.0%}" for s in c["offset_share"]],
        }
    )


def claims_figure(claims: pd.DataFrame, title: str = "") -> go.Figure:
    """Per target: the best head's split-half accuracy (filled: it beats the strongest baseline), its
    in-sample accuracy with a 95 % interval (hollow), the strongest baseline (cross) and the 95th
    percentile of the best of all heads under shuffled answers (grey bar)."""
    if claims.empty:
        return style.empty_figure("no selection-aware statistics: probe again with this version of aah-viz", title)
    c = claims[claims["step"] == claims["step"].max()].sort_values("split_half_acc")
    labels = claim_labels(c)
    beats = c["beats_baseline"].fillna(False).astype(bool).to_numpy()
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=c["null_p95"],
            y=labels,
            orientation="h",
            marker=dict(color="#e3e3e3"),
            name="best of all heads, answers shuffled (95th percentile)",
            hovertemplate="%{y}: null 95th percentile %{x:.3f}<extra></extra>",
        )
    )
    in_sample = style.interval_bars(c["best_acc"], c["best_ci_low"], c["best_ci_high"], color="#9ab")
    split_half = dict(size=11, color=np.where(beats, "#1f77b4", "#d62728"))
    adjusted = [f"adjusted p {p:.3f}" for p in c["adjusted_p"]]
    marks = (  # column, marker, legend name, hover, other properties
        ("best_acc", dict(symbol="circle-open", size=9, color="#1f77b4"), "best head, in sample (95% interval)",
         "%{y}: best head %{x:.3f}<extra></extra>", dict(error_x=in_sample)),
        ("split_half_acc", split_half, "best head, split half (blue: beats the strongest baseline)",
         "%{y}: split half %{x:.3f}, %{text}<extra></extra>", dict(text=adjusted)),
        ("baseline_acc", dict(symbol="x", size=9, color="#333"), "strongest baseline",
         "%{y}: %{text} %{x:.3f}<extra></extra>", dict(text=c["baseline"].fillna("").tolist())),
    )  # fmt: skip
    for column, marker, name, hover, extra in marks:
        fig.add_trace(
            go.Scatter(x=c[column], y=labels, mode="markers", marker=marker, name=name, hovertemplate=hover, **extra)
        )
    fig.update_xaxes(title="accuracy", range=[0, 1.02])
    fig.update_yaxes(title="")
    return style.base_layout(
        fig, title or "best heads once their choice is accounted for", height=max(320, 26 * len(c) + 160)
    )


def relation_labels(rel: pd.DataFrame) -> list[str]:
    """The relation, with its direction where a causal probe gave it a row per direction."""
    causal = rel["direction"].isin(["dependent_to_head", "head_to_dependent"])
    return [f"{r} ({d.replace('_', ' ')})" if c else r for r, d, c in zip(rel["relation"], rel["direction"], causal)]


def relation_delta_figure(relations: pd.DataFrame, title: str = "") -> go.Figure:
    """Best head minus best offset baseline per relation (per relation and direction for a causal
    model), with its 95 % bootstrap interval; positional best heads drawn hollow."""
    if relations.empty or "delta" not in relations:
        return style.empty_figure("no relation intervals: probe again with this version of aah-viz", title)
    rel = relations[relations["step"] == relations["step"].max()].sort_values("delta")
    positional = rel["positional"].fillna(False).astype(bool).to_numpy()
    fig = go.Figure(
        go.Scatter(
            x=rel["delta"],
            y=relation_labels(rel),
            mode="markers",
            error_x=style.interval_bars(rel["delta"], rel["delta_ci_low"], rel["delta_ci_high"], color="#555"),
            marker=dict(
                size=9,
                symbol=np.where(positional, "circle-open", "circle"),
                color=np.where(
                    rel["delta_ci_low"].to_numpy() > 0,
                    ABOVE,
                    np.where(rel["delta_ci_high"].to_numpy() < 0, BELOW, UNSURE),
                ),
            ),
            showlegend=False,
            customdata=np.stack(
                [
                    rel["count"].to_numpy(dtype=float),
                    rel["best_acc"].to_numpy(dtype=float),
                    rel["baseline_acc"].to_numpy(dtype=float),
                    rel["baseline_offset"].to_numpy(dtype=float),
                ],
                axis=1,
            ),
            text=[
                f"{head_name(a, b)} {d}" + (" (positional)" if p else "")
                for a, b, d, p in zip(rel["best_layer"], rel["best_head"], rel["direction"], positional)
            ],
            hovertemplate="%{y}: %{text}<br>best %{customdata[1]:.3f} vs offset %{customdata[3]:+.0f} "
            "%{customdata[2]:.3f}<br>difference %{x:+.3f} (n = %{customdata[0]:.0f})<extra></extra>",
            name="relations",
        )
    )
    for name, symbol, colour in (  # the key: a legend entry per kind of mark
        ("above the baseline (interval above 0)", "circle", ABOVE),
        ("interval reaches 0", "circle", UNSURE),
        ("below the baseline (interval below 0)", "circle", BELOW),
        ("hollow: the best head is positional", "circle-open", "#333"),
    ):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(size=9, symbol=symbol, color=colour)))  # fmt: skip
    fig.add_vline(x=0, line=dict(color="#333", width=1))
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.15, yanchor="top"))
    fig.update_xaxes(title="best head − best fixed-offset baseline (accuracy; 95% bootstrap interval)")
    fig.update_yaxes(title="relation")
    return style.base_layout(
        fig, title or "relations: best head against the offset baseline", height=max(320, 26 * len(rel) + 140)
    )


def coref_bucket_figure(coref: pd.DataFrame, title: str = "") -> go.Figure:
    """Coreference accuracy by antecedent distance: the best head overall, the best head of each
    bucket (an upper envelope), and the baselines (the nearest mention first)."""
    if coref.empty:
        return style.empty_figure("no coreference results: probe with --coref FILE", title)
    c = coref[(coref["step"] == coref["step"].max()) & (coref["bucket"] != "all")]
    order = c.drop_duplicates("bucket").sort_values("bucket_lo")["bucket"].tolist()
    heads = c[c["method"] == "head"]
    overall = coref[(coref["step"] == coref["step"].max()) & (coref["method"] == "head") & (coref["bucket"] == "all")]
    fig = go.Figure()
    if not overall.empty:
        best = overall.sort_values(["accuracy", "layer", "head"], ascending=[False, True, True]).iloc[0]
        line = heads[(heads["layer"] == best["layer"]) & (heads["head"] == best["head"])].set_index("bucket")
        fig.add_trace(
            go.Scatter(
                x=order,
                y=line["accuracy"].reindex(order),
                mode="lines+markers",
                name=f"best head overall ({head_name(best['layer'], best['head'])})",
                line=dict(color="#1f77b4", width=3),
            )
        )
        envelope = heads.groupby("bucket")["accuracy"].max().reindex(order)
        fig.add_trace(
            go.Scatter(
                x=order,
                y=envelope,
                mode="lines",
                name="best head per bucket",
                line=dict(color="#1f77b4", dash="dot"),
            )
        )
    for method in BASELINE_COLORS:
        base = c[c["method"] == method].set_index("bucket")
        if base.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=order,
                y=base["accuracy"].reindex(order),
                mode="lines+markers",
                name=method.replace("_", " ") + " (baseline)",
                line=dict(color=BASELINE_COLORS[method], dash="solid" if method == "nearest_mention" else "dash"),
            )
        )
    counts = c[c["method"] == "nearest_mention"].set_index("bucket")["count"].reindex(order)
    fig.update_xaxes(
        title="antecedent distance (tokens)",
        type="category",
        ticktext=[f"{b}<br>n={int(n)}" if pd.notna(n) else b for b, n in zip(order, counts)],
        tickvals=order,
    )
    fig.update_yaxes(title="antecedent accuracy (share of mentions)", range=[0, 1.02])
    return style.base_layout(fig, title or "coreference by antecedent distance", height=420)


def needed_window_figure(needed: np.ndarray, executed: np.ndarray, windows: list[int], title: str = "") -> go.Figure:
    """One point per head: the window it was given (x) against the window that holds 90 % of its
    attention (y); points above the diagonal attend further than they are allowed to."""
    n_layer, n_head = needed.shape
    layer, head = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    ok = np.isfinite(executed.astype(float)) & ~np.isnan(needed)
    if not ok.any():
        return style.empty_figure("no attention-distance rows: probe again with this version of aah-viz", title)
    top = float(np.nanmax(np.where(np.isfinite(needed), needed, np.nan), initial=1.0))
    beyond = 2 * max(top, float(np.nanmax(executed)))  # the open last bucket, drawn past every finite value
    y = np.where(np.isinf(needed), beyond, needed)[ok]
    x = executed[ok].astype(float)
    rng = np.random.default_rng(0)  # fixed jitter: the same picture every time
    fig = go.Figure(
        go.Scatter(
            x=x * np.exp(rng.uniform(-0.06, 0.06, x.size)),
            y=y * np.exp(rng.uniform(-0.06, 0.06, y.size)),
            mode="markers",
            marker=dict(
                size=8,
                color=layer[ok],
                colorscale="Viridis",
                # whole layers on the bar (not 0.5 steps), its title clear of the legend below the chart
                colorbar=dict(title="layer", dtick=1 if n_layer <= 16 else None, tick0=0),
                opacity=0.85,
            ),
            text=[head_name(a, b) for a, b in zip(layer[ok], head[ok])],
            customdata=np.stack([x, np.where(np.isinf(needed[ok]), np.nan, needed[ok])], axis=1),
            hovertemplate="%{text}<br>executed window %{customdata[0]:.0f}<br>"
            "window holding 90% of its attention %{customdata[1]:.0f}<extra></extra>",
            name="heads",
        )
    )
    lo, hi = 1.0, beyond * 1.2
    fig.add_trace(
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=GREY, dash="dash"), name="needed = executed")
    )
    ticks = sorted({int(w) for w in windows} | {int(v) for v in np.unique(needed[np.isfinite(needed)])})
    fig.update_xaxes(title="executed window (tokens)", type="log")
    fig.update_yaxes(
        title="needed window: holds 90% of the head's attention (tokens)",
        type="log",
        tickvals=ticks + [beyond],
        ticktext=[str(t) for t in ticks] + ["beyond"],
    )
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.18, yanchor="top"))
    return style.base_layout(fig, title or "needed window against executed window", height=480)


def comparison_figure(comparisons: pd.DataFrame, level: int, title: str = "") -> go.Figure:
    """ARI of the AAH groups with probe clusters per layer (and pooled), one marker per target,
    against the permutation null band (mean to 95th percentile); degenerate rows grey, with
    their reason on hover."""
    comp = comparisons[(comparisons["step"] == comparisons["step"].max()) & (comparisons["level"] == level)]
    if comp.empty:
        return style.empty_figure(f"no comparisons at level {level}", title)
    comp = comp.assign(where=[("pooled" if pd.isna(v) else f"layer {int(v)}") for v in comp["layer"]])
    order = [f"layer {int(v)}" for v in sorted(comp["layer"].dropna().unique())] + ["pooled"]
    order = [w for w in order if w in set(comp["where"])]
    fig = go.Figure()
    band = comp.dropna(subset=["null_mean", "null_p95"]).groupby("where")[["null_mean", "null_p95"]].max()
    band = band.reindex(order)
    fig.add_trace(
        go.Bar(
            x=order,
            y=(band["null_p95"] - band["null_mean"]).to_numpy(),
            base=band["null_mean"].to_numpy(),
            marker=dict(color="rgba(150,150,150,0.35)"),
            name="null: mean to 95th percentile",
            hovertemplate="%{x}: null %{base:.3f} to %{y:.3f} above it<extra></extra>",
        )
    )
    symbols = ("circle", "diamond", "square", "triangle-up")
    for i, (target, part) in enumerate(comp.groupby("target", sort=True)):
        degenerate = part["degenerate"].fillna(False).astype(bool).to_numpy()
        verdict = part["partition_verdict"] if "partition_verdict" in part else pd.Series("undefined", index=part.index)
        fig.add_trace(
            go.Scatter(
                x=part["where"],
                y=part["ari"].fillna(0.0),
                mode="markers",
                name=TARGET_WORDS.get(target, target),
                marker=dict(
                    size=11,
                    symbol=symbols[i % len(symbols)],
                    color=np.where(degenerate, GREY, TARGET_COLORS.get(target, "#17becf")),
                    line=dict(color="#333", width=0.5),
                ),
                customdata=np.stack(
                    [
                        part["p_value"].to_numpy(dtype=float),
                        part["n_groups"].to_numpy(dtype=float),
                        part["n_probe_clusters"].to_numpy(dtype=float),
                    ],
                    axis=1,
                ),
                text=[
                    (f"degenerate: {r}" if d else "") + f"<br>partition: {v}"
                    for d, r, v in zip(degenerate, part["reason"].fillna(""), verdict.fillna("undefined"))
                ],
                hovertemplate=f"{target}<br>%{{x}}: ARI %{{y:.3f}}, p = %{{customdata[0]:.3f}}<br>"
                "%{customdata[1]:.0f} groups vs %{customdata[2]:.0f} probe clusters%{text}<extra></extra>",
            )
        )
    fig.add_hline(y=0, line=dict(color="#333", width=1))
    fig.update_xaxes(title="layer (pooled: layer-stratified null)", type="category", categoryorder="array",
                     categoryarray=order)  # fmt: skip
    fig.update_yaxes(title="ARI of AAH groups with probe clusters")
    fig.update_layout(barmode="overlay")
    return style.base_layout(fig, title or f"head groups against probe clusters, level {level}", height=420)
