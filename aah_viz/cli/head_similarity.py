"""``aah-viz head-similarity``: which notion of head similarity makes a run's heads cluster (issue 26)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options, add_torch_options
from aah_viz.cli.evaluate import windows_arg
from aah_viz.errors import InputFormatError, RunLogError
from aah_viz.method import SIM_THRESHOLD

TABLE = "head_similarity"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "head-similarity",
        help="group each layer's heads by five similarities; validity, split-half stability, agreement",
        description="Group every layer's heads by five named similarities (method: cosine of the routing "
        "features; zscore: the same standardised across the heads; attention: Jensen-Shannon distance of "
        "attention by distance; span: mass inside each candidate window; probe: probe scores), with the "
        "method's level-0 procedure and with complete linkage at the same group count. Each grouping is "
        "judged against the cluster-validity nulls, its stability measured as the ARI between the groupings "
        "of two disjoint halves of the data, and every pair of similarities compared (ARI against a "
        "permutation null). The run's model (its newest checkpoint or adapter, or --model for a probed "
        "model) is measured on two halves of text and probe documents; without a model, or with "
        "--tables-only, the run's probe_heads and head_spans tables are used (no halves, so no stability). "
        "Writes the head_similarity table into the run (docs/head-groups.md, docs/log-format.md).",
    )
    p.add_argument("run", metavar="RUN_OR_PROBED_RUN", help="a run directory (trained, retrofit or probed)")
    p.add_argument("--model", default=None, help="a probed run's Hugging Face model folder (encoder or causal)")
    p.add_argument(
        "--data",
        default=None,
        help="plain-text file a causal model is measured on (default for a run of aah-viz train: its validation "
        "blocks)",
    )
    p.add_argument("--blocks", type=int, default=16, help="text blocks measured, split in two halves (default: 16)")
    p.add_argument("--batch-size", type=int, default=4, help="blocks per forward (default: 4)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per block (default: the model's block_size)")
    p.add_argument(
        "--windows",
        type=windows_arg,
        default=None,
        help="candidate windows of the span similarity, comma-separated (default: a run's own; for --model, "
        "T/8, T/4, T/2, T of --seq-len, so that the spans can differ)",
    )
    p.add_argument(
        "--syntax",
        metavar="FILE.conllu",
        default=None,
        help="gold dependency trees for the probe similarity (default: the bundled synthetic probe set)",
    )
    p.add_argument("--coref", metavar="FILE", default=None, help="coreference file (JSONL, GAP TSV, CoNLL-2012)")
    p.add_argument("--max-docs", type=int, default=None, help="read at most N documents per probe file")
    p.add_argument("--min-count", type=int, default=20, help="relations rarer than this are not probe scores")
    p.add_argument(
        "--no-probes", action="store_true", help="measure no probe scores (the probe similarity is left out)"
    )
    p.add_argument("--tables-only", action="store_true", help="load no model: use the run's own tables only")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help=f"the method's threshold (default: the run's, else {SIM_THRESHOLD})",
    )
    p.add_argument("--min-group-size", type=int, default=None, help="the method's min_group_size (default: the run's)")
    p.add_argument("--null-samples", type=int, default=200, help="random groupings in the validity null (200)")
    p.add_argument("--refit-samples", type=int, default=50, help="structureless head sets in the refit null (50)")
    p.add_argument("--agreement-samples", type=int, default=999, help="permutations for stability and agreement")
    p.add_argument("--seed", type=int, default=0, help="seed of every null draw (default: 0)")
    p.add_argument("--regime", default="full_adaptive", help="regime a causal --model folder is patched with")
    add_torch_options(p)
    add_output_options(p, "print the per-similarity summary as JSON", progress_help="no progress bars")
    p.set_defaults(func=run)


def _check(args) -> None:
    for name in ("blocks", "batch_size", "null_samples", "refit_samples", "agreement_samples"):
        if getattr(args, name) < 1:
            raise InputFormatError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.min_group_size is not None and args.min_group_size < 1:
        raise InputFormatError(f"--min-group-size must be at least 1, got {args.min_group_size}")
    for name in ("data", "syntax", "coref", "model"):
        path = getattr(args, name)
        if path is not None and not Path(path).exists():
            raise InputFormatError(f"--{name} {path}: no such file or folder")


def _has_model(run_dir: Path) -> bool:
    from aah_viz.runlog.paths import list_adapters, list_checkpoints

    return bool(list_checkpoints(run_dir) or list_adapters(run_dir))


def run(args: argparse.Namespace) -> int:
    from aah_viz.analysis import head_similarity as hs
    from aah_viz.probes import head_inputs
    from aah_viz.runlog import load_run

    _check(args)
    run_dir = Path(args.run)
    from aah_viz.runlog.paths import is_run

    if not is_run(run_dir):
        raise RunLogError(f"{run_dir} is not a run directory (no manifest.json)")
    loaded_run = load_run(run_dir)
    present = set(loaded_run.tables())
    tables = {name: loaded_run.table(name) for name in ("probe_heads", "head_spans") if name in present}
    inputs = head_inputs.inputs_from_tables(tables, loaded_run.n_layer, loaded_run.n_head)
    step = int(tables["probe_heads"]["step"].max()) if len(tables.get("probe_heads", [])) else 0
    measured = not args.tables_only and (args.model is not None or _has_model(run_dir))
    if measured:
        measured_inputs, step = _measure(args, run_dir)
        inputs.update(measured_inputs)
    if args.no_probes:
        inputs.pop("probe", None)
    if not inputs:
        raise RunLogError(
            f"{run_dir} has no model to measure and no probe_heads or head_spans table: nothing to compare; "
            "train with checkpoints, probe it (aah-viz probe), profile it (aah-viz profile) or pass --model"
        )
    cfg = loaded_run.config or {}
    settings = hs.Settings(
        threshold=float(args.threshold if args.threshold is not None else cfg.get("sim_threshold", SIM_THRESHOLD)),
        min_group_size=int(args.min_group_size if args.min_group_size is not None else cfg.get("min_group_size", 3)),
        null_samples=args.null_samples,
        refit_samples=args.refit_samples,
        agreement_samples=args.agreement_samples,
        seed=args.seed,
    )
    n_layer = min(v.all.shape[0] for v in inputs.values())
    bar = None
    if not args.no_progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_layer, desc="grouping heads", unit="layer")
    try:
        table = hs.head_similarity_rows(inputs, step=step, settings=settings, progress=bar.update if bar else None)
    finally:
        if bar is not None:
            bar.close()
    from aah_viz.probes.store import write_probe_tables

    write_probe_tables(run_dir, {TABLE: table}, step)
    summary = hs.summary(table)
    if args.json:
        print(json_text({"run": str(run_dir), "step": step, "summary": summary.to_dict(orient="records")}))
    else:
        _print(run_dir, step, inputs, summary, measured)
    return 0


def _measure(args, run_dir: Path):
    from aah_viz.torch_import import limit_threads, require_torch

    require_torch()
    limit_threads(args.threads)
    syntax_docs, coref_docs = ([], []) if args.no_probes else _probe_documents(args)
    from instrumentation import measure_heads

    return measure_heads(
        run_dir,
        model_dir=args.model,
        data=args.data,
        blocks=args.blocks,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        syntax_docs=syntax_docs,
        coref_docs=coref_docs,
        regime=args.regime,
        windows=args.windows,
        device=args.device,
        progress=not args.no_progress,
        probe_kw={"min_count": args.min_count},
    )


def _probe_documents(args):
    from aah_viz.probes.inputs import read_inputs

    inputs = read_inputs(args.syntax, args.coref, max_docs=args.max_docs)
    return inputs.syntax_docs, inputs.coref_docs


def _print(run_dir: Path, step: int, inputs: dict, summary, measured: bool) -> None:
    how = "measured on two halves of the data" if measured else "from the run's tables (no halves: no stability)"
    print(f"head_similarity written to {run_dir} (step {step}; {how})")
    for kind, inp in inputs.items():
        print(f"  {kind}: {inp.source}")
    for r in summary.to_dict(orient="records"):
        stable = (
            f"stable in {r['stable']} of {r['stability_judged']}" if r["stability_judged"] else "stability not measured"
        )
        agree = ", ".join(
            f"agrees with {t} in {int(r[f'agrees_with_{t}'])}"
            for t in ("span", "probe")
            if r["similarity"] != t and f"agrees_with_{t}" in r and r[f"agrees_with_{t}"] == r[f"agrees_with_{t}"]
        )
        print(
            f"  {r['similarity']:>9}: real in {r['real']} of {r['layers']} layers, {stable}"
            + (f", {agree}" if agree else "")
        )
