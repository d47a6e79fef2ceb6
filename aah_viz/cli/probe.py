"""``aah-viz probe``: syntactic and coreference probes of a trained model, written into its run."""

from __future__ import annotations

import argparse
import sys

from aah_viz.cli._json import json_text
from aah_viz.probes.progress import ProbeInterrupted


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "probe",
        help="probe heads for syntax (CoNLL-U) and coreference; write probe_* tables into the run",
        description="Run a checkpoint of `aah-viz train` (or a local Hugging Face model) over gold syntax and "
        "coreference data and score every head: Clark et al.'s syntactic probe per relation and direction, the "
        "coreference probe per antecedent-distance bucket with baselines, and window sufficiency. Writes the "
        "probe_heads, probe_relations and probe_coref tables into the run directory (docs/probes.md). A causal "
        "model (an AAH checkpoint, a *ForCausalLM) is probed looking back: each dependency at its later word, "
        "in the direction dependent_to_head or head_to_dependent, against backward offsets; pronouns before "
        "their antecedent are left out and counted. Without --syntax and --coref, the bundled synthetic probe "
        "set is used. Inputs are parsed and scored before anything is written, so bad input leaves the run "
        "untouched.",
    )
    p.add_argument(
        "target",
        metavar="RUN_OR_CHECKPOINT",
        help="a run directory (its newest checkpoint, or --step), a checkpoint .pt file, "
        "or a local Hugging Face model folder (needs --out)",
    )
    p.add_argument(
        "--syntax",
        metavar="FILE.conllu",
        default=None,
        help="CoNLL-U file with gold dependency trees (default: the bundled synthetic set)",
    )
    p.add_argument(
        "--coref",
        metavar="FILE",
        default=None,
        help="coreference file: JSONL (docs/probes.md), GAP TSV or CoNLL-2012 *_conll "
        "(default: the bundled synthetic set)",
    )
    p.add_argument("--step", type=int, default=None, help="probe the checkpoint of this step (default: the newest)")
    p.add_argument("--max-docs", type=int, default=None, metavar="N", help="read at most N documents of each input")
    p.add_argument(
        "--sample-docs",
        type=int,
        default=None,
        metavar="N",
        help="score a random sample of N documents of each input (after --max-docs), kept in file order; "
        "seeded by --sample-seed",
    )
    p.add_argument("--sample-seed", type=int, default=0, help="seed of --sample-docs (default: 0)")
    p.add_argument(
        "--min-count",
        type=int,
        default=100,
        help="leave relations rarer than this out of probe_relations (default: 100)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="RUN",
        help="run directory for the tables when the target has none (a Hugging Face model or a loose "
        "checkpoint); created when missing",
    )
    p.add_argument(
        "--context",
        choices=("sentence", "document"),
        default="sentence",
        help="syntax inputs: each sentence on its own, as Clark et al. (default), or whole documents in chunks; "
        "either way a word's predicted head is sought in its own sentence. Coreference always reads documents",
    )
    p.add_argument(
        "--relations",
        choices=("universal", "full"),
        default="universal",
        help="relation labels: universal (subtypes stripped: nmod:poss counts as nmod; default) or full",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        help="resamples of sentences for each relation's interval of best head minus baseline (default: 1000)",
    )
    p.add_argument(
        "--null-draws",
        type=int,
        default=200,
        help="label shuffles of the max-over-heads null behind probe_claims' adjusted p (default: 200)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap, the null and the split halves (default: 0)"
    )
    p.add_argument(
        "--no-start-token",
        action="store_true",
        help="a causal Hugging Face model whose tokenizer adds no special tokens gets its BOS token before each "
        "input (the first position is an attention sink; docs/probes.md); this leaves it out",
    )
    p.add_argument("--batch-size", type=int, default=16, help="model inputs per forward pass (default: 16)")
    p.add_argument(
        "--sort-by-length",
        action="store_true",
        help="feed the model its inputs shortest first, so that batches pad little (faster; the same scores, "
        "the model's float rounding may differ with the padded shapes)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="the base model folder of a retrofit run, where it is not where the run records it "
        "(default: the folder its manifest names)",
    )
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of torch, of the BLAS behind the scoring and of the tokenizer (default: their own "
        "choice; on a shared machine fewer threads can be faster)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an interrupted probe saved in the run (RUN/.probe-progress) and start over; without it "
        "the same command continues an interrupted probe where it stopped",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of tables")
    p.set_defaults(func=run)


def settings(args: argparse.Namespace):
    """The probe's settings from the command's arguments."""
    from instrumentation import ProbeSettings

    return ProbeSettings(
        syntax=args.syntax,
        coref=args.coref,
        step=args.step,
        out=args.out,
        max_docs=args.max_docs,
        sample_docs=args.sample_docs,
        sample_seed=args.sample_seed,
        min_count=args.min_count,
        context=args.context,
        relations=args.relations,
        bootstrap=args.bootstrap,
        null_draws=args.null_draws,
        seed=args.seed,
        start_token=not args.no_start_token,
        batch_size=args.batch_size,
        sort_by_length=args.sort_by_length,
        base_model=args.model,
        device=args.device,
        threads=args.threads,
        restart=args.restart,
    )


def run(args: argparse.Namespace) -> int:
    from instrumentation import probe_target  # torch is needed once the inputs are read, not before

    bar = _Bar(f"probing ({args.context} inputs)") if not args.no_progress else None
    try:
        try:
            done = probe_target(args.target, settings(args), progress=bar, warn=_warn)
        finally:
            if bar is not None:
                bar.close()  # before anything else is said
    except ProbeInterrupted as err:
        print(f"aah-viz: {err}", file=sys.stderr)
        return 130
    summary = _summary(done, args) | {"threads": done.threads}
    if args.json:
        print(json_text(summary, indent=2))
    else:
        _print_tables(done.result, summary)
    return 0


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


class _Bar:
    """The progress bar over the probe's inputs, opened at its first report and closed once all are done."""

    def __init__(self, desc: str):
        self.desc = desc
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=self.desc, unit="input")
        else:
            self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _summary(done, args) -> dict:
    result, syntax_path, coref_path = done.result, done.syntax_path, done.coref_path
    coref_all = result.probe_coref[result.probe_coref["bucket"] == "all"] if len(result.probe_coref) else None
    best_coref = None
    if coref_all is not None and len(coref_all):
        heads = coref_all[(coref_all["method"] == "head") & coref_all["accuracy"].notna()]
        if len(heads):  # none when no query could be scored (e.g. every antecedent beyond the inputs)
            row = heads.loc[heads["accuracy"].idxmax()]
            best_coref = {"layer": int(row["layer"]), "head": int(row["head"]), "accuracy": float(row["accuracy"])}
    return {
        "run": str(done.run_dir),
        "step": done.step,
        "syntax": str(syntax_path) if syntax_path else None,
        "coref": str(coref_path) if coref_path else None,
        "syntax_docs": result.n_syntax_docs,
        "sentences": result.n_sentences,
        "dependencies": result.n_links,
        "coref_docs": result.n_coref_docs,
        "sample_docs": args.sample_docs,
        "sample_seed": args.sample_seed if args.sample_docs else None,
        "coref_queries": result.n_coref_queries,
        "long_sentences_left_out": result.n_long_sentences,
        "attention": "causal" if result.causal else "bidirectional",
        "direction_counts": result.direction_counts,
        "cataphora_left_out": result.n_cataphora_left_out,
        "claims": result.probe_claims.drop(columns=["step"]).to_dict(orient="records")
        if len(result.probe_claims)
        else [],
        "relations": result.probe_relations.drop(columns=["step"]).to_dict(orient="records"),
        "best_coref_head": best_coref,
        "coref_baselines": {r["method"]: float(r["accuracy"]) for _, r in coref_all.iterrows() if r["method"] != "head"}
        if coref_all is not None
        else {},
        "segments": [str(p) for p in done.written],
    }


