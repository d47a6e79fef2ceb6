"""Plotly figure builders and the registry ``FIGURE_KINDS`` (name -> builder).

Every registered builder is ``builder(runs: list[Run], **opts) -> go.Figure``: it reads what it
needs from the runs (single-run figures use ``runs[0]``), reduces it, and plots. The dashboard
uses the same pieces with caching in between; ``aah-viz figure --kind NAME`` uses the registry.
Options per kind are listed in ``FIGURE_OPTIONS``. Each builder imports its modules when it is
called, so the registry alone (``aah-viz figure --list``) imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go

from aah_viz.errors import AAHVizError

FIGURE_OPTIONS: dict[str, dict[str, str]] = {
    "hierarchy": {
        "layer": "layer to draw (default 0)",
        "step": "training step; the nearest routing update is used (default: last)",
        "head": "head to highlight (default none)",
    },
    "training_curves": {
        "smoothing": "debiased EMA weight 0-0.99 (default 0)",
        "log_step": "log-scale step axis (default false)",
        "robust": "the first losses do not set the loss and perplexity axes (default true), as on the Training page",
    },
    "curves": {
        "scalar": "the scalar drawn, as the Training page names it (default val_loss)",
        "x": "x axis: step, tokens or wall_s (default step)",
        "group": "manifest field whose runs become one mean line with a band, e.g. regime (default: none)",
        "band": "minmax, std, stderr, ci95 or none (default minmax)",
        "smoothing": "debiased EMA weight 0-0.99 (default 0.6)",
        "robust": "the first losses do not set the y axis (default true)",
        "log_y": "log-scale y axis (default false)",
        "color_by": "run (each run its own colour) or regime (colour by regime, dash by seed; default run)",
    },
    "window_heatmap": {"step": "training step (default: last recorded)"},
    "head_timeline": {"layer": "layer (default 0)", "max_columns": "most sampled steps (default 400)"},
    "branch_bars": {"step": "training step (default: last)"},
    "bucket_heatmap": {"step": "training step (default: last); one row per run"},
    "coverage_over_training": {"max_points": "points per line (default 1000); one line per run"},
    "stability": {"max_points": "step bins (default 600)"},
    "switch_rate": {},
    "cluster_validity": {"max_points": "step bins (default 600)"},
    "controller_health": {"max_points": "points per line (default 1000)"},
    "probe_heatmap": {
        "probe": "syntax, coref or sufficiency (default syntax)",
        "metric": "probe metric (default: first logged)",
    },
    "window_vs_probe": {
        "probe": "syntax, coref or sufficiency (default syntax)",
        "metric": "probe metric (default: first logged)",
    },
    "regime_summary": {"metrics": "comma-separated per-run metrics (default final_loss,final_acr)"},
    "frontier": {},
    "head_spans": {},
    "tokens": {
        "doc": "document number of the run's lens (default 0)",
        "layer": "layer (default 0)",
        "head": "head (default 0)",
        "query": "query token position (default: the document's last token)",
    },
}


def _first(runs):
    runs = list(runs)
    if not runs:
        raise AAHVizError("no run given: pass at least one run directory")
    return runs[0]


def _title(run, what: str) -> str:
    from aah_viz.figures.data import run_label

    return f"{what}: {run_label(run)}"


def build_hierarchy(runs, layer: int = 0, step: int | None = None, head: int | None = None, **_) -> go.Figure:
    from aah_viz.figures import data, hierarchy, style

    run = _first(runs)
    d = data.hierarchy_data(run, int(layer), step)
    if d["step"] is None:
        return style.empty_figure(
            f"layer {layer} has no hierarchy rows (grouping off or not yet updated)", _title(run, "hierarchy")
        )
    g, dropped = hierarchy.tree_for(d, run.n_head, run.windows)
    return hierarchy.hierarchy_figure(
        g,
        run.windows,
        _title(run, f"hierarchy of layer {layer} at step {d['step']}"),
        layer=int(layer),
        selected_head=None if head is None else int(head),
        override=hierarchy.window_override(run.manifest),
        collapsed=dropped,
    )


def build_window_heatmap(runs, step: int | None = None, **_) -> go.Figure:
    from aah_viz.figures import data, style, windows

    run = _first(runs)
    d = data.window_heatmap_data(run, step)
    if d["step"] is None:
        return style.empty_figure("no head rows recorded yet", _title(run, "windows"))
    return windows.window_heatmap_figure(d["matrix"], run.windows, _title(run, f"executed windows at step {d['step']}"))


def build_head_timeline(runs, layer: int = 0, max_columns: int = 400, **_) -> go.Figure:
    from aah_viz.figures import data, windows

    run = _first(runs)
    d = data.timeline_data(run, int(layer), int(max_columns))
    return windows.head_timeline_figure(
        d["steps"],
        d["matrix"],
        run.windows,
        _title(run, f"windows of layer {layer} over training"),
        warmup=data.warmup_steps(run.manifest),  # as the Windows page: warm-up grey
    )


def build_branch_bars(runs, step: int | None = None, **_) -> go.Figure:
    from aah_viz.figures import data, windows

    run = _first(runs)
    d = data.branch_data(run, step)
    return windows.branch_bars_figure(
        d["per_layer"], run.windows, _title(run, f"branch frequencies at step {d['step']}")
    )


def build_bucket_heatmap(runs, step: int | None = None, **_) -> go.Figure:
    from aah_viz.figures import data, windows

    table = data.bucket_table(list(runs), step)
    return windows.bucket_heatmap_figure(table, "selected-window distribution per run (final step)")


def build_coverage(runs, max_points: int = 1000, **_) -> go.Figure:
    from aah_viz.figures import data, windows

    return windows.coverage_figure(data.coverage_data(list(runs), int(max_points)), "coverage over training")


def build_stability(runs, max_points: int = 600, **_) -> go.Figure:
    from aah_viz.figures import data, stability

    run = _first(runs)
    return stability.stability_figure(
        data.stability_data(run)["updates"], _title(run, "routing stability"), int(max_points)
    )


def build_switch_rate(runs, **_) -> go.Figure:
    from aah_viz.figures import data, stability

    run = _first(runs)
    return stability.switch_rate_figure(
        data.stability_data(run)["heads"], run.n_layer, run.n_head, _title(run, "window switches per update")
    )


def build_controller_health(runs, max_points: int = 1000, **_) -> go.Figure:
    from aah_viz.figures import data, stability

    run = _first(runs)
    d = data.controller_data(run, int(max_points))
    return stability.controller_health_figure(d["series"], d["margins"], _title(run, "controller health"))


def build_cluster_validity(runs, max_points: int = 600, **_) -> go.Figure:
    from aah_viz.figures import data, validity

    run = _first(runs)
    d = data.validity_data(run)
    return validity.validity_figure(
        d["validity"], d["threshold"], _title(run, "are the head groups real?"), int(max_points)
    )


def _probe_metric(run, probe: str, metric: str | None) -> str | None:
    from aah_viz.analysis import queries

    ph = queries.probe_tables(run).get("probe_heads")
    if ph is None or ph.empty:
        return None
    if metric:
        return metric
    metrics = sorted(ph.loc[ph["probe"] == probe, "metric"].dropna().unique())
    return metrics[0] if metrics else None


def _no_probe_results(run, probe: str) -> go.Figure:
    from aah_viz.figures import style

    message = f"no {probe} probe results: run aah-viz probe RUN --syntax FILE.conllu --coref FILE"
    return style.empty_figure(message, _title(run, "probes"))


def build_probe_heatmap(runs, probe: str = "syntax", metric: str | None = None, **_) -> go.Figure:
    from aah_viz.analysis import queries
    from aah_viz.figures import probes

    run = _first(runs)
    metric = _probe_metric(run, probe, metric)
    if metric is None:
        return _no_probe_results(run, probe)
    ph = queries.probe_tables(run)["probe_heads"]
    z = probes.probe_matrix(ph, probe, metric, run.n_layer, run.n_head)
    return probes.probe_heatmap_figure(z, probe, metric, _title(run, f"{probe} {metric}"))


def build_window_vs_probe(runs, probe: str = "syntax", metric: str | None = None, **_) -> go.Figure:
    from aah_viz.figures import data, probes

    run = _first(runs)
    metric = _probe_metric(run, probe, metric)
    if metric is None:
        return _no_probe_results(run, probe)
    return probes.window_vs_probe_figure(
        data.probe_points(run, probe, metric), probe, metric, run.windows, _title(run, f"window vs {probe} {metric}")
    )


def build_training_curves(runs, smoothing: float = 0.0, log_step: bool = False, robust=True, **_) -> go.Figure:
    from aah_viz.figures import data, training

    return training.training_curves_figure(
        data.training_data(list(runs)),
        smoothing=float(smoothing),
        log_step=str(log_step).lower() in ("1", "true"),
        robust=str(robust).lower() not in ("0", "false", "no"),
    )


def build_curves(runs, scalar: str = "val_loss", x: str = "step", group: str | None = None, band: str = "minmax",
                 smoothing: float = 0.6, robust=True, log_y=False, color_by="run", **_) -> go.Figure:  # fmt: skip
    from aah_viz.figures import curves

    return curves.runs_chart(runs, str(scalar), str(x), group if group is None else str(group), str(band),
                             float(smoothing), robust, log_y, str(color_by))  # fmt: skip


def build_regime_summary(runs, metrics: str | list[str] = "final_loss,final_acr", **_) -> go.Figure:
    import pandas as pd

    from aah_viz.analysis import queries
    from aah_viz.figures import compare

    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    from aah_viz.analysis.configurations import setup_groups

    runs = list(runs)
    per_run = pd.DataFrame([queries.run_overview(r) for r in runs])
    if not per_run.empty:  # one bar per setup, as Compare's rows: never seeds of other settings or lengths
        names = setup_groups({i: r.manifest for i, r in enumerate(runs)})
        per_run["regime"] = [names[i] for i in range(len(runs))]
    return compare.regime_metric_figure(per_run, list(metrics), title="setups: mean ± sd over seeds")


def build_frontier(runs, **_) -> go.Figure:
    from aah_viz.analysis.frontier import run_frontier_table
    from aah_viz.figures import frontier

    run = _first(runs)
    table = run_frontier_table(run)
    if table.empty:
        raise AAHVizError(f"{run.path} holds no frontier (aah-viz frontier writes one)")
    model = Path(str(run.manifest.get("base_model") or "")).name  # the model evaluated, not the run's seed
    what = f"perplexity against ACR: {model}, T = {run.manifest.get('seq_len')}" if model else "perplexity against ACR"
    return frontier.frontier_figure(table, title=what if model else _title(run, what))


def build_head_spans(runs, **_) -> go.Figure:
    from aah_viz.figures import windows
    from aah_viz.figures.data import head_spans_data

    run = _first(runs)
    spans = head_spans_data(run)
    if spans.empty:
        raise AAHVizError(f"{run.path} holds no head_spans table (aah-viz profile RUN --data TEXT --out RUN adds it)")
    return windows.span_heatmaps_figure(spans, run.windows, _title(run, "95% span against executed window"))


def build_tokens(runs, doc: int = 0, layer: int = 0, head: int = 0, query: int | None = None, **_) -> go.Figure:
    from aah_viz.analysis import lens
    from aah_viz.figures.lens import tokens_figure

    run = _first(runs)
    tables = lens.lens_tables(run)
    if not tables:
        raise AAHVizError(f"{run.path} holds no lens (aah-viz lens RUN --text FILE records one)")
    tokens = lens.doc_tokens(tables, int(doc))
    if tokens.empty:
        raise AAHVizError(
            f"the lens of {run.path} has no document {doc}; it has "
            + ", ".join(lens.doc_names(tables["lens_tokens"]).values())
        )
    q = len(tokens) - 1 if query is None else int(query)
    row = lens.query_row(tables["attention_samples"], int(doc), int(layer), int(head), q)
    if row is None:
        raise AAHVizError(
            f"no lens row for layer {layer}, head {head}, query {q} of document {doc} "
            f"(positions 0..{len(tokens) - 1}, {run.n_layer} layers, {run.n_head} heads)"
        )
    what = f"L{layer}H{head} from token {q} of {tokens['doc_id'].iloc[0]}: window {row['window']}"
    kept = int((run.manifest.get("config") or {}).get("sink_tokens") or 0)
    return tokens_figure(tokens, row, lens.doc_links(tables, int(doc)), _title(run, what), kept=kept)


FIGURE_KINDS: dict[str, Callable[..., go.Figure]] = {
    "training_curves": build_training_curves,
    "curves": build_curves,
    "hierarchy": build_hierarchy,
    "window_heatmap": build_window_heatmap,
    "head_timeline": build_head_timeline,
    "branch_bars": build_branch_bars,
    "bucket_heatmap": build_bucket_heatmap,
    "coverage_over_training": build_coverage,
    "stability": build_stability,
    "switch_rate": build_switch_rate,
    "controller_health": build_controller_health,
    "cluster_validity": build_cluster_validity,
    "probe_heatmap": build_probe_heatmap,
    "window_vs_probe": build_window_vs_probe,
    "regime_summary": build_regime_summary,
    "frontier": build_frontier,
    "head_spans": build_head_spans,
    "tokens": build_tokens,
}


def build_figure(kind: str, runs, **opts) -> go.Figure:
    """Look up ``kind`` in the registry and build it; an unknown kind names the known ones."""
    try:
        builder = FIGURE_KINDS[kind]
    except KeyError:
        raise AAHVizError(f"unknown figure kind {kind!r}; choose one of {', '.join(sorted(FIGURE_KINDS))}") from None
    return builder(list(runs), **opts)
