"""Axis titles (with units and denominators), the window palette and shared layout defaults."""

from __future__ import annotations

import numpy as np
import plotly.colors as pcolors
import plotly.graph_objects as go

from aah_viz.regimes import REGIMES

STEP = "training step"
LAYER = "layer"
HEAD = "head"
WINDOW = "window (tokens)"
ACR = "ACR (Σ T·w / H·T²)"
COVERAGE = "causal-pair coverage (attended causal pairs / all causal pairs)"
LOSS = "training loss (nats)"
VAL_LOSS = "validation loss (nats)"
LOSS_BOTH = "loss (nats; train and validation)"
BUCKET_SHARE = "share of heads (heads at window / heads in layer)"
SWITCH_RATE = "window switches per update (switches / updates − 1)"
GRAD_NORM = "controller gradient norm (L2)"
WEIGHT_DRIFT = "controller weight drift (L2 distance from init)"
MARGIN = "decision margin (top-1 − top-2 logit)"
LEVEL = "hierarchy level (heads = 0)"

TEMPLATE = "plotly_white"
# black - red - orange - yellow, the scale of the paper's Figure 4
FIGURE4_SCALE = [[0.0, "rgb(0,0,0)"], [0.35, "rgb(160,20,20)"], [0.7, "rgb(245,140,20)"], [1.0, "rgb(255,240,120)"]]


# values read against zero (a score minus its baseline): blue above, red below, the colours the
# relation chart gives a relation above and below its baseline; captions name them from the scale
DIVERGING_SCALE = "RdBu"


def colour_word(colour: str) -> str:
    """A plain name for an ``rgb(...)`` or ``#rrggbb`` colour, by hue: red, orange, yellow, green,
    blue, purple, or grey (near-white and near-black included)."""
    import colorsys

    r, g, b = pcolors.hex_to_rgb(colour) if colour.startswith("#") else pcolors.unlabel_rgb(colour)
    h, light, sat = colorsys.rgb_to_hls(r / 255, g / 255, b / 255)
    if sat < 0.2 or light > 0.92 or light < 0.08:
        return "grey"
    hue = h * 360
    for edge, word in ((20, "red"), (45, "orange"), (70, "yellow"), (170, "green"), (260, "blue"), (330, "purple")):
        if hue < edge:
            return word
    return "red"


def scale_words(name: str) -> tuple[str, str]:
    """(colour at the low end, colour at the high end) of a named scale, in words: what a caption says."""
    stops = named_scale(name)
    return colour_word(stops[0][1]), colour_word(stops[-1][1])


def named_scale(name: str) -> list:
    """A named Plotly colourscale as explicit stops (a theme cannot swap explicit stops)."""
    out = []
    for p, c in pcolors.get_colorscale(name):
        if c.startswith("#"):
            c = "rgb({},{},{})".format(*pcolors.hex_to_rgb(c))
        out.append([float(p), c])
    return out


def window_colors(windows: list[int]) -> dict[int, str]:
    """One colour per candidate window, short (dark) to long (light), stable for a window set."""
    windows = sorted(int(w) for w in windows)
    if not windows:
        return {}
    if len(windows) == 1:
        return {windows[0]: pcolors.sample_colorscale("Viridis", [0.5])[0]}
    points = [i / (len(windows) - 1) for i in range(len(windows))]
    return dict(zip(windows, pcolors.sample_colorscale("Viridis", points)))


def window_z(windows_tokens: np.ndarray) -> np.ndarray:
    """Colour coordinate of windows: log2 of the tokens, so doubling windows get equal colour bands."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.asarray(windows_tokens, dtype=np.float64)).astype(np.float32)


def discrete_window_scale(windows: list[int]) -> tuple[list, float, float]:
    """A step colourscale over log2(window): each candidate gets one flat, equally wide band.

    Returns (colorscale, zmin, zmax) for a heatmap whose z is :func:`window_z` of the windows.
    """
    windows = sorted(int(w) for w in windows)
    colors = window_colors(windows)
    if not windows:
        return [[0.0, "#cccccc"], [1.0, "#cccccc"]], 0.0, 1.0
    zs = [float(np.log2(w)) for w in windows]
    if len(windows) == 1:
        c = colors[windows[0]]
        return [[0.0, c], [1.0, c]], zs[0] - 0.5, zs[0] + 0.5
    zmin, zmax = zs[0], zs[-1]
    span = zmax - zmin
    bounds = [0.0] + [((a + b) / 2 - zmin) / span for a, b in zip(zs, zs[1:])] + [1.0]
    scale = []
    for i, w in enumerate(windows):
        scale.append([bounds[i], colors[w]])
        scale.append([bounds[i + 1], colors[w]])
    return scale, zmin, zmax


def with_template(fig: go.Figure) -> go.Figure:
    """``fig.update_layout(template=TEMPLATE)`` without validating the template again: Plotly copies and checks
    every property of an assigned template (about 10 ms a figure, a page draws ten), where the registered
    template is valid already. Plotly applies its default template the same way (``_initialize_layout_template``);
    a Plotly without that switch gets the checked assignment."""
    layout = fig.layout
    if not hasattr(layout, "_validate"):
        return fig.update_layout(template=TEMPLATE)
    before = layout._validate
    layout._validate = False
    try:
        layout.template = _registered_template()
    finally:
        layout._validate = before
    return fig


def _registered_template():
    import plotly.io as pio

    return pio.templates[TEMPLATE]


def base_layout(fig: go.Figure, title: str, height: int | None = None, width_chars: int = 70) -> go.Figure:
    """Template, margins and a title wrapped to fit (each extra title line gets its own top margin)."""
    title = wrap_title(title or "", width_chars)
    lines = title.count("<br>") + 1 if title else 0
    with_template(fig)
    fig.update_layout(
        title=dict(text=title, font=dict(size=16 if lines <= 1 else 14)),
        margin=dict(l=60, r=20, t=40 + 22 * max(lines, 1), b=50),
    )
    if height:
        fig.update_layout(height=height)
    return fig


def stacked_panels(titles, spacing: float) -> go.Figure:
    """One panel per title, stacked over a shared x axis (quantities over training)."""
    from plotly.subplots import make_subplots

    return make_subplots(
        rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=spacing, subplot_titles=tuple(titles)
    )


def add_line(fig: go.Figure, x, y, name: str, row: int, **line) -> None:
    """A line named ``name`` in panel ``row`` of :func:`stacked_panels`' figure (``line``: colour, dash)."""
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line=line), row=row, col=1)