CLAIMS_SHOWN = [
    "probe",
    "relation",
    "direction",
    "count",
    "best_layer",
    "best_head",
    "best_acc",
    "split_half_acc",
    "null_p95",
    "adjusted_p",
    "baseline",
    "baseline_acc",
    "beats_baseline",
    "offset_share",
]


def _print_tables(result, summary) -> None:
    print(
        f"probed step {summary['step']}: {summary['syntax_docs']} syntax documents ({summary['sentences']} "
        f"sentences, {summary['dependencies']} dependencies) and {summary['coref_docs']} coreference documents "
        f"({summary['coref_queries']} mentions with an antecedent)"
    )
    if summary["attention"] == "causal":
        print(
            "causal model: each dependency scored at its later word looking back (direction dependent_to_head or "
            f"head_to_dependent, baseline the best backward offset); {summary['cataphora_left_out']} pronoun(s) "
            "before their antecedent left out of coreference"
        )
    if len(result.probe_claims):
        print("best heads, selection-aware (probe_claims: split half, max-over-heads null, strongest baseline):")
        claims = result.probe_claims[CLAIMS_SHOWN]
        print(claims.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if len(result.probe_relations):
        shown = result.probe_relations.drop(columns=["step", "labels", "context"])
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    else:
        print("no relation reaches --min-count (or no syntax input)")
    if summary["best_coref_head"]:
        b = summary["best_coref_head"]
        base = ", ".join(f"{k} {v:.3f}" for k, v in summary["coref_baselines"].items())
        print(f"coreference: best head L{b['layer']}H{b['head']} accuracy {b['accuracy']:.3f}; baselines: {base}")
    print(f"wrote {len(summary['segments'])} segments into {summary['run']}")
