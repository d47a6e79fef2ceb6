"""Window allocation figures: layer x head heatmap, head x step timeline, branch bars, coverage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from aah_viz.figures import style


def _window_colorbar(windows: list[int]) -> dict:
    return dict(
        title=dict(text=style.WINDOW), tickvals=[float(np.log2(w)) for w in windows], ticktext=[str(w) for w in windows]
    )


def cell_overlay(n_layer: int, n_head: int, values: np.ndarray, hover: str) -> go.Scatter:
    """Invisible markers on every cell: Plotly selects points, not heatmap cells, so a click on a
    head lands on its marker (customdata [layer, head, value]) and selects it. The markers carry the
    hover text too (a heatmap under them would not show its own)."""
    li, hi = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    return go.Scatter(
        x=hi.ravel(),
        y=li.ravel(),
        mode="markers",
        # markers no wider than a cell of a half-width chart: overlapping markers all count as under the
        # pointer, and Plotly then takes the last one, not the nearest
        marker=dict(size=max(6, min(40, 320 // max(n_head, 1))), opacity=0.0, symbol="square"),
        customdata=np.stack([li.ravel(), hi.ravel(), np.asarray(values, dtype=np.float64).ravel()], axis=1),
        hovertemplate=hover,
        showlegend=False,
        name="click to select a head",
        meta="helper",
    )


def outline_cell(fig: go.Figure, x: float, y: float, color: str = "#000") -> None:
    fig.add_shape(
        type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5, line=dict(color=color, width=3), layer="above"
    )


def _window_cells(matrix: np.ndarray, windows: list[int], x, y, hover: str, **extra) -> go.Heatmap:
    """Windows in tokens as a heatmap: colour bands per doubling (log2), the tokens in the hover."""
    scale, zmin, zmax = style.discrete_window_scale(windows)
    return go.Heatmap(
        z=style.window_z(matrix), customdata=np.nan_to_num(matrix, nan=-1).astype(np.int32), x=x, y=y,
        colorscale=scale, zmin=zmin, zmax=zmax, colorbar=_window_colorbar(windows), hovertemplate=hover, **extra,
    )  # fmt: skip


def window_heatmap_figure(
    matrix: np.ndarray,
    windows: list[int],
    title: str = "",
    selected: tuple[int, int | None] | None = None,
    clickable: bool = True,
    compact: bool = False,
) -> go.Figure:
    """Layer (rows) x head (columns) executed windows at one step.

    z is log2(window) (equal colour bands per doubling); customdata holds the window in tokens.
    ``selected`` (layer, head) outlines a head (or a whole layer when head is None); ``compact``
    is for small side-by-side panels (fewer tick labels, no colour bar title).
    """
    n_layer, n_head = matrix.shape
    hover = "L%{y}H%{x}<br>window %{customdata} tokens<extra></extra>"
    heads, layers = np.arange(n_head), np.arange(n_layer)
    fig = go.Figure(_window_cells(matrix, windows, heads, layers, hover, xgap=1, ygap=1, showscale=not compact))
    if clickable:
        fig.data[0].hoverinfo = "skip"
        fig.add_trace(
            cell_overlay(
                n_layer,
                n_head,
                np.nan_to_num(matrix, nan=-1),
                "L%{customdata[0]}H%{customdata[1]}<br>window %{customdata[2]:.0f} tokens<extra></extra>",
            )
        )
    if selected is not None:
        layer, head = selected
        if head is None:
            fig.add_shape(
                type="rect",
                x0=-0.5,
                x1=n_head - 0.5,
                y0=layer - 0.5,
                y1=layer + 0.5,
                line=dict(color="#000", width=2, dash="dot"),
            )
        else:
            outline_cell(fig, head, layer)
    tick = (1 if n_head <= 16 else 2) if not compact else max(1, n_head // 4)
    fig.update_xaxes(title=style.HEAD, dtick=tick if n_head <= 64 else None, range=[-0.5, n_head - 0.5])
    fig.update_yaxes(  # an explicit range: the click targets must not widen the axis
        title=style.LAYER,
        range=[n_layer - 0.5, -0.5],
        dtick=(1 if n_layer <= 32 else None) if not compact else max(1, n_layer // 6),
    )
    fig.update_layout(clickmode="event+select", dragmode=False)
    return style.base_layout(
        fig, title, height=max(320, 22 * n_layer + 140) if not compact else 320, width_chars=70 if not compact else 32
    )


def head_timeline_figure(
    steps: np.ndarray,
    matrix: np.ndarray,
    windows: list[int],
    title: str = "",
    selected_head: int | None = None,
    current_step: int | None = None,
    warmup: int | None = None,
) -> go.Figure:
    """Head (rows) x sampled training step (columns) windows of one layer; the selected head and the
    selected step are outlined, warm-up is shaded."""
    n_head = matrix.shape[0]
    hover = "step %{x}, head %{y}<br>window %{customdata} tokens<extra></extra>"
    steps = np.asarray(steps, dtype=np.int64)
    if warmup:  # warm-up attends fully: grey, not the colour of a window the heads chose
        matrix = np.where(steps[None, :] < int(warmup), np.nan, np.asarray(matrix, dtype=np.float64))
    fig = go.Figure(_window_cells(matrix, windows, steps, np.arange(n_head), hover, hoverongaps=False))
    if selected_head is not None and len(steps):
        fig.add_shape(
            type="rect",
            xref="x domain",
            x0=0,
            x1=1,
            y0=selected_head - 0.5,
            y1=selected_head + 0.5,
            line=dict(color="#000", width=2),
        )
    if current_step is not None:
        fig.add_vline(x=current_step, line=dict(color="#000", width=1, dash="dot"))
    if warmup:
        _shade_warmup(fig, warmup, text="warm-up: full attention")
    fig.update_xaxes(title=style.STEP)
    fig.update_yaxes(title=style.HEAD, autorange="reversed", dtick=1 if n_head <= 32 else None)
    return style.base_layout(fig, title, height=max(300, 18 * n_head + 140))


def _shade_warmup(fig: go.Figure, warmup: int, *, text: str = "warm-up", **where) -> None:
    fig.add_vrect(
        x0=0,
        x1=warmup,
        fillcolor="#999",
        opacity=0.15,
        line_width=0,
        annotation_text=text,
        annotation_position="bottom right",
        annotation_font_size=10,
        exclude_empty_subplots=False,  # the same span on every panel; the check walks every trace's points
        **where,
    )


def branch_bars_figure(per_layer: pd.DataFrame, windows: list[int], title: str = "") -> go.Figure:
    """Stacked bars per layer: share of its heads at each window (the paper's branch frequencies)."""
    colors = style.window_colors(windows)
    fig = go.Figure()
    layers = per_layer.index.to_numpy()
    for w in windows:
        vals = per_layer[w].to_numpy(dtype=np.float64) if w in per_layer else np.zeros(len(layers))
        fig.add_trace(
            go.Bar(
                x=layers,
                y=vals,
                name=f"{w}",
                marker_color=colors.get(w),
                hovertemplate=f"layer %{{x}}<br>window {w}: %{{y:.1%}}<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack", legend_title_text=style.WINDOW)
    fig.update_xaxes(title=style.LAYER, dtick=1 if len(layers) <= 16 else 4)
    fig.update_yaxes(title=style.BUCKET_SHARE, range=[0, 1], tickformat=".0%")
    return style.base_layout(fig, title, height=420)


COVERAGE_PANELS = (
    ("acr", "ACR: Σ T·w / H·T² (the paper's key-length proxy)", "ACR"),
    ("acr_causal", "causal-pair coverage: attended causal pairs / all causal pairs", "coverage"),
    ("realised_work", "realised work: score elements computed / all causal pairs (per backend)", "realised work"),
)


def coverage_figure(
    series: pd.DataFrame, title: str = "", warmup: int | None = None, color_by: str = "run"
) -> go.Figure:
    """The three coverage figures over training, stacked on one step axis, one line per run (``label``).

    ACR (the paper's key-length proxy), causal-pair coverage, and realised work (what the
    attention backend actually computed; dense masked computes every T² score, about 2).
    ``series`` has columns label, name (``acr`` / ``acr_causal`` / ``realised_work``), step,
    value (already binned), and optionally regime, seed and backend. ``color_by``: ``run`` (each run its
    own colour) or ``regime`` (colour by regime, dash by seed).
    The long definitions are the panel titles; the y axes carry short names, so nothing overlaps.
    """
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, subplot_titles=[t for _, t, _ in COVERAGE_PANELS], vertical_spacing=0.09
    )
    labels = list(dict.fromkeys(series["label"])) if not series.empty else []
    firsts = [series[series["label"] == label].iloc[0] for label in labels]
    looks = style.run_lines([(r.get("regime"), r.get("seed")) for r in firsts], color_by)
    for label, line in zip(labels, looks):
        run = series[series["label"] == label]
        backend = run["backend"].iloc[0] if "backend" in run and run["backend"].notna().any() else None
        shown = f"{label} [{backend}]" if backend else label
        for row, (name, _, _) in enumerate(COVERAGE_PANELS, start=1):
            part = run[run["name"] == name]
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["step"].to_numpy(dtype=np.float64),
                    y=part["value"].to_numpy(dtype=np.float64),
                    mode="lines",
                    name=shown,
                    legendgroup=label,
                    showlegend=row == 1,
                    line=line,
                    hovertemplate=f"{shown}<br>step %{{x:.0f}}<br>%{{y:.3f}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    fig.update_xaxes(title=style.STEP, row=len(COVERAGE_PANELS), col=1)
    for row, (name, _, axis) in enumerate(COVERAGE_PANELS, start=1):
        top = 1.05
        if name == "realised_work" and not series.empty:  # dense masked computes about twice the causal pairs
            values = series.loc[series["name"] == name, "value"].dropna()
            top = max(top, float(values.max()) * 1.05) if len(values) else top
        fig.update_yaxes(title=dict(text=axis, font=dict(size=12)), range=[0, top], row=row, col=1)
    if warmup:
        for row in range(1, len(COVERAGE_PANELS) + 1):
            _shade_warmup(fig, warmup, row=row, col=1)
    fig.update_annotations(font_size=12)
    style.base_layout(fig, title, height=880)
    return fig.update_layout(
        legend=dict(
            title_text="run [backend]" if color_by == "run" else "run (colour: regime, dash: seed) [backend]",
            orientation="h",
            y=-0.07,
            yanchor="top",
        )
    )


def bucket_heatmap_figure(table: pd.DataFrame, title: str = "", row_title: str = "run") -> go.Figure:
    """Runs or regimes (rows) x window (columns): share of slots at each window, annotated in %.

    The layout of the paper's Figure 4 ("final selected-window distribution").
    """
    z = table.to_numpy(dtype=np.float64) * 100.0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(c) for c in table.columns],
            y=[str(i) for i in table.index],
            colorscale=style.FIGURE4_SCALE,
            zmin=0,
            zmax=max(65.0, float(np.nanmax(z)) if z.size else 65.0),
            colorbar=dict(title=dict(text="% of slots")),
            text=np.round(z, 1),
            texttemplate="%{text:.1f}%",
            hovertemplate="%{y}<br>window %{x}: %{z:.1f}%<extra></extra>",
        )
    )
    fig.update_xaxes(title=style.WINDOW, type="category")
    fig.update_yaxes(title=row_title, autorange="reversed")
    return style.base_layout(fig, title, height=max(300, 40 * len(table) + 160))


