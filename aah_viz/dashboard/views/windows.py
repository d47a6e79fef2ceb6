"""Windows: layer x head heatmap at a routing update, branch bars, the head x step timeline,
coverage over training, the cost table and chosen runs side by side."""

from __future__ import annotations

import streamlit as st

from aah_viz.analysis.frontier import event_details
from aah_viz.dashboard import address, cache, configuration, page_head, pickers, selection, session
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, say_left_out, show_table
from aah_viz.dashboard.glossary import help_text
from aah_viz.dashboard.lens_view import link_to_lens
from aah_viz.figures import windows as wfig
from aah_viz.figures.data import warmup_steps

MAX_SIDE_BY_SIDE = 6
# the cost table's columns, shortened so the whole table fits (the long names are the tooltips), each with
# one number format for every row (not 1 beside 0.458)
COST_COLUMNS = {
    "ACR": ("ACR", "acr", "%.3f"),
    "causal-pair coverage": ("coverage", "causal_coverage", "%.3f"),
    "realised work": ("realised work", "realised_work", "%.3f"),
    "FLOPs ratio (analytic estimate)": ("FLOPs ratio (est.)", "flops_ratio", "%.3f"),
    "step time, median (s, measured)": ("step time (s)", "step_time", "%.3f"),
    "tokens/s, median (measured)": ("tokens/s", "tokens_per_s", "%.0f"),
}


def _at_a_step(key: str, root: str, token: int, m: dict) -> None:
    windows = m["windows"]
    steps = cache.update_steps(root, key, token)
    snapped = "routing update"
    if len(steps) == 0:  # no routing (full attention): every recorded step
        steps, snapped = cache.recorded_steps(root, key, token), "training step"
    if len(steps) == 0:
        st.info("No head rows recorded yet: the run has not logged a training step; it appears here once it has.")
        return
    c1, c2, c3 = st.columns([4, 1, 1])
    step = pickers.pick_step(steps, f"Step ({snapped}s)", where=c1, help=help_text("routing_update"))
    layer = pickers.pick_layer(m["n_layer"], where=c2)
    head = pickers.pick_head(m["n_head"], where=c3)
    hm = cache.heatmap(root, key, token, step)
    left, right = st.columns(2)
    with left:
        chart(
            wfig.window_heatmap_figure(
                hm["matrix"], windows, f"executed windows at step {hm['step']}", selected=(layer, head)
            ),
            key="win_heatmap",
            name=f"windows-step{hm['step']}",
            on_select=selection.head_clicked,
        )
        st.caption("Click a head to select it on every page (the Hierarchy page highlights it).")
        link_to_lens(cache.open_run(root, key), layer, head)
    with right:
        br = cache.branch(root, key, token, step)
        chart(
            wfig.branch_bars_figure(br["per_layer"], windows, f"branch frequencies at step {br['step']}"),
            key="win_branch",
            name=f"branch-frequencies-step{br['step']}",
        )
        st.caption("Share of each layer's heads at each window.", help=help_text("branch_frequency"))

    st.subheader("Head × step timeline")
    tl = cache.timeline(root, key, token, layer)
    chart(
        wfig.head_timeline_figure(
            tl["steps"],
            tl["matrix"],
            windows,
            f"layer {layer}: window per head over training",
            selected_head=head,
            current_step=step,
            warmup=warmup_steps(m),
        ),
        key="win_timeline",
        name=f"timeline-L{layer}",
    )
    st.caption(
        f"{len(tl['steps'])} of {tl['recorded']} recorded steps shown (routing updates, where windows can change); "
        "the dotted line is the selected update, the outlined row the selected head, grey the warm-up."
    )