def interval_bars(value, low, high, **look) -> dict:
    """Error bars from ``low`` to ``high`` around ``value`` (a trace's ``error_x`` or ``error_y``)."""
    return dict(
        type="data", symmetric=False, array=np.asarray(high - value), arrayminus=np.asarray(value - low), **look
    )


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A figure that says why it has no data (instead of an empty plot)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return base_layout(fig, title, height=300)


# a regime has one colour on every page and in every export (aah_viz.regimes); an unknown regime gets
# one of the same palette from its name
REGIME_PALETTE = tuple(r.color for r in REGIMES.values())
SEED_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SEED_SYMBOLS = ("circle", "square", "triangle-up", "diamond", "cross", "x")


def regime_color(regime: str | None) -> str:
    """The colour of a regime, the same on every page (unknown regimes: a stable colour from the name)."""
    name = str(regime or "")
    if name in REGIMES:
        return REGIMES[name].color
    import zlib

    return REGIME_PALETTE[zlib.crc32(name.encode()) % len(REGIME_PALETTE)]


def _seed_index(seed) -> int:
    try:
        return int(seed)
    except (TypeError, ValueError):
        return 0


def seed_dash(seed) -> str:
    """Line dash of a seed: seed 0 solid, seed 1 dashed, ... (cycles after six seeds)."""
    return SEED_DASHES[_seed_index(seed) % len(SEED_DASHES)]


def seed_symbol(seed) -> str:
    return SEED_SYMBOLS[_seed_index(seed) % len(SEED_SYMBOLS)]


def run_line(regime, seed) -> dict:
    """Plotly line style of a run: colour by regime, dash by seed."""
    return dict(color=regime_color(regime), dash=seed_dash(seed))


# one colour a run where runs are drawn one line each (W&B's and TensorBoard's way): runs of the same
# regime and seed stay apart; past the palette the colours repeat with the next dash
RUN_PALETTE = tuple(dict.fromkeys(c.lower() for c in (*pcolors.qualitative.D3, *pcolors.qualitative.Dark24)))
COLOUR_BY = {"run": "each run its own colour", "regime": "regime (colour) and seed (dash)"}


def run_lines(runs, by: str = "run") -> list[dict]:
    """Line styles of runs drawn together, in their order: ``runs`` is (regime, seed) pairs. ``by="run"``:
    each run its own colour (no two alike for up to 6 x the palette's runs); ``by="regime"``: colour by
    regime, dash by seed (runs sharing both look alike: their labels tell them apart)."""
    if by == "regime":
        return [run_line(regime, seed) for regime, seed in runs]
    if by != "run":
        raise ValueError(f"colour by run or regime, not {by!r}")
    n = len(RUN_PALETTE)
    return [dict(color=RUN_PALETTE[i % n], dash=SEED_DASHES[(i // n) % len(SEED_DASHES)]) for i in range(len(runs))]


def raw_line(x, y, color: str, group: str, name: str) -> go.Scatter:
    """The unsmoothed series, faint behind its smoothed line (TensorBoard's look), out of the legend
    and the hover."""
    return go.Scatter(
        x=x,
        y=y,
        mode="lines",
        line=dict(color=color, width=1),
        opacity=0.25,
        showlegend=False,
        legendgroup=group,
        hoverinfo="skip",
        name=name,
    )


def wrap_title(title: str, width: int = 70) -> str:
    """Break a long title into lines of at most ``width`` characters (at spaces), so it fits the figure."""
    if not title or len(title) <= width or "<br>" in title:
        return title
    lines, line = [], ""
    for word in title.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "<br>".join(lines)