def needed_vs_executed_figure(spans: pd.DataFrame, windows: list[int], title: str = "") -> go.Figure:
    """Per head (one marker, coloured by layer): the window that keeps 95% of its full-attention mass (x)
    against the window routing executes (y), both log-scaled. Below the diagonal: routing cuts what
    the head uses (``aah-viz profile``, the ``head_spans`` table)."""
    fig = go.Figure()
    if len(spans):
        hi = float(max(spans["needed_95"].max(), spans["executed_window"].max(), max(windows)))
        lo = float(max(1, min(spans["needed_95"].min(), spans["executed_window"].min())))
        fig.add_trace(
            go.Scatter(
                x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="#999", dash="dot"), name="needed = executed"
            )
        )
        fig.add_trace(
            go.Scatter(
                x=spans["needed_95"],
                y=spans["executed_window"],
                mode="markers",
                marker=dict(color=spans["layer"], colorscale="Viridis", showscale=True, colorbar=dict(title="layer")),
                customdata=np.stack([spans["layer"], spans["head"], spans["needed_99"]], axis=1),
                hovertemplate="layer %{customdata[0]} head %{customdata[1]}<br>needed (95%): %{x}<br>"
                "needed (99%): %{customdata[2]}<br>executed: %{y}<extra></extra>",
                name="heads",
            )
        )
    fig.update_layout(
        title=title,
        xaxis=dict(title="window keeping 95% of the mass (tokens)", type="log"),
        yaxis=dict(title="executed window (tokens)", type="log", tickvals=list(windows)),
        # the legend under the plot: at its right it printed over the colour bar's title
        legend=dict(orientation="h", x=0.0, y=-0.22, xanchor="left", yanchor="top"),
    )
    style.with_template(fig)
    return fig


