"""Paper tables from run directories: ``build_table(name, runs, **opts) -> Table``.

A :class:`Table` holds the numbers (``df``), what to print around them (caption, label, notes),
which cells are best, and per cell the uncertainty (sample standard deviation over seeds) with
the bootstrap interval. Rendering (CSV, Markdown, LaTeX) is :mod:`aah_viz.export.formats`.

Runs whose candidate windows or sequence lengths differ are never mixed in one table:
:func:`build_table` raises :class:`MixedConfigError` naming them; :func:`build_tables` with
``allow_mixed=True`` returns one table per configuration instead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from aah_viz.errors import AAHVizError, RunLogError
from aah_viz.export import records, stats
from aah_viz.export.paper_columns import PAPER_INFERENCE, PAPER_TRAINING
from aah_viz.regimes import paper_rank
from aah_viz.runlog import discover_runs, load_run

TABLE_NAMES = ("training", "inference", "windows", "stability", "probes")
PROBE_PARTS = tuple(records.PROBE_PARTS)
LAYOUTS = ("toolkit", "paper")


class MixedConfigError(AAHVizError):
    """Runs with different candidate windows or sequence lengths were asked for in one table."""


@dataclass
class Table:
    """One exportable table.

    ``df``: identity columns then value columns (means when grouped by regime).
    ``best``: booleans of the same shape, True on the best value of a column that has a direction.
    ``uncertainty``: same shape, the standard deviation over seeds (NaN where there is none).
    ``ci_low`` / ``ci_high``: the 95% bootstrap interval of the mean (NaN for n < 2).
    ``exact``: same shape, the original published string of a cell where one exists (imported runs).
    """

    name: str
    df: pd.DataFrame
    caption: str
    label: str
    notes: list[str] = field(default_factory=list)
    best: pd.DataFrame | None = None
    uncertainty: pd.DataFrame | None = None
    ci_low: pd.DataFrame | None = None
    ci_high: pd.DataFrame | None = None
    exact: pd.DataFrame | None = None
    id_columns: list[str] = field(default_factory=list)
    value_columns: list[str] = field(default_factory=list)
    decimals: dict[str, int] = field(default_factory=dict)
    by: str = "run"
    config: dict = field(default_factory=dict)
    empty_message: str = ""

    @property
    def is_empty(self) -> bool:
        return self.df.empty


# ------------------------------------------------------------------------------ runs


def collect_runs(paths: Iterable[str | os.PathLike]) -> list:
    """Open every run named: a run directory itself, or a folder holding run directories."""
    runs, seen = [], set()
    for p in paths:
        p = Path(p)
        if (p / "manifest.json").is_file():
            found = [p]
        elif p.is_dir():
            found = discover_runs(p)
            if not found:
                raise RunLogError(
                    f"{p} holds no run directories (no manifest.json below it); give a run or a folder of runs"
                )
        else:
            raise RunLogError(f"{p} does not exist; give a run directory or a folder of runs")
        for run_dir in found:
            key = Path(run_dir).resolve()
            if key not in seen:
                seen.add(key)
                runs.append(load_run(run_dir))
    if not runs:
        raise RunLogError("no runs given; name at least one run directory or folder of runs")
    return runs


def _open(runs) -> list:
    return [r if hasattr(r, "manifest") else load_run(r) for r in runs]


def config_of(run) -> tuple[int | None, tuple[int, ...]]:
    """(sequence length, candidate windows). The plain-attention baseline has no candidate windows
    in effect, so it is compatible with any set (its windows are reported as ``()``)."""
    windows = () if run.regime == "full_attention" else tuple(int(w) for w in run.windows)
    return (run.seq_len, windows)


def config_label(cfg: tuple) -> str:
    seq_len, windows = cfg
    return f"T{seq_len}_w" + "-".join(str(w) for w in windows)


def split_by_config(runs) -> dict[tuple, list]:
    """Runs grouped by (sequence length, candidate windows); baselines join every group of their T."""
    runs = _open(runs)
    groups: dict[tuple, list] = {}
    baselines = []
    for run in runs:
        cfg = config_of(run)
        if cfg[1]:
            groups.setdefault(cfg, []).append(run)
        else:
            baselines.append(run)
    for run in baselines:
        homes = [cfg for cfg in groups if cfg[0] == run.seq_len]
        if not homes:
            groups.setdefault((run.seq_len, ()), []).append(run)
        for cfg in homes:
            groups[cfg].append(run)
    return groups


def check_same_config(runs) -> tuple:
    """The shared (T, windows) of the runs, or :class:`MixedConfigError` saying which runs differ."""
    groups = split_by_config(runs)
    if len(groups) <= 1:
        return next(iter(groups), (None, ()))
    lines = []
    for (seq_len, windows), members in groups.items():
        names = ", ".join(sorted({r.run_id for r in members}))
        wtext = "/".join(str(w) for w in windows) if windows else "none (full attention)"
        lines.append(f"seq_len {seq_len}, windows {wtext}: {names}")
    raise MixedConfigError(
        "runs with different candidate windows or sequence lengths cannot share one table ("
        + "; ".join(lines)
        + "); export them separately, or pass --allow-mixed to split the table by configuration"
    )


# ------------------------------------------------------------------------------ columns

# value column -> (default decimals, direction for "best": -1 lower, +1 higher, 0 none)
COLUMN_SPEC: dict[str, tuple[int, int]] = {
    "val_loss": (4, -1),
    "val_ppl": (2, -1),
    "acr": (4, 0),
    "acr_causal": (4, 0),
    "flops_ratio_est": (4, 0),
    "flops_reduction_pct": (2, 0),
    "tokens_per_s": (1, +1),
    "elapsed_s": (2, 0),
    "peak_mem_mb": (1, -1),
    "peak_reserved_mb": (1, -1),
    "peak_mem_gib": (2, -1),
    "peak_reserved_gib": (2, -1),
    "routing_updates": (0, 0),
    "update_steps": (0, 0),
    "partition_agreement_ari": (3, 0),
    "group_switch_rate": (3, 0),
    "window_switch_rate": (3, 0),
    "controller_grad_norm_mean": (4, 0),
    "controller_grad_norm_final": (4, 0),
    "controller_weight_drift_final": (4, 0),
    "value": (3, 0),
    "ari": (3, 0),
    "nmi": (3, 0),
    "v_measure": (3, 0),
    "null_mean": (3, 0),
    "null_p95": (3, 0),
    "n_groups": (0, 0),
    "n_probe_clusters": (0, 0),
    "n_heads": (0, 0),
    "rho": (3, 0),
    "delta": (3, +1),
    "delta_ci_low": (3, 0),
    "delta_ci_high": (3, 0),
    "p_value": (4, 0),
    "ci_low": (3, 0),
    "ci_high": (3, 0),
    "n": (0, 0),
    "count": (0, 0),
    "correct": (0, 0),
    "accuracy": (3, +1),
    "best_acc": (3, +1),
    "baseline_acc": (3, 0),
    "checkpoint_step": (0, 0),
    "n_batches": (0, 0),
}
WINDOW_DECIMALS = 4


def _decimals(col: str) -> int:
    if col.startswith("window_frac_"):
        return WINDOW_DECIMALS
    return COLUMN_SPEC.get(col, (4, 0))[0]


def _direction(col: str) -> int:
    return COLUMN_SPEC.get(col, (4, 0))[1]


# ------------------------------------------------------------------------------ building


def build_table(
    name: str,
    runs,
    *,
    by: str = "run",
    layout: str = "toolkit",
    part: str = "comparisons",
    baseline: str | None = None,
    source: str = "final",
    n_boot: int = stats.DEFAULT_BOOT,
    seed: int = stats.DEFAULT_SEED,
) -> Table:
    """One table over runs that share a configuration (else :class:`MixedConfigError`).

    ``name``: training, inference, windows, stability or probes. ``by``: ``run`` (one row per run)
    or ``regime`` (mean, std, n and 95% bootstrap interval over the runs of each regime).
    ``layout="paper"`` uses the reference CSVs' column names and order (training, inference).
    ``part`` picks the probe table (comparisons, relations, coref, heads). ``baseline`` adds, to a
    training or inference table, notes with the Welch and permutation tests against it. ``source``
    (windows table): ``final`` (per layer at the last recorded step) or ``inference`` (model-wide,
    from each run's inference record: the paper's Figure 4 numbers).
    """
    runs = _open(runs)
    if not runs:
        raise AAHVizError("no runs to tabulate; give at least one run directory")
    cfg = check_same_config(runs)
    return _build(
        name, runs, cfg, by=by, layout=layout, part=part, baseline=baseline, source=source, n_boot=n_boot, seed=seed
    )


def build_tables(name: str, runs, *, allow_mixed: bool = False, **opts) -> list[Table]:
    """Like :func:`build_table`; with ``allow_mixed`` one table per (T, windows) configuration."""
    runs = _open(runs)
    if not allow_mixed:
        return [build_table(name, runs, **opts)]
    groups = split_by_config(runs)
    out = []
    for cfg, members in groups.items():
        table = _build(name, members, cfg, **opts)
        if len(groups) > 1:
            table.label = f"{table.label}:{config_label(cfg).lower()}"
            table.caption = (
                f"{table.caption} Configuration: T = {cfg[0]}, windows {'/'.join(map(str, cfg[1])) or 'none'}."
            )
        out.append(table)
    return out


def _check_opts(name: str, by: str, layout: str, part: str) -> None:
    if name not in TABLE_NAMES:
        raise AAHVizError(f"unknown table {name!r}; choose one of {', '.join(TABLE_NAMES)}")
    if by not in ("run", "regime"):
        raise AAHVizError(f"by must be 'run' or 'regime', got {by!r}")
    if layout not in LAYOUTS:
        raise AAHVizError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "paper" and name not in ("training", "inference"):
        raise AAHVizError(f"the paper layout exists for the training and inference tables only, not {name!r}")
    if name == "probes" and part not in PROBE_PARTS:
        raise AAHVizError(f"unknown probe table {part!r}; choose one of {', '.join(PROBE_PARTS)}")


def unfinished_notes(runs) -> list[str]:
    """One note naming the runs whose values are not final: still training, interrupted or failed."""
    described = []
    for run in runs:
        status = run.status
        if status in ("finished", "imported") or run.manifest.get("imported"):
            continue
        if status == "running":
            status = "still training" if run.being_written() else "interrupted"
        last, steps = run.manifest.get("last_step"), run.manifest.get("steps")
        where = f" at step {last}" + (f" of {steps}" if steps else "") if last is not None else ""
        described.append(f"{run.run_id} ({status}{where})")
    if not described:
        return []
    return [f"Not finished: {', '.join(described)}; their values are the last recorded ones, not final."]


def _sorted_runs(runs) -> list:
    return sorted(runs, key=lambda r: (paper_rank(r.regime), r.seed if r.seed is not None else -1, r.run_id))


def _records_for(name: str, runs, windows, wcols, *, part: str, source: str):
    """Per-run (or per run and layer) records of one table kind, its value columns, caption and the
    extra numeric keys to summarise alongside."""
    if name == "training":
        recs = [records.training_record(r, windows) for r in runs]
        for rec in recs:
            rec["peak_mem_gib"] = rec["peak_mem_mb"] / 1024.0
            rec["peak_reserved_gib"] = rec["peak_reserved_mb"] / 1024.0
        values = ["val_loss", "val_ppl", "acr", "acr_causal", "flops_ratio_est", "tokens_per_s", "peak_mem_mb"] + wcols
        caption = (
            "Training: final validation loss and perplexity, ACR (key-length proxy) and causal-pair coverage at the "
            "final step, FLOPs ratio (analytic estimate, not a measurement), median training tokens/s, peak memory, "
            "window-bucket fractions at the final step."
        )
        extra_keys = {"peak_mem_gib", "peak_reserved_gib", "peak_reserved_mb"}
    elif name == "inference":
        recs = [records.inference_record(r, windows) for r in runs]
        values = [
            "val_loss",
            "val_ppl",
            "acr",
            "acr_causal",
            "flops_ratio_est",
            "flops_reduction_pct",
            "tokens_per_s",
            "elapsed_s",
        ] + wcols
        caption = (
            "Inference: validation loss and perplexity, ACR and causal-pair coverage, FLOPs ratio (analytic estimate), "
            "tokens/s and wall time of the evaluation, window-bucket fractions, from each run's last inference "
            "(else evaluation) record."
        )
        extra_keys = set()
    elif name == "windows" and source == "inference":
        recs = []
        for r in runs:
            inf = records.inference_record(r, windows)
            if inf["source"] and any(not math.isnan(inf[c]) for c in wcols):
                recs.append(
                    {
                        **{k: inf[k] for k in ("run", "regime", "method", "seed", "imported", "step")},
                        "layer": "all",
                        **{c: inf[c] for c in wcols},
                    }
                )
        values = list(wcols)
        caption = "Window-bucket fractions at evaluation (each run's inference record, all layers and batches)."
        extra_keys = set()
    elif name == "windows":
        recs = [row for r in runs for row in records.window_records(r, windows)]
        values = list(wcols)
        caption = "Window-bucket fractions per layer at the final step (the row 'all' is the mean over layers)."
        extra_keys = set()
    elif name == "stability":
        recs = [records.stability_record(r) for r in runs]
        values = [
            "routing_updates",
            "partition_agreement_ari",
            "group_switch_rate",
            "window_switch_rate",
            "controller_grad_norm_mean",
            "controller_grad_norm_final",
            "forced_share",
            "real_share",
        ]
        caption = (
            "Routing stability: routing updates recorded (layer x update), mean adjusted Rand index of consecutive "
            "level-0 partitions, mean share of heads changing group / window between consecutive updates, "
            "controller gradient norm; share of level-0 partitions that are forced splits, and share whose "
            "silhouette beats both nulls (random relabelings, clustering of structureless heads)."
        )
        extra_keys = set()
    else:
        recs = [row for r in runs for row in records.probe_records(r, part)]
        _, keys, values = records.PROBE_PARTS[part]
        values = list(values)
        caption = {
            "comparisons": "Learned head groups against clusters of the same layer's heads built from their "
            "probe profiles: ARI against a within-layer permutation null (mean, 95th percentile), p-value, "
            "NMI, V-measure; pooled rows (no layer) use a layer-stratified null; the compared partition's "
            "cluster-validity verdict; degenerate rows give their reason.",
            "association": "Spearman's rho of window against probe score within layers, with a permutation "
            "null, p-value and 95% bootstrap interval; pooled rows (no layer) weight layers by heads.",
            "relations": "Syntactic relations: best head and its accuracy against the best fixed-offset baseline, "
            "their difference with a 95% bootstrap interval over sentences.",
            "coref": "Coreference: accuracy by antecedent distance, heads against baselines.",
            "heads": "Per-head probe scores.",
        }[part]
        extra_keys = set()

    return recs, values, caption, extra_keys


def _build(
    name,
    runs,
    cfg,
    *,
    by="run",
    layout="toolkit",
    part="comparisons",
    baseline=None,
    source="final",
    n_boot=stats.DEFAULT_BOOT,
    seed=stats.DEFAULT_SEED,
) -> Table:
    _check_opts(name, by, layout, part)
    if source not in ("final", "inference"):
        raise AAHVizError(f"windows source must be 'final' or 'inference', got {source!r}")
    runs = _sorted_runs(runs)
    seq_len, windows = cfg
    if not windows:  # only baselines: take the windows they were configured with
        windows = tuple(sorted({int(w) for r in runs for w in r.windows}))
    wcols = [f"window_frac_{w}" for w in windows]
    config = {"seq_len": seq_len, "windows": list(windows)}
    recs, values, caption, extra_keys = _records_for(name, runs, windows, wcols, part=part, source=source)
    df = pd.DataFrame(recs)
    notes: list[str] = unfinished_notes(runs)
    empty_message = ""
    id_cols = _id_columns(name, by, part)
    if df.empty:
        empty_message = {
            "probes": f"no run here has a {records.PROBE_PARTS[part][0]} table; "
            "run `aah-viz probe` (and `aah-viz compare`) on a run first",
            "windows": "no run here recorded window-bucket fractions (the branch table is empty)",
        }.get(name, "no rows: the runs recorded nothing for this table")
        df = pd.DataFrame(columns=id_cols + values)
        table = Table(
            name,
            df,
            caption,
            _label(name, part),
            [empty_message],
            id_columns=id_cols,
            value_columns=values,
            by=by,
            config=config,
            empty_message=empty_message,
        )
        table.best = _blank_like(df, False)
        table.uncertainty = _blank_like(df, math.nan)
        return table

    if name in ("training", "inference"):
        _coverage_notes(df, name, notes)
    exact_src = _exact_strings(runs, name, df) if by == "run" else None

    if by == "regime":
        group_keys = (
            ["regime"]
            + (["layer"] if name == "windows" else [])
            + (list(records.PROBE_PARTS[part][1]) if name == "probes" else [])
        )
        out, unc, lo, hi = _group(df, group_keys, values + [k for k in extra_keys if k in df], n_boot=n_boot, seed=seed)
        significant = _significant_best(out, df, group_keys, values, lambda c: _direction(c))
        ident = df.groupby(group_keys, sort=False, dropna=False).first().reset_index()
        keep = [
            c for c in ("method", "grouping", "hierarchy", "joint_scorer", "seq_len", "checkpoint_step") if c in ident
        ]
        out = out.merge(ident[group_keys + keep], on=group_keys, how="left")
        if any(out["n"] < 2):
            notes.append(
                f"{stats.NO_VARIANCE} for regimes with one run: "
                + ", ".join(str(r) for r in out.loc[out["n"] < 2, "regime"].unique())
            )
        notes.append(
            "Values are means over runs (seeds) of each regime, ± the sample standard deviation; CSV adds 95% "
            f"percentile-bootstrap intervals ({n_boot} resamples, seed {seed})."
        )
        df = out
    else:
        unc = lo = hi = None
        significant = None

    if layout == "paper":
        df, unc, lo, hi, exact_src, id_cols, values = _paper_layout(name, by, df, unc, lo, hi, exact_src, wcols)
    table = Table(
        name,
        df.reset_index(drop=True),
        caption,
        _label(name, part),
        notes,
        id_columns=id_cols,
        value_columns=[v for v in values if v in df.columns],
        by=by,
        config=config,
    )
    cols = list(table.df.columns)
    table.uncertainty = _align(unc, table.df, cols, math.nan)
    table.ci_low = _align(lo, table.df, cols, math.nan)
    table.ci_high = _align(hi, table.df, cols, math.nan)
    table.exact = _align(exact_src, table.df, cols, None)
    table.decimals = {c: _decimals(_our_name(c, name)) for c in table.value_columns}
    table.best = _blank_like(table.df, False)
    if significant is not None:  # bold: a best mean that differs significantly from the runner-up
        for col in table.df.columns:
            our = _our_name(col, name)
            if our in significant.columns and col in table.value_columns:
                table.best[col] = significant[our].to_numpy()
        if any(_direction(_our_name(c, name)) for c in table.value_columns):
            table.notes.append(
                f"Bold: the best mean of a column, only where it differs from the next best by Welch's t-test "
                f"(p < {SIGNIFICANCE}) with at least two seeds on each side; rows with one seed are never bold."
            )
    if name == "inference" and any(r.get("source") == "eval" for r in recs):
        table.notes.append(
            "Runs without an inference record report their last training-time evaluation; its ACR, "
            "coverage and window fractions are those of the routing state at that step."
        )
    if baseline is not None and name in ("training", "inference"):
        table.notes.extend(_baseline_notes(pd.DataFrame(recs), baseline, n_boot=n_boot, seed=seed))
    table.df = table.df[[c for c in table.df.columns if c in table.id_columns or c in table.value_columns or c == "n"]]
    return table


def _slug(text) -> str:
    """Text usable in a LaTeX label: lower-case letters, digits and dashes."""
    import re

    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _label(name: str, part: str) -> str:
    return f"tab:aah-{name}" + (f"-{part}" if name == "probes" else "")


def _id_columns(name: str, by: str, part: str) -> list[str]:
    base = ["run", "regime", "seed"] if by == "run" else ["regime", "n"]
    if name == "windows":
        return base + ["layer"]
    if name == "probes":
        return base + list(records.PROBE_PARTS[part][1])
    return base


def _group(df, keys, values, *, n_boot, seed):
    """Means (keys first, then n), and the std and bootstrap interval frames, one row per group
    (four frames: a value column may itself be named like another's interval, ``delta_ci_low``)."""
    groups = stats.summaries_by_group(df, values, by=keys, n_boot=n_boot, seed=seed)
    means = pd.DataFrame([{**ident, **{c: s.mean for c, s in cols.items()}} for ident, cols in groups])
    std, lo, hi = (
        pd.DataFrame([{c: getattr(s, field) for c, s in cols.items()} for _, cols in groups])
        for field in ("std", "ci_low", "ci_high")
    )
    return means, std, lo, hi


def _paper_layout(name, by, df, unc, lo, hi, exact_src, wcols):
    mapping = list(PAPER_TRAINING if name == "training" else PAPER_INFERENCE) + [(c, c) for c in wcols]
    if name == "inference":
        mapping.append(("resolution_per_head_mean_raw", "resolution_per_head_mean"))
    if by == "regime":
        mapping = [(p, o) for p, o in mapping if o != "seed"]
        mapping.insert(5 if name == "training" else 6, ("n", "n"))
    present = [(p, o) for p, o in mapping if o in df.columns]
    rename = {o: p for p, o in present}
    new = df[[o for _, o in present]].rename(columns=rename)

    def remap(frame):
        if frame is None:
            return None
        keep = [o for _, o in present if o in frame.columns]
        return frame[keep].rename(columns=rename)

    id_names = {"method", "grouping", "hierarchy", "joint_scorer", "context", "seed", "checkpoint_step", "n"}
    id_cols = [p for p, _ in present if p in id_names]
    values = [p for p, _ in present if p not in id_names]
    return new, remap(unc), remap(lo), remap(hi), remap(exact_src), id_cols, values


PAPER_TO_OURS = {p: o for p, o in PAPER_TRAINING + PAPER_INFERENCE}


def _our_name(col: str, name: str) -> str:
    return PAPER_TO_OURS.get(col, col)


def _align(frame, like: pd.DataFrame, cols, fill):
    out = pd.DataFrame(fill, index=like.index, columns=cols, dtype=object if fill is None else float)
    if frame is None:
        return out
    frame = frame.reset_index(drop=True)
    for c in cols:
        if c in frame.columns:
            out[c] = frame[c].to_numpy()
    return out


def _blank_like(df, fill):
    return pd.DataFrame(fill, index=df.index, columns=df.columns)


SIGNIFICANCE = 0.05


def _significant_best(groups: pd.DataFrame, per_run: pd.DataFrame, keys, value_cols, direction) -> pd.DataFrame:
    """True where a group's mean is the column's best and differs significantly (Welch's t-test,
    p < ``SIGNIFICANCE``) from the next best group's; groups with fewer than two runs never count."""
    best = pd.DataFrame(False, index=groups.index, columns=groups.columns)
    if len(groups) < 2:
        return best
    key_tuples = [tuple(r) for r in groups[keys].itertuples(index=False)]
    members = per_run.groupby(keys, sort=False, dropna=False).groups
    for col in value_cols:
        d = direction(col)
        if d == 0 or col not in groups or col not in per_run:
            continue
        means = pd.to_numeric(groups[col], errors="coerce")
        if means.notna().sum() < 2:
            continue
        order = means.dropna().sort_values(ascending=d < 0, kind="stable").index
        first, second = order[0], order[1]
        if means[first] == means[second]:
            continue

        def sample(i):
            key = key_tuples[groups.index.get_loc(i)]
            rows = members.get(key if len(keys) > 1 else key[0], [])
            return pd.to_numeric(per_run.loc[rows, col], errors="coerce").dropna().to_numpy(dtype=float)

        a, b = sample(first), sample(second)
        if len(a) < 2 or len(b) < 2:
            continue
        p = stats.welch_t_test(a, b).p_value
        if p == p and p < SIGNIFICANCE:
            best.loc[first, col] = True
    return best


def _coverage_notes(df, name, notes):
    notes.append(
        "FLOPs ratio is the analytic estimate of method section 11.1 (attention share of an analytic budget), "
        "not a measured FLOP count."
    )
    if name == "training":
        notes.append(
            "ACR and window fractions are those of the final recorded step; tokens/s is the median over "
            "recorded steps; peak memory is the maximum recorded."
        )
    imported = df.loc[df["imported"].astype(bool), "run"].tolist() if "imported" in df else []
    if imported:
        notes.append("Imported (published) numbers: " + ", ".join(imported) + ".")


def _exact_strings(runs, name, df) -> pd.DataFrame | None:
    """Original published strings of imported runs, in our column names (None when there are none)."""
    key = {"training": "training", "inference": "inference"}.get(name)
    if key is None:
        return None
    rows, any_found = [], False
    by_id = {r.run_id: r for r in runs}
    mapping = dict(PAPER_TRAINING if name == "training" else PAPER_INFERENCE)
    mapping["resolution_per_head_mean_raw"] = "resolution_per_head_mean"
    for run_id in df["run"]:
        run = by_id.get(run_id)
        src = ((run.manifest.get("reference") or {}).get("values") or {}).get(key) if run is not None else None
        row = {}
        if isinstance(src, dict):
            for paper_col, text in src.items():
                ours = mapping.get(paper_col, paper_col)
                row[ours] = text
                any_found = True
        rows.append(row)
    if not any_found:
        return None
    exact = pd.DataFrame(rows)
    # keep a published string only where it is the number we hold (the string is presentation, not data)
    for col in exact.columns:
        if col not in df.columns:
            continue
        for i, text in enumerate(exact[col]):
            if not isinstance(text, str):
                continue
            held = df[col].iloc[i]
            if text == "":
                ok = held is None or (isinstance(held, float) and math.isnan(held)) or held == ""
            else:
                try:
                    ok = float(text) == float(held)
                except (TypeError, ValueError):
                    ok = str(held) == text
            if not ok:
                exact.at[i, col] = None
    return exact


def _baseline_notes(finals: pd.DataFrame, baseline: str, *, n_boot: int, seed: int) -> list[str]:
    try:
        cmp = stats.compare_to_baseline(finals, baseline, metric="val_loss", seed=seed)
    except ValueError as err:
        raise AAHVizError(str(err)) from None
    out = []
    for _, r in cmp.iterrows():
        if r["n"] == 0 or r["n_baseline"] == 0:
            out.append(f"{r['regime']} vs {baseline}: no val_loss to compare.")
        elif r["note"]:
            out.append(f"{r['regime']} vs {baseline}: difference in val_loss {r['diff']:+.4f} ({r['note']}).")
        else:
            out.append(
                f"{r['regime']} vs {baseline}: difference in val_loss {r['diff']:+.4f}; Welch t = {r['welch_t']:.3f} "
                f"(df {r['welch_df']:.1f}), p = {r['welch_p']:.4g}; {r['perm_method']} p = {r['perm_p']:.4g} "
                f"(n = {int(r['n'])} vs {int(r['n_baseline'])})."
            )
    return out


def finals_frame(runs) -> pd.DataFrame:
    """One row per run: regime, seed, run and the final training metrics (for stats and the factorial view)."""
    runs = _open(runs)
    cfg = check_same_config(runs)
    windows = cfg[1] or tuple(sorted({int(w) for r in runs for w in r.windows}))
    return pd.DataFrame([records.training_record(r, windows) for r in runs])


def val_loss_curves(runs) -> pd.DataFrame:
    """``regime, seed, run, step, val_loss`` for every validation of every run."""
    parts = []
    for run in _open(runs):
        sc = run.scalar("val_loss")
        if sc.empty:
            continue
        parts.append(
            pd.DataFrame(
                {
                    "regime": run.regime,
                    "seed": run.seed,
                    "run": run.run_id,
                    "step": sc["step"].astype("int64"),
                    "val_loss": sc["value"].astype(float),
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=["regime", "seed", "run", "step", "val_loss"])
    return pd.concat(parts, ignore_index=True)


def comparison_table(runs, baseline: str, *, metric: str = "val_loss", seed: int = stats.DEFAULT_SEED) -> Table:
    """Regimes against ``baseline`` on the final ``metric``: difference, Welch's t, permutation p."""
    finals = finals_frame(runs)
    try:
        cmp = stats.compare_to_baseline(finals, baseline, metric=metric, seed=seed)
    except ValueError as err:
        raise AAHVizError(str(err)) from None
    values = [
        "n",
        "n_baseline",
        "mean",
        "mean_baseline",
        "diff",
        "welch_t",
        "welch_df",
        "welch_p",
        "perm_p",
        "n_paired",
        "paired_perm_p",
    ]
    cmp = cmp.sort_values("regime", key=lambda col: col.map(paper_rank), kind="stable").reset_index(drop=True)
    df = cmp[["regime", "baseline"] + values + ["perm_method", "note"]]
    caption = (
        f"Final {metric} of each regime against {baseline}: difference of means, Welch's t-test, a permutation "
        "test relabelling runs, and a sign-flip test over the seeds both regimes ran."
    )
    t = Table(
        "comparison",
        df,
        caption,
        f"tab:aah-comparison-{_slug(metric)}-vs-{_slug(baseline)}",
        id_columns=["regime", "baseline"],
        value_columns=values + ["perm_method", "note"],
        by="regime",
    )
    t.decimals = {
        "mean": 4,
        "mean_baseline": 4,
        "diff": 4,
        "welch_t": 3,
        "welch_df": 1,
        "welch_p": 4,
        "perm_p": 4,
        "n": 0,
        "n_baseline": 0,
        "n_paired": 0,
        "paired_perm_p": 4,
    }
    t.best, t.uncertainty = _blank_like(df, False), _blank_like(df, math.nan)
    return t


def factorial_table(runs, *, metric: str = "val_loss", seed: int = stats.DEFAULT_SEED) -> Table:
    """The effect of each factor (grouping, hierarchy refresh, freeze, joint scoring, window control)."""
    finals = finals_frame(runs)
    eff = stats.factorial_effects(finals, metric=metric, seed=seed)
    values = ["covered", "pairs", "effect", "ci_low", "ci_high", "welch_p", "n_on", "n_off", "note"]
    df = eff[["factor"] + values]
    t = Table(
        "factorial",
        df,
        f"Effect of each factor on the final {metric} (factor on minus off), from regime pairs "
        "that differ in that factor alone.",
        f"tab:aah-factorial-{_slug(metric)}",
        id_columns=["factor"],
        value_columns=values,
        by="regime",
    )
    t.decimals = {"effect": 4, "ci_low": 4, "ci_high": 4, "welch_p": 4, "n_on": 0, "n_off": 0}
    t.best, t.uncertainty = _blank_like(df, False), _blank_like(df, math.nan)
    uncovered = df.loc[~df["covered"].astype(bool), "factor"].tolist()
    if uncovered:
        t.notes.append("Not covered by these runs: " + ", ".join(uncovered) + ".")
    return t


def difference_curve_table(runs, regime: str, baseline: str, *, seed: int = stats.DEFAULT_SEED) -> Table:
    """Per-step paired difference of validation loss (regime - baseline) over shared seeds."""
    curves = val_loss_curves(runs)
    curve = stats.paired_difference_curve(curves, regime, baseline, seed=seed)
    t = Table(
        "difference_curve",
        curve,
        f"Validation loss of {regime} minus {baseline} per step, paired by seed "
        "(mean, std, n, 95% bootstrap interval).",
        f"tab:aah-difference-{_slug(regime)}-vs-{_slug(baseline)}",
        id_columns=["step"],
        value_columns=["mean_diff", "std", "n", "ci_low", "ci_high"],
        by="regime",
    )
    t.decimals = {"mean_diff": 4, "std": 4, "n": 0, "ci_low": 4, "ci_high": 4}
    t.best, t.uncertainty = _blank_like(curve, False), _blank_like(curve, math.nan)
    if curve.empty:
        t.notes.append(f"no step has validation loss for both {regime} and {baseline} on a shared seed")
    return t


__all__ = [
    "MixedConfigError",
    "TABLE_NAMES",
    "Table",
    "build_table",
    "build_tables",
    "check_same_config",
    "collect_runs",
    "comparison_table",
    "difference_curve_table",
    "factorial_table",
    "finals_frame",
    "split_by_config",
    "val_loss_curves",
]
