"""Compare: runs grouped by setup (their regime and every setting telling them apart; mean ± spread over
seeds) beside the reference's published results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from aah_viz.analysis.compare import mean_pm
from aah_viz.analysis.curves import FEW_RUNS
from aah_viz.dashboard import address, cache, configuration, page_head, pickers, selection, session
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, say_left_out, show_table
from aah_viz.dashboard.configuration import one_configuration
from aah_viz.errors import AAHVizError
from aah_viz.export.stats import group_summaries
from aah_viz.figures import compare as cfig
from aah_viz.figures import windows as wfig

METRICS = ["final_loss", "final_val_loss", "final_acr", "final_causal_coverage"]
METRIC_NAMES = {
    "final_loss": "final loss (nats)",
    "final_val_loss": "final val loss (nats)",
    "final_acr": "final ACR",
    "final_causal_coverage": "final causal-pair coverage",
}


def per_run_frame(root: str, keys: list[str], token_of=lambda key: 0, views: dict | None = None) -> pd.DataFrame:
    """One row per run from its overview (its summary): ``views`` when the caller has them (the session's
    overviews), else read with ``token_of(key)``, the run's cache token."""
    rows = []
    for k in keys:
        o = (views or {}).get(k) or cache.overview(root, k, token_of(k))
        if "error" in o:
            continue
        row = {"key": k, "regime": o.get("regime"), "seed": o.get("seed"), "status": o.get("status")}
        row.update({m: o.get(m) for m in METRICS})
        kept = o.get("buckets")  # from the run's summary; None: the branch table is read (older runs)
        buckets = dict(kept) if kept is not None else cache.run_buckets(root, k, token_of(k))
        row["windows"] = ", ".join(str(w) for w in sorted(buckets))
        row.update({f"frac_{w}": v for w, v in buckets.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _bucket_rows(frame: pd.DataFrame, prefix: str = "") -> dict[str, pd.DataFrame]:
    """Window set -> setup x window mean shares (runs with other candidate windows never share a grid)."""
    out: dict[str, pd.DataFrame] = {}
    if frame.empty or "windows" not in frame:
        return out
    for wset, part in frame.groupby("windows", sort=True):
        if not wset:
            continue
        cols = [f"frac_{w.strip()}" for w in wset.split(",")]
        g = part.groupby(SETUP if SETUP in part else "regime")[cols].mean()  # the reference's: by regime
        g.columns = [int(c[5:]) for c in cols]
        g.index = [f"{prefix}{r}" for r in g.index]
        out[wset] = g
    return out


def few_runs_note(ours: pd.DataFrame) -> None:
    """Setups with fewer than 3 runs: their standard deviation is a guess (from 2 runs) or absent."""
    sizes = ours.groupby(SETUP).size() if not ours.empty else pd.Series(dtype=int)
    few = sizes[sizes < FEW_RUNS]
    if len(few):
        named = "; ".join(f"{setup} (n = {n})" for setup, n in few.items())  # a setup's name holds commas
        st.caption(
            plain(f"Fewer than {FEW_RUNS} runs in {named}: a spread from 2 runs says little, from 1 it is none.")
        )


SETUP = "setup"  # the column naming a run's setup


# What the page draws of the runs shown, kept per their rows (hashed: a few ms for a thousand runs): a redraw of
# hundreds of runs otherwise builds and checks the same Plotly traces and bootstraps the same means again. The
# figures are cached resources, handed out as they are: ``common.chart`` only reads them.
@st.cache_data(show_spinner=False, max_entries=8)
def by_setup(ours: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    return group_summaries(ours, list(columns), by=SETUP).rename(columns={SETUP: "regime"})


@st.cache_resource(show_spinner=False, max_entries=8)
def setups_figure(ours: pd.DataFrame, metrics: tuple[str, ...]):
    shown = ours.assign(regime=ours[SETUP]) if not ours.empty else ours
    return cfig.regime_metric_figure(shown, list(metrics), None, "setups: our runs (mean ± sd over seeds)")


@st.cache_resource(show_spinner=False, max_entries=8)
def reference_figure(reference: pd.DataFrame, metrics: tuple[str, ...]):
    title = "the reference's published values (their model and context: own axes)"
    return cfig.reference_metric_figure(reference, list(metrics), title)


@st.cache_resource(show_spinner=False, max_entries=16)
def buckets_figure(grid: pd.DataFrame, wset: str):
    # short enough for one line: a wrapped title left "tokens" alone under the windows
    title = f"final windows by setup; candidates {wset} tokens"
    return wfig.bucket_heatmap_figure(grid.fillna(0.0), title, row_title="setup")


FINAL = ("finished", "imported")  # statuses whose last values are final


def unfinished_left_out(ours: pd.DataFrame) -> pd.DataFrame:
    """Runs still training, stopped or failed have last values, not final ones: left out of the means
    unless the user includes them, and named either way."""
    if ours.empty or "status" not in ours:
        return ours
    unfinished = ours[~ours["status"].isin(FINAL)]
    if unfinished.empty:
        return ours
    named = ", ".join(f"{k} ({s})" for k, s in zip(unfinished["key"], unfinished["status"]))
    if len(unfinished) == len(ours):  # nothing finished to compare: show what there is, and say so
        st.caption(plain(f"No run here has finished; these are last values, not final ones: {named}."))
        return ours
    if st.checkbox(
        "Include unfinished runs",
        key="cmp_unfinished",
        help="Runs still training, stopped or failed: their values are the last recorded, not final ones.",
    ):
        st.caption(plain(f"Unfinished, their last values averaged in: {named}."))
        return ours
    st.caption(plain(f"Left out of the means (unfinished; tick above to include them): {named}."))
    return ours[ours["status"].isin(FINAL)]


def repeated_seeds_note(ours: pd.DataFrame) -> None:
    """Runs of one setup (the same regime and settings) with the same seed are repeats, not independent
    seeds: say so. Runs set up differently are never repeats: they are rows of their own."""
    if ours.empty or "seed" not in ours:
        return
    counts = ours.groupby([SETUP, "seed"]).size()
    repeats = counts[counts > 1]
    if len(repeats):
        named = "; ".join(f"{setup}: seed {seed} x{n}" for (setup, seed), n in repeats.items())
        st.warning(plain(f"Runs sharing a seed are repeats, not independent seeds, in their mean and spread: {named}."))


@guarded
def render() -> None:
    st.title("Compare")
    st.caption("Regimes against each other and against the published results.")
    st.page_link(
        str(Path(__file__).with_name("probes.py")),
        label="Head groups against syntactic and coreference probes (aah-viz compare): the Probes page",
        icon=":material/arrow_forward:",
    )
    root = session.logs_root()
    keys, probe_only = session.trained_keys(selection.selected_keys())
    say_left_out(probe_only, "probes or evaluations, not trained here; probes are on the Probes page")
    views = session.overviews()
    evaluations = [k for k in keys if views.get(k, {}).get("regime") == "frontier"]
    keys = [k for k in keys if k not in evaluations]
    say_left_out(evaluations, "frontier evaluations of a pretrained model: on the Frontier page")
    if not keys:
        if not selection.selected_keys():  # no run at all under the root: nothing to pick on the Runs page
            pickers.say_no_runs()
        else:
            st.info("No readable trained runs among the selected runs: pick runs on the Runs page.")
        return
    keys = one_configuration(keys, "cmp_config")
    page_head.show_selection_warnings(keys)
    ours = unfinished_left_out(per_run_frame(root, keys, session.token, views))
    if not ours.empty:  # a row per setup: runs of one regime set up differently are never averaged
        ours.insert(1, SETUP, ours["key"].map(configuration.setups(list(ours["key"]))))
    repeated_seeds_note(ours)
    metrics = [m for m in METRICS if m in ours and ours[m].notna().any()]
    st.subheader("Our runs by setup")
    st.caption(
        "One row per setup: a regime, with every setting that tells its runs from the other runs of that "
        "regime (as setting=value). Mean (a dash) ± sample standard deviation over seeds, each seed a point; "
        "n = number of runs. Spreads "
        "are clipped to the values each figure can take (a share in [0, 1], a loss at least 0)."
    )
    few_runs_note(ours)
    frac_cols = sorted((c for c in ours.columns if c.startswith("frac_")), key=lambda c: int(c[5:]))
    summary = by_setup(ours, tuple(metrics + frac_cols))
    shown = mean_pm(summary, metrics + frac_cols).rename(
        columns={"regime": SETUP, **METRIC_NAMES, **{c: f"share at {c[5:]} tokens" for c in frac_cols}}
    )
    with st.container(key="cmp_summary_box"):  # a handle for the browser tests
        show_table(shown, hide_index=True, width="stretch", key="cmp_summary")
    data_downloads(ours, "runs-by-regime", key="cmp_data")

    reference = None
    ref_keys: list[str] = []
    ref_root = None
    ref_dir = session.reference_dir()
    if ref_dir:
        try:
            ref_root, ref_keys = cache.reference_runs(ref_dir, cache.reference_stamp(ref_dir))
        except AAHVizError as err:
            st.error(plain(f"The reference results in {ref_dir} could not be imported: {err}"))
    paper_keys = [k for k in ref_keys if k.startswith("paper-")]
    qwen_keys = [k for k in ref_keys if k.startswith("qwen")]
    if paper_keys:
        reference = per_run_frame(ref_root, paper_keys)
    chart(setups_figure(ours, tuple(metrics)), key="cmp_metrics", name="regimes-ours", data=ours)
    names = sorted(ours[SETUP].dropna().astype(str).unique()) if not ours.empty else []
    marks = cfig.setup_ticks(names)
    if marks != names:
        shortened = "; ".join(f"{m} = {n}" for m, n in zip(marks, names) if m != n)
        st.caption(plain(f"On the axis: {shortened}."))
    if reference is not None and not reference.empty:
        chart(
            reference_figure(reference, tuple(metrics)), key="cmp_reference", name="regimes-published", data=reference
        )
    buckets = _bucket_rows(ours)
    for wset, ref_b in (_bucket_rows(reference, "reference: ") if reference is not None else {}).items():
        buckets[wset] = pd.concat([buckets[wset], ref_b]) if wset in buckets else ref_b
    for i, (wset, grid) in enumerate(sorted(buckets.items())):
        chart(buckets_figure(grid, wset), key=f"cmp_buckets_{i}", name=f"window-distribution-{wset.replace(', ', '-')}")

    st.subheader("The reference's published results")
    if not ref_dir:
        st.info(
            "No reference folder configured: start the dashboard with `--reference DIR` (the "
            "format of the reference's `paper/` folder)."
        )
        return
    st.caption(
        f"Imported from `{ref_dir}` (the paper's Tables 1 and 2, window-bucket fractions, Qwen3-4B per-head heatmaps)."
    )
    for name, title in (
        ("aah_v3_4096_table1_training.csv", "Table 1 (training)"),
        ("aah_v3_4096_table2_inference.csv", "Table 2 (inference)"),
    ):
        try:
            df = pd.read_csv(f"{ref_dir}/{name}")
        except (OSError, ValueError):
            continue
        with st.expander(title, expanded=name.endswith("training.csv")):
            show_table(df, hide_index=True, width="stretch")
    if qwen_keys:
        labels = {k: k.replace("qwen3-4b-", "").replace("-", "_") for k in qwen_keys}
        q = address.choose(
            st.selectbox,
            "qwen",
            "cmp_qwen",
            qwen_keys,
            label="Qwen3-4B per-head heatmap (regime)",
            format_func=labels.__getitem__,
        )
        m = cache.manifest(ref_root, q, 0)
        d = cache.heatmap(ref_root, q, 0, None)
        chart(
            wfig.window_heatmap_figure(
                d["matrix"], m["windows"], f"Qwen3-4B {labels[q]}: window per head (published)", clickable=False
            ),
            key="cmp_qwen_fig",
            name=f"qwen3-4b-{labels[q]}",
        )
        finite = d["matrix"][np.isfinite(d["matrix"])]
        if finite.size:
            st.caption(f"Mean window {finite.mean():.0f} tokens over {finite.size} heads.")


if __name__ == "__main__":
    render()