def span_grid(heads: pd.DataFrame) -> dict:
    """Layer x head matrices from ``data.head_spans_data`` rows: ``needed`` (the 95% span), ``executed``
    (the window routing runs) and ``cut`` (the share of attention mass beyond the executed window)."""
    n_layer, n_head = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    grid = {name: np.full((n_layer, n_head), np.nan) for name in ("needed", "executed", "cut")}
    for name, column in (("needed", "needed_95"), ("executed", "executed_window"), ("cut", "mass_cut")):
        grid[name][heads["layer"], heads["head"]] = heads[column].astype(float)
    return grid


def span_heatmaps_figure(spans: pd.DataFrame, windows: list[int], title: str = "") -> go.Figure:
    """Three layer x head panels from ``aah-viz profile`` (``data.head_spans_data`` rows): the span keeping
    95% of each head's attention mass, the window routing executes, and the mass the executed window leaves
    out (where routing cuts a head short, and by how much)."""
    if spans.empty:
        return style.empty_figure("no head_spans table: aah-viz profile RUN --data TEXT --out RUN adds it", title)
    grid = span_grid(spans)
    n_layer, n_head = grid["needed"].shape
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_yaxes=True,
        horizontal_spacing=0.06,
        subplot_titles=("span keeping 95% of the mass", "executed window", "mass beyond the executed window"),
    )
    lo = float(np.log2(max(1.0, np.nanmin([np.nanmin(grid["needed"]), min(windows)]))))
    hi = float(np.log2(max(np.nanmax(grid["needed"]), np.nanmax(grid["executed"]), max(windows))))
    ticks = sorted({*windows, int(np.nanmax(grid["needed"]))})
    bar = dict(title=dict(text="tokens"), tickvals=[float(np.log2(w)) for w in ticks], ticktext=[str(w) for w in ticks],
               x=0.62, len=0.9)  # fmt: skip
    for col, name in ((1, "needed"), (2, "executed")):
        m = grid[name]
        fig.add_trace(
            go.Heatmap(
                z=np.log2(m),
                customdata=m,
                x=list(range(n_head)),
                y=list(range(n_layer)),
                zmin=lo,
                zmax=hi,
                colorscale="Viridis",
                showscale=col == 1,
                colorbar=bar,
                hovertemplate="layer %{y} head %{x}: %{customdata:.0f} tokens<extra></extra>",
            ),
            row=1,
            col=col,
        )
    fig.add_trace(
        go.Heatmap(
            z=grid["cut"] * 100.0,
            x=list(range(n_head)),
            y=list(range(n_layer)),
            zmin=0.0,
            zmax=max(5.0, float(np.nanmax(grid["cut"], initial=0.0) * 100.0)),
            colorscale="Reds",
            colorbar=dict(title=dict(text="% mass cut"), x=1.0, len=0.9),
            hovertemplate="layer %{y} head %{x}: %{z:.1f}% of the mass beyond the executed window<extra></extra>",
        ),
        row=1,
        col=3,
    )
    return _layer_head_panels(fig, title, n_layer)


