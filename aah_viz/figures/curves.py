"""Any logged scalar of several runs against step, tokens or wall time: one chart per scalar, runs
overlaid or grouped (mean and band), TensorBoard's smoothing with the raw line faint behind, a y
range that the first losses cannot flatten, and one hover with every line's value at an x."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from aah_viz.analysis import curves, manifest_fields, queries
from aah_viz.analysis import windows as wstats
from aah_viz.analysis.configurations import group_labels, setup_groups
from aah_viz.errors import AAHVizError
from aah_viz.figures import style
from aah_viz.figures.data import MAX_SERIES_POINTS, run_label
from aah_viz.regimes import REGIMES

X_AXES = {
    "step": style.STEP,
    "tokens": "tokens processed (Σ tokens/s × step time)",
    "wall_s": "wall time (s, Σ step times; evaluation not counted)",
}
X_NAMES = {"step": "step", "tokens": "tokens", "wall_s": "wall time"}
X_HOVER = {"step": ",.0f", "tokens": ",.0f", "wall_s": ",.1f"}
# scalars logged only at evaluations: drawn as points, never smoothed
SPARSE = ("val_loss", "val_ppl")
# the values a scalar can take, by its name (per-layer ones as NAME/layer_L): bands are clipped to them
SHARES = ("acr", "acr_causal", "realised_work", "flops_ratio_est", "coverage", "frac", "share")
NON_NEGATIVE = ("loss", "val_loss", "val_ppl", "ppl", "lr", "tokens_per_s", "step_time_s", "peak_mem_mb", "grad_norm",
                "controller_grad_norm", "controller_weight_drift")  # fmt: skip


def value_domain(name: str) -> tuple[float, float] | None:
    """(lo, hi) of the values ``name`` can take: shares in [0, 1], losses and rates at least 0."""
    base = name.split("/", 1)[0]
    if base in SHARES or base.startswith(("frac_", "share_")):
        return (0.0, 1.0)
    if base in NON_NEGATIVE or base.endswith(("_loss", "_ppl", "_norm")):
        return (0.0, np.inf)
    return None


DEFAULT_SCALARS = ("loss", "val_loss")
PLOT_LEFT = 84  # px left of every chart's plot area: the widest tick labels and the y title fit
# the legend under the plot grows the figure, never shrinks the plot: the plot area is PLOT_PX high whatever
# the legend holds; the legend starts below the x axis's ticks and title and shows up to LEGEND_MAX_ROWS rows
# (more scroll inside it); rows are estimated for a chart LEGEND_WIDTH_PX wide (a narrower one scrolls sooner)
PLOT_PX = 250
BELOW_AXIS_PX = 58
LEGEND_ROW_PX, LEGEND_MAX_ROWS, LEGEND_WIDTH_PX = 21, 8, 900
COLUMNS = ["run", "label", "regime", "seed", "name", "step", "tokens", "wall_s", "value"]


LAYER_TAG = "/layer_"  # a per-layer scalar's name on the page: "acr/layer_3", as TensorBoard tags it


def layer_scalar(name: str) -> tuple[str, int] | None:
    """("acr", 3) for "acr/layer_3"; None for a model-wide name."""
    base, tag, layer = name.rpartition(LAYER_TAG)
    return (base, int(layer)) if tag and base and layer.isdigit() else None


def scalar_order(name: str) -> tuple:
    """Model-wide names first, then per-layer ones by name and layer number (layer_2 before layer_10)."""
    found = layer_scalar(name)
    return (0, name, -1) if found is None else (1, found[0], found[1])


def scalar_names(run) -> list[str]:
    """The scalars a run logged, sorted: model-wide names, then each per-layer one as NAME/layer_L
    (a read of the name and layer columns only)."""
    import pyarrow.compute as pc

    t = run.arrow_table("scalars", columns=["name", "layer"])
    if t.num_rows == 0:
        return []
    wide = pc.filter(t.column("name"), pc.is_null(t.column("layer")))
    names = sorted(str(n) for n in pc.unique(wide).to_pylist() if n is not None)
    per_layer = t.filter(pc.is_valid(t.column("layer"))).group_by(["name", "layer"]).aggregate([]).to_pylist()
    pairs = sorted((str(r["name"]), int(r["layer"])) for r in per_layer if r["name"] is not None)
    return names + [f"{name}{LAYER_TAG}{layer}" for name, layer in pairs]  # pairs sort as scalar_order does


def curve_data(runs, names, keys=None, max_points: int = MAX_SERIES_POINTS) -> pd.DataFrame:
    """The named model-wide scalars of each run, binned to at most ``max_points`` per line, each
    point with its step, the tokens processed and the wall time up to that step.

    Tokens and wall time are running totals of ``tokens_per_s × step_time_s`` and ``step_time_s``
    (each logged value standing for the steps since the previous one); NaN when the run did not log them.
    """
    keys = list(keys) if keys is not None else [run.run_id for run in runs]
    parts = []
    for key, run in zip(keys, runs):
        wide = [n for n in names if layer_scalar(n) is None]
        s = queries.scalar_frame(run, [*wide, "tokens_per_s", "step_time_s"], model_wide=True)
        clock = _clock(s) if not s.empty else None
        wanted = s[s["name"].isin(wide)]
        layered = [(n, *layer_scalar(n)) for n in names if layer_scalar(n) is not None]
        if layered:
            rows = queries.scalar_frame(run, sorted({base for _, base, _ in layered}))
            for shown, base, layer in layered:
                one = rows[(rows["name"] == base) & (rows["layer"] == layer)].assign(name=shown, layer=None)
                wanted = pd.concat([wanted, one], ignore_index=True) if len(wanted) else one
        if wanted.empty:
            continue
        b = wstats.binned_series(wanted, "step", "value", max_points=max_points, by="name")
        if clock is None:
            b["tokens"], b["wall_s"] = np.nan, np.nan
        else:
            steps, tokens, wall = clock
            b["tokens"] = np.interp(b["step"], steps, tokens)
            b["wall_s"] = np.interp(b["step"], steps, wall)
        b.insert(0, "seed", run.seed)
        b.insert(0, "regime", run.regime)
        b.insert(0, "label", run_label(run, key))
        b.insert(0, "run", key)
        parts.append(b)
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def _clock(s: pd.DataFrame):
    """(steps, tokens, wall seconds) at each step that logged a step time, or None."""
    per = s[s["name"].isin(["tokens_per_s", "step_time_s"])].pivot_table(
        index="step", columns="name", values="value", aggfunc="mean"
    )
    if "step_time_s" not in per or per["step_time_s"].notna().sum() == 0:
        return None
    steps = per.index.to_numpy(dtype=np.float64)
    secs = per["step_time_s"].to_numpy(dtype=np.float64)
    rate = per["tokens_per_s"].to_numpy(dtype=np.float64) if "tokens_per_s" in per else np.full(len(steps), np.nan)
    return steps, curves.cumulative(steps, rate * secs), curves.cumulative(steps, secs)


def group_lines(names: list[str], by: str | None) -> list[dict]:
    """Line styles of the groups drawn together, in their order, no two alike: grouped by regime with one
    group a regime, each regime's colour (the same on every page); else each group its own colour of the
    runs' palette, then a dash once the palette is used up (18 setups of a sweep stay apart)."""
    if by == "regime" and all(n in REGIMES for n in names):
        colours = [style.regime_color(n) for n in names]
        if len(set(colours)) == len(colours):
            return [dict(color=c) for c in colours]
    n = len(style.RUN_PALETTE)
    return [dict(color=style.RUN_PALETTE[i % n], dash=style.SEED_DASHES[(i // n) % len(style.SEED_DASHES)])
            for i in range(len(names))]  # fmt: skip


def curves_figure(
    frame: pd.DataFrame,
    name: str,
    x: str = "step",
    smoothing: float = 0.0,
    groups: dict | None = None,
    group_by: str | None = None,
    band: str = "minmax",
    robust: bool = True,
    log_y: bool = False,
    x_range: tuple[float, float] | None = None,
    title: str | None = None,
    color_by: str = "run",
    labels: dict | None = None,
) -> go.Figure:
    """One scalar of several runs. ``frame``: :func:`curve_data`'s rows. ``groups``: run -> group
    value (runs grouped into one mean line with a band each); None draws every run.

    ``robust``: values beyond Tukey's far-out fences (the first losses) do not set the y range, the
    lines still run beyond it; ``x_range`` limits the x axis (the page shares it across charts).
    ``color_by``: ``run`` (each run its own colour) or ``regime`` (colour by regime, dash by seed).
    ``labels``: group -> its short name in the legend (:func:`group_labels`); the full name is in the hover.
    """
    part = frame[frame["name"] == name] if not frame.empty else frame
    sparse = name in SPARSE
    weight = 0.0 if sparse else smoothing
    fig = go.Figure()
    shown_y: list[np.ndarray] = []
    runs = list(dict.fromkeys(part["run"])) if not part.empty else []
    lines = {}
    for run in runs:
        r = part[part["run"] == run].sort_values("step")
        xs, raw = r[x].to_numpy(dtype=np.float64), r["value"].to_numpy(dtype=np.float64)
        ok = np.isfinite(xs)
        lines[run] = (r.iloc[0], xs[ok], raw[ok], curves.smooth(raw[ok], weight))
    inside = _inside(x_range)
    if groups is None:
        looks = style.run_lines([(first["regime"], first["seed"]) for first, *_ in lines.values()], color_by)
        for (run, (first, xs, raw, ys)), line in zip(lines.items(), looks):
            if weight > 0:
                fig.add_trace(style.raw_line(xs, raw, line["color"], run, _text(f"{first['label']} raw")))
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers" if sparse else "lines",
                    line=dict(**line, width=1.8),
                    marker=dict(size=6),
                    name=_text(first["label"]),
                    legendgroup=run,
                    hovertemplate="%{y:.4g}",
                )
            )
            shown_y.append(ys[inside(xs)])
    else:
        members: dict = {}
        for run in lines:
            members.setdefault(groups.get(run), []).append(run)
        ordered = sorted(members.items(), key=lambda g: str(g[0]))
        looks = group_lines([str(g) for g, _ in ordered], group_by)
        for (group, runs_in), look in zip(ordered, looks):
            gx, mean, lower, upper, n = curves.group_band(
                [(lines[r][1], lines[r][3]) for r in runs_in], band=band, domain=value_domain(name)
            )
            if gx.size == 0:
                continue
            color, short = look["color"], (labels or {}).get(group, group)
            label = _text(f"{group_by}={short} (n={len(runs_in)})")
            # the legend's short name; the hover adds the full one (every setting, the configuration)
            details = "" if str(short) == str(group) else _text(f" · {group}")
            if band != "none" and len(runs_in) > 1:
                fig.add_trace(
                    go.Scatter(
                        x=np.concatenate([gx, gx[::-1]]),
                        y=np.concatenate([upper, lower[::-1]]),
                        fill="toself",
                        fillcolor=_alpha(color, 0.18),
                        line=dict(width=0),
                        hoverinfo="skip",
                        showlegend=False,
                        legendgroup=label,
                        name=f"{label} band ({curves.BAND_NAMES[band]})",
                    )
                )
                shown_y += [lower[inside(gx)], upper[inside(gx)]]
            fig.add_trace(
                go.Scatter(
                    x=gx,
                    y=mean,
                    mode="lines+markers" if sparse else "lines",
                    line=dict(**look, width=2.2),
                    marker=dict(size=6),
                    name=label,
                    legendgroup=label,
                    # the name says n; a point says its own count only where fewer runs reach it
                    customdata=[f" ({k} of {len(runs_in)} runs)" if k < len(runs_in) else "" for k in n],
                    hovertemplate="%{y:.4g}%{customdata}" + details.replace("%{", "% {"),  # no template field
                    meta=dict(group=_text(group), runs=[int(k) for k in n]),  # read back by grouped_frame
                )
            )
            shown_y.append(mean[inside(gx)])
    if not runs:
        fig.add_annotation(text=f"no run logged {name}", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    # the hover's header is the x value: whole steps and tokens with thousands separators, not "21.96692k"
    fig.update_xaxes(title=dict(text=X_AXES[x], font=dict(size=11)), hoverformat=X_HOVER[x])
    if x_range is None and runs:  # every chart of a page on the same x range, whatever its own data
        every = frame[x].to_numpy(dtype=np.float64)
        every = every[np.isfinite(every)]
        x_range = (float(every.min()), float(every.max())) if every.size else None
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    fig.update_yaxes(title=dict(text=name, font=dict(size=11)), type="log" if log_y else None)
    if robust:
        yr = curves.robust_range(shown_y, log=log_y)
        if yr is not None:
            fig.update_yaxes(range=list(yr))
    style.base_layout(fig, title or f"{name} against {X_NAMES[x]}")
    key = "colour: regime, dash: seed" if groups is None and color_by == "regime" else None
    # one left margin whatever the tick labels ("12" or "0.00025"): stacked charts' plot areas line up
    fig.update_yaxes(automargin=False, title_standoff=6)
    shown = [t.name or "" for t in fig.data if t.showlegend is not False]
    legend_px = LEGEND_ROW_PX * min(legend_rows(shown, key), LEGEND_MAX_ROWS) + 8
    top = fig.layout.margin.t
    return fig.update_layout(
        hovermode="x unified",
        # the legend under the chart, shown even for one line: a legend beside it narrowed some charts of a page
        # and not others, so one step sat at different x positions in charts stacked on one x range
        showlegend=True,
        legend=dict(
            orientation="h",
            x=0,
            xanchor="left",
            y=-BELOW_AXIS_PX / PLOT_PX,  # clear of the x axis's title, whatever the legend holds
            yanchor="top",
            font=dict(size=11),
            title_text=key,
            maxheight=legend_px,
        ),
        height=top + PLOT_PX + BELOW_AXIS_PX + legend_px,
        margin=dict(l=PLOT_LEFT, r=10, b=BELOW_AXIS_PX + legend_px, autoexpand=False),
    )


def legend_rows(names, title: str | None = None, width_px: int = LEGEND_WIDTH_PX) -> int:
    """Rows a horizontal legend of these entries takes in ``width_px`` (Plotly's item: a 40 px line sample
    and about 6.3 px a character at size 11), its title taking the first row's start."""
    rows, used = 1, 6.3 * len(title) + 10 if title else 0.0
    for name in names:
        width = 40 + 6.3 * len(str(name))
        if used and used + width > width_px:
            rows, used = rows + 1, 0.0
        used += width
    return rows


def grouped_frame(fig: go.Figure, name: str, x: str) -> pd.DataFrame:
    """What a grouped chart draws, as data: per group and x, the mean, the band's lower and upper edge (NaN
    without a band) and the runs behind the point; the rows a CSV download of the grouped view holds."""
    bands = {t.legendgroup: t for t in fig.data if t.fill == "toself"}
    parts = []
    for t in fig.data:
        if not isinstance(t.meta, dict) or "runs" not in t.meta:
            continue
        xs, mean = np.asarray(t.x, dtype=np.float64), np.asarray(t.y, dtype=np.float64)
        lower = upper = np.full(len(xs), np.nan)
        band = bands.get(t.legendgroup)
        if band is not None:
            edge = np.asarray(band.y, dtype=np.float64)
            upper, lower = edge[: len(xs)], edge[len(xs) :][::-1]
        parts.append(pd.DataFrame({"scalar": name, "group": t.meta["group"], x: xs, "mean": mean, "lower": lower,
                                   "upper": upper, "runs": t.meta["runs"]}))  # fmt: skip
    columns = ["scalar", "group", x, "mean", "lower", "upper", "runs"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def _text(value) -> str:
    """Run names and manifest values as Plotly text, never markup (Plotly reads <a>, <b>, <br> in names)."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inside(x_range):
    if x_range is None:
        return lambda xs: np.ones(len(xs), dtype=bool)
    lo, hi = x_range
    return lambda xs: (xs >= lo) & (xs <= hi)


def _alpha(color: str, a: float) -> str:
    """``#rrggbb`` or ``rgb(r,g,b)`` as ``rgba(r,g,b,a)``."""
    if color.startswith("#") and len(color) == 7:
        r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    else:
        r, g, b = (int(float(v)) for v in color[color.index("(") + 1 : color.index(")")].split(",")[:3])
    return f"rgba({r},{g},{b},{a})"


def _flag(value) -> bool:
    return str(value).strip().lower() not in ("0", "false", "no", "off")


def runs_chart(runs, scalar: str = "val_loss", x: str = "step", group: str | None = None, band: str = "minmax",
               smoothing: float = 0.6, robust=True, log_y=False, color_by: str = "run") -> go.Figure:  # fmt: skip
    """One chart of the Training page as a figure of its own (``aah-viz figure --kind curves``): the
    scalar of the runs against ``x``, grouped by a manifest field with a band, smoothed, robust y."""
    runs = list(runs)
    if not runs:
        raise AAHVizError("no run given: pass at least one run directory")
    if x not in X_AXES:
        raise AAHVizError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    if band not in curves.BANDS:
        raise AAHVizError(f"band must be one of {', '.join(curves.BANDS)}, got {band!r}")
    if not 0.0 <= float(smoothing) <= 0.99:
        raise AAHVizError(f"smoothing must be between 0 and 0.99, got {smoothing}")
    if color_by not in style.COLOUR_BY:
        raise AAHVizError(f"color_by must be one of {', '.join(style.COLOUR_BY)}, got {color_by!r}")
    keys = [str(r.run_id) for r in runs]
    if len(set(keys)) < len(keys):  # the same run name in two folders: their paths tell them apart
        keys = [str(r.path) for r in runs]
    names = sorted({n for r in runs for n in scalar_names(r)}, key=scalar_order)
    if scalar not in names:
        raise AAHVizError(f"no run here logged the scalar {scalar!r}; logged: {', '.join(names) or 'none'}")
    groups = None
    if group not in (None, "", "none"):
        manifests = {k: r.manifest for k, r in zip(keys, runs)}
        fields = {f for m in manifests.values() for f in manifest_fields.flat_fields(m)}
        if group not in fields:
            raise AAHVizError(f"no run has the manifest field {group!r} to group by; e.g. regime, seed, preset")
        groups = setup_groups(manifests, group)
    return curves_figure(
        curve_data(runs, [scalar], keys=keys),
        scalar,
        x=x,
        smoothing=float(smoothing),
        groups=groups,
        group_by=group if groups is not None else None,
        band=band,
        robust=_flag(robust),
        log_y=_flag(log_y),
        color_by=color_by,
        labels=group_labels(manifests, groups, group) if groups is not None else None,
    )