def _across_runs(root: str, key: str, m: dict) -> None:
    st.subheader("Coverage over training and runs side by side")
    selected, probe_only = session.trained_keys(selection.selected_keys())
    say_left_out(probe_only, "probes or evaluations, not trained here: no windows over training")
    if key not in selected:
        st.info("This run is probe-only: pick a trained run to compare coverage and windows across runs.")
        return
    # by default only runs of this run's configuration (model, T, windows, steps): the ticked ones, else this
    # run's other seeds (same regime), never another regime that happens to sort first (only a run without
    # seeds of its own shows the first of its configuration); other runs are there to pick, said when picked
    views = session.overviews()
    alike = configuration.same_configuration(key, selected)
    same = [k for k in alike if k != key and views.get(k, {}).get("regime") == views.get(key, {}).get("regime")]
    if selection.ticked():
        others = [k for k in alike if k != key][: MAX_SIDE_BY_SIDE - 1]  # as many as the heatmaps set side by side
    else:
        others = (same or [k for k in alike if k != key])[:3]
    default = [key] + others
    labels = {k: session.label(k) for k in selected}  # computed now: format_func may be called outside the run
    chosen = address.choose_some(
        st.multiselect,
        "compare",
        "win_compare_pick",
        selected,
        default,
        label="Runs to compare",
        format_func=labels.__getitem__,
        help="Pick the runs for the coverage figure, the cost table and the side-by-side heatmaps "
        "(each run its own colour).",
    )
    keys = tuple(chosen)
    if not keys:
        st.info("Pick at least one run to compare.")
        return
    found = configuration.groups(keys)
    if len(found) > 1:
        st.warning(
            plain(
                f"These runs are of {len(found)} configurations, drawn on the same axes but not comparable as "
                "seeds: " + "; ".join(f"{label}: {', '.join(members)}" for label, members in found) + "."
            )
        )
    tok = session.tokens(keys)
    coverage, cost = cache.coverage_cost(root, keys, tok)
    chart(cache.coverage_figure(root, keys, tok, warmup_steps(m)), key="win_coverage", name="coverage-over-training")
    data_downloads(coverage, "coverage-over-training", key="win_data")
    st.caption(
        "Realised work is what the attention backend computed, not what the windows allow: the dense-masked "
        "backend computes every T² score and masks it, so it stays at about 2 (T² / causal pairs) for every "
        "regime; banded and flex backends compute the windows only and follow causal-pair coverage. The "
        "backend is in brackets after each run. Grey: warm-up of the selected run (full windows).",
        help=help_text("realised_work"),
    )
    sampled = coverage.attrs.get("sampled") or {}
    if sampled:  # long runs: read from stretches spread over them (figures.data.coverage_and_cost)
        read = "; ".join(
            f"{plain(label)}: {seen} of {total} scalars segments" for label, (seen, total) in sampled.items()
        )
        st.caption(
            f"Long runs, drawn from stretches of steps spread over them (the first and last included): {read}. "
            "Their medians below are over those stretches; their last values are read from the end."
        )
    if not cost.empty:
        show_table(
            cost.rename(columns={c: short for c, (short, _, _) in COST_COLUMNS.items()}),
            hide_index=True,
            width="stretch",
            height=38 + 35 * len(cost),
            column_config={
                short: st.column_config.NumberColumn(short, help=f"{c}. {help_text(term)}", format=fmt)
                for c, (short, term, fmt) in COST_COLUMNS.items()
                if c in cost
            }
            | {"run": st.column_config.TextColumn("run", width="large")},
        )
        st.caption(
            "The FLOPs ratio is an analytic estimate from ACR (method §11.1), not a measurement; step time and "
            "throughput are measured on the machine that trained the run."
        )
    same = tuple(k for k in keys if cache.manifest(root, k, session.token(k)).get("windows") == m.get("windows"))
    say_left_out(
        [k for k in keys if k not in same], "other candidate windows than this run's: they never share one grid"
    )
    table = cache.bucket_table(root, same, session.tokens(same))
    if not table.empty:
        of = f"{len(table)} of the {len(keys)} chosen runs" if len(table) < len(keys) else f"the {len(table)} runs"
        chart(
            wfig.bucket_heatmap_figure(table, f"final selected-window distribution of {of}"),
            key="win_buckets",
            name="final-window-distribution",
        )
    side = list(keys[:MAX_SIDE_BY_SIDE])
    if len(side) > 1:
        shown = f"the first {len(side)} of the {len(keys)}" if len(side) < len(keys) else f"each of the {len(side)}"
        st.caption(f"The final layer × head windows of {shown} chosen runs, side by side:")
        per_row = 3
        for start in range(0, len(side), per_row):
            cols = st.columns(per_row)
            for j, k in enumerate(side[start : start + per_row]):
                mk = cache.manifest(root, k, session.token(k))
                d = cache.heatmap(root, k, session.token(k), None)
                with cols[j]:
                    chart(
                        wfig.window_heatmap_figure(d["matrix"], mk["windows"], k, clickable=False, compact=True),
                        key=f"win_side_{start + j}",
                        name=f"final-windows-{k}",
                    )
                    st.caption(plain(session.label(k)))