def retrieval_heads_figure(rows: pd.DataFrame, baseline: dict | None, title: str = "") -> go.Figure:
    """Two layer x head panels from ``aah-viz profile --retrieval`` (``data.head_retrieval_data``): the passkey
    questions each head loses when it alone is cut to the window, and how far the key's negative
    log-likelihood rises (nats over the uncut model's), which shows the heads that matter before answers flip."""
    if rows.empty:
        return style.empty_figure("no head_retrieval table: aah-viz profile ... --retrieval N adds it", title)
    n_layer, n_head = int(rows["layer"].max()) + 1, int(rows["head"].max()) + 1
    lost = np.full((n_layer, n_head), np.nan)
    rise = np.full((n_layer, n_head), np.nan)
    lost[rows["layer"], rows["head"]] = rows["lost"].astype(float)
    base_nll = float(baseline["baseline_answer_nll"]) if baseline else float(rows["answer_nll"].min())
    rise[rows["layer"], rows["head"]] = rows["answer_nll"].astype(float) - base_nll
    answered = int(baseline["baseline_retrieved"]) if baseline else int(rows["asked"].max())
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.08,
        subplot_titles=(f"questions lost (of {answered} answered uncut)", "rise of the key's NLL (nats)"),
    )
    fig.add_trace(
        go.Heatmap(
            z=lost,
            x=list(range(n_head)),
            y=list(range(n_layer)),
            zmin=0.0,
            zmax=max(1.0, float(answered)),
            colorscale="Reds",
            colorbar=dict(title=dict(text="lost"), x=0.44, len=0.9),
            hovertemplate="layer %{y} head %{x}: %{z:.0f} questions lost when this head alone is cut<extra></extra>",
        ),
        row=1,
        col=1,
    )
    top = float(np.nanmax(np.abs(rise), initial=0.0)) or 1.0
    fig.add_trace(
        go.Heatmap(
            z=rise,
            x=list(range(n_head)),
            y=list(range(n_layer)),
            zmin=-top,
            zmax=top,
            colorscale="RdBu_r",
            colorbar=dict(title=dict(text="nats"), x=1.0, len=0.9),
            hovertemplate="layer %{y} head %{x}: the key's NLL %{z:+.3f} nats over the uncut model<extra></extra>",
        ),
        row=1,
        col=2,
    )
    return _layer_head_panels(fig, title, n_layer)


def _layer_head_panels(fig: go.Figure, title: str, n_layer: int) -> go.Figure:
    """Side-by-side layer x head panels: heads across, layer 0 on top, the layer axis titled once."""
    fig.update_xaxes(title=style.HEAD)
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(title=style.LAYER, row=1, col=1)
    style.with_template(fig).update_layout(title=title or None, height=max(360, 18 * n_layer + 160))
    return fig
