"""Training curves: loss and validation loss, perplexity, learning rate, throughput and step time,
one line per run (colour by regime, dash by seed), with TensorBoard-style smoothing and a log-step axis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aah_viz.analysis.curves import robust_range, smooth
from aah_viz.figures import style

# (panel title, y-axis title, [(scalar name, transform, trace suffix, markers)])
PANELS = (
    ("loss", style.LOSS_BOTH, [("loss", None, "train", False), ("val_loss", None, "val", True)]),
    ("perplexity", "perplexity (exp(loss))", [("loss", "exp", "train", False), ("val_loss", "exp", "val", True)]),
    ("learning rate", "learning rate", [("lr", None, "", False)]),
    ("throughput", "tokens / s (measured)", [("tokens_per_s", None, "", False)]),
    ("step time", "step time (s, measured)", [("step_time_s", None, "", False)]),
)


def training_curves_figure(
    series: pd.DataFrame,
    smoothing: float = 0.0,
    log_step: bool = False,
    title: str = "training curves",
    log_loss: bool = False,
    robust: bool = True,
) -> go.Figure:
    """Five panels on a shared step axis. ``series``: columns label, regime, seed, name, step, value.

    ``robust`` (as the Training page): values beyond Tukey's far-out fences (the first losses, about
    115 nats, whose perplexity is 10^50) do not set the loss and perplexity axes; the lines run beyond."""
    fig = make_subplots(
        rows=3,
        cols=2,
        subplot_titles=[p[0] for p in PANELS],
        vertical_spacing=0.11,
        horizontal_spacing=0.12,
    )
    labels = list(dict.fromkeys(series["label"])) if not series.empty else []
    shown: dict[int, list] = {0: [], 1: []}  # the y values drawn in the loss (0) and perplexity (1) panels
    for label in labels:
        run = series[series["label"] == label]
        regime, seed = run["regime"].iloc[0], run["seed"].iloc[0]
        line = style.run_line(regime, seed)
        legend_done = False
        for i, (_, _, traces) in enumerate(PANELS):
            row, col = i // 2 + 1, i % 2 + 1
            for name, transform, suffix, markers in traces:
                part = run[run["name"] == name].sort_values("step")
                if part.empty:
                    continue
                x = part["step"].to_numpy(dtype=np.float64)
                raw = part["value"].to_numpy(dtype=np.float64)
                y = raw if markers else smooth(raw, smoothing)
                if transform == "exp":  # perplexity of the (smoothed) loss, never a smoothed exp
                    with np.errstate(over="ignore"):
                        raw, y = np.exp(raw), np.exp(y)
                if not markers and smoothing > 0:  # the raw series faintly behind the smoothed one
                    fig.add_trace(
                        style.raw_line(x, raw, line["color"], label, f"{label} {suffix} raw".strip()), row=row, col=col
                    )
                if i in shown:
                    shown[i].append(y)
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=y,
                        mode="lines+markers" if markers else "lines",
                        line=dict(**line, width=2 if markers else 1.5),
                        marker=dict(symbol="circle-open" if markers else None, size=7),
                        name=label,
                        legendgroup=label,
                        showlegend=not legend_done,
                        hovertemplate=f"{label}<br>{suffix or name} at step %{{x:.0f}}: %{{y:.4g}}<extra></extra>",
                    ),
                    row=row,
                    col=col,
                )
                legend_done = True
    for i, (_, ytitle, _) in enumerate(PANELS):
        row, col = i // 2 + 1, i % 2 + 1
        fig.update_yaxes(title=dict(text=ytitle, font=dict(size=11)), row=row, col=col)
        fig.update_xaxes(
            title=dict(text=style.STEP, font=dict(size=11)), type="log" if log_step else None, row=row, col=col
        )
    fig.update_yaxes(type="log", row=1, col=2)
    if log_loss:
        fig.update_yaxes(type="log", row=1, col=1)
    if robust:
        for i, log in ((0, log_loss), (1, True)):
            yr = robust_range(shown[i], log=log)
            if yr is not None:
                fig.update_yaxes(range=list(yr), row=1, col=i + 1)
    fig.add_annotation(
        text="lines: training batches (dropout on)<br>open circles: validation",  # two lines: inside the empty panel
        xref="paper",
        yref="paper",
        x=0.98,
        y=0.16,
        showarrow=False,
        font=dict(size=12, color="#555"),
        align="right",
        xanchor="right",
    )
    if not labels:
        fig.add_annotation(
            text="no training scalars logged yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )
    style.base_layout(fig, title, height=900)
    return fig.update_layout(
        legend=dict(title_text="run (colour: regime, dash: seed)", orientation="h", yanchor="top", y=-0.08, x=0)
    )