def _needed(key: str, root: str, token: int, m: dict) -> None:
    spans = cache.head_spans(root, key, token)
    if spans.empty:
        return  # never profiled: aah-viz profile RUN --data FILE --out RUN adds the table
    st.subheader("What each head needs against what it executes")
    chart(
        wfig.needed_vs_executed_figure(spans, m["windows"], "needed (95% of the attention mass) vs executed window"),
        key="win_needed",
        name="needed-vs-executed",
        data=spans,
    )
    cut = int((spans["executed_window"] < spans["needed_95"]).sum())
    profiled = event_details(cache.open_run(root, key).events("profile"))
    seq = (profiled[-1] if profiled else {}).get("seq_len")
    # a profile at a longer T than the run's windows reach finds spans no candidate window can give
    longer = f", longer than the largest window here ({max(m['windows'])})" if seq and seq > max(m["windows"]) else ""
    st.caption(
        f"From aah-viz profile (full-attention mass by distance, per head"
        f"{f', on sequences of {seq} tokens' + longer if seq else ''}). {cut} of {len(spans)} heads lie below "
        "the diagonal: routing executes a window shorter than the one that keeps 95% of what the head attends to."
    )
    chart(
        wfig.span_heatmaps_figure(spans, m["windows"], "where routing cuts a head short, and by how much mass"),
        key="win_span_grid",
        name="head-spans",
        data=spans,
    )


def _retrieval(key: str, root: str, token: int) -> None:
    found = cache.head_retrieval(root, key, token)
    rows, base = found["rows"], found["baseline"]
    if rows.empty:
        return  # never asked: aah-viz profile ... --retrieval N adds the table
    st.subheader("Which heads the passkey check needs")
    window, sinks = int(rows["window"].iloc[0]), int(rows["sink_tokens"].iloc[0])
    cut = f"{window} tokens" + (f" + the first {sinks}" if sinks else "")
    chart(
        wfig.retrieval_heads_figure(rows, base, f"each head alone cut to {cut}, every other head at full attention"),
        key="win_retrieval",
        name="retrieval-heads",
        data=rows,
    )
    losing = int((rows["lost"] > 0).sum())
    answered = f"{base['baseline_retrieved']} of {base['asked']}" if base else "the"
    st.caption(
        f"From aah-viz profile --retrieval. Uncut, the model answers {answered} passkey questions; "
        f"{losing} of {len(rows)} heads lose at least one when they alone are cut to {cut}."
    )


@guarded
def render() -> None:
    opened = page_head.begin_run_page("Windows")
    if opened is None:
        return
    key, root, token, m = opened
    st.subheader("Layer × head windows at a routing update")
    _at_a_step(key, root, token, m)
    _needed(key, root, token, m)
    _retrieval(key, root, token)
    _across_runs(root, key, m)


if __name__ == "__main__":
    render()
