"""``aah-viz probe``: syntactic and coreference probes of a trained model, written into its run."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from aah_viz.bundled import data_path
from aah_viz.cli._json import json_text
from aah_viz.errors import InputFormatError, RunLogError
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


def read_inputs(args):
    """(syntax documents, coreference documents, their paths) from --syntax, --coref, --max-docs and
    --sample-docs (the bundled set without either)."""
    from aah_viz.corpus.probe_set import PROBE_SET_CONLLU, PROBE_SET_COREF
    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.probes.coref_formats import read_coref
    from aah_viz.probes.runner import sample_documents

    syntax_path, coref_path = args.syntax, args.coref
    if syntax_path is None and coref_path is None:
        syntax_path, coref_path = data_path(PROBE_SET_CONLLU), data_path(PROBE_SET_COREF)
    sample = getattr(args, "sample_docs", None)  # aah-viz bench probe reads its inputs here too, unsampled
    for flag, value in (("--max-docs", args.max_docs), ("--sample-docs", sample)):
        if value is not None and value < 1:
            raise InputFormatError(f"{flag} must be at least 1, got {value}")
    syntax_docs = read_conllu(syntax_path, args.max_docs) if syntax_path else []
    coref_docs = read_coref(coref_path, args.max_docs) if coref_path else []
    if sample is not None:
        syntax_docs = sample_documents(syntax_docs, sample, args.sample_seed)
        coref_docs = sample_documents(coref_docs, sample, args.sample_seed)
    if coref_path and not any(doc.chains for doc in coref_docs):
        raise InputFormatError(f"{coref_path}: no coreference chains in the documents read")
    return syntax_docs, coref_docs, syntax_path, coref_path


def _output_run(target, args, source):
    from aah_viz.runlog.paths import is_run

    if target.run_dir is not None and args.out is None:
        return target.run_dir
    if args.out is None:
        raise RunLogError(f"{target.model_path} belongs to no run directory; pass --out RUN for the probe tables")
    out = Path(args.out)
    if is_run(out):
        return out
    from aah_viz.runlog import RunWriter, make_manifest

    windows = sorted({int(w) for w in source.windows.ravel()} | set(source.candidate_windows))
    manifest = make_manifest(
        run_id=out.name,
        regime="external" if target.kind == "hf" else "checkpoint",
        seed=None,
        config={"source": str(target.model_path), "kind": target.kind},
        windows=windows,
        seq_len=int(source.max_len),
        n_layer=int(source.n_layer),
        n_head=int(source.n_head),
        max_depth=0,
        probed_model=str(target.model_path),
    )
    RunWriter.create(out, manifest).close("imported")
    return out


def run(args: argparse.Namespace) -> int:
    from aah_viz.probes.store import write_probe_tables
    from aah_viz.probes.target import resolve_target, windows_from_heads
    from aah_viz.torch_import import require_torch

    if args.bootstrap < 1:
        raise InputFormatError(f"--bootstrap must be at least 1, got {args.bootstrap}")
    if args.null_draws < 1:
        raise InputFormatError(f"--null-draws must be at least 1, got {args.null_draws}")
    target = resolve_target(args.target, args.step)
    if target.run_dir is None and args.out is None:
        raise RunLogError(f"{target.model_path} belongs to no run directory; pass --out RUN for the probe tables")
    syntax_docs, coref_docs, syntax_path, coref_path = read_inputs(args)  # before the model: fail fast

    require_torch()
    limits = _limit_threads(args.threads)
    from instrumentation import load_aah_checkpoint, load_hf_model, load_retrofit_adapter

    if target.kind == "aah":
        source = load_aah_checkpoint(target.model_path, args.device)
    elif target.kind == "retrofit":
        source = load_retrofit_adapter(
            target.model_path,
            target.run_dir,
            device=args.device,
            with_start_token=not args.no_start_token,
            base_model=args.model,
        )
    else:
        source = load_hf_model(target.model_path, device=args.device, with_start_token=not args.no_start_token)
    step = int(target.step if target.step is not None else (source.step or 0))
    windows = None
    if target.run_dir is not None:
        from aah_viz.runlog import load_run

        heads = load_run(target.run_dir).table("heads", columns=["step", "layer", "head", "window"])
        windows = windows_from_heads(heads, step, source.n_layer, source.n_head)
    if windows is None:
        windows = source.windows
    saved = _progress(target, args, source, step, windows, syntax_docs, coref_docs)
    try:
        with _stop_on_signals(saved), limits:
            threads = _threads_in_use()
            result = _probe(source, syntax_docs, coref_docs, step, windows, args, saved)
    except ProbeInterrupted as err:
        print(f"aah-viz: {err}", file=sys.stderr)
        return 130
    if result.n_long_sentences:
        print(
            f"warning: {result.n_long_sentences} sentence(s) of {syntax_path} have more words than the model "
            f"takes tokens in one input ({source.max_len}) and were left out",
            file=sys.stderr,
        )
    run_dir = _output_run(target, args, source)
    written = write_probe_tables(run_dir, result.tables(), step)
    saved.clear()  # the tables hold it all now
    summary = _summary(result, run_dir, step, syntax_path, coref_path, written, args) | {"threads": threads}
    if args.json:
        print(json_text(summary, indent=2))
    else:
        _print_tables(result, summary)
    return 0


def _probe(source, syntax_docs, coref_docs, step, windows, args, saved):
    from aah_viz.probes.runner import run_probes

    return run_probes(
        source,
        syntax_docs,
        coref_docs,
        step=step,
        windows=windows,
        candidate_windows=source.candidate_windows,
        min_count=args.min_count,
        context=args.context,
        relations=args.relations,
        progress=not args.no_progress,
        batch_size=args.batch_size,
        n_boot=args.bootstrap,
        seed=args.seed,
        sort_by_length=args.sort_by_length,
        saved=saved,
        null_draws=args.null_draws,
    )


def _progress(target, args, source, step, windows, syntax_docs, coref_docs):
    """Where this probe keeps what it finished (the run's ``.probe-progress``), keyed by everything
    that decides its numbers; ``--restart`` discards an interrupted one."""
    import numpy as np

    from aah_viz.probes.progress import ProbeProgress, documents_digest, fingerprint

    run_dir = target.run_dir if target.run_dir is not None and args.out is None else Path(args.out)
    digest = fingerprint(
        model=_model_identity(target),
        kind=target.kind,
        step=step,
        windows=np.asarray(windows, dtype=np.int64),
        candidate_windows=[int(w) for w in source.candidate_windows],
        context=args.context,
        relations=args.relations,
        batch_size=args.batch_size,
        sort_by_length=args.sort_by_length,
        start_token=not args.no_start_token,
        syntax=documents_digest(syntax_docs),
        coref=documents_digest(coref_docs),
    )
    saved = ProbeProgress(run_dir, digest)
    if args.restart:
        saved.clear()
    else:
        saved.saved()  # an interrupted probe of something else: refused before any work
    return saved


def _model_identity(target) -> str:
    """What the probed model is: inside a run, the run's id and the file's place in it (a moved or copied
    run continues its interrupted probe); else the model's resolved path."""
    from aah_viz.runlog import read_manifest

    model = Path(target.model_path).resolve()
    if target.run_dir is None:
        return str(model)
    try:
        inside = model.relative_to(Path(target.run_dir).resolve())
        uid = read_manifest(target.run_dir).get("run_uid")
    except (ValueError, RunLogError):
        return str(model)
    return f"run {uid}/{inside.as_posix()}" if isinstance(uid, str) else str(model)


def _limit_threads(threads: int | None):
    """``--threads N`` for every pool the probe runs on: torch's (intra- and inter-op), the BLAS the
    numpy scoring uses, and a fast tokenizer's (Rayon); a context for the BLAS limit."""
    if not threads:
        return contextlib.nullcontext()
    if threads < 1:
        raise InputFormatError(f"--threads must be at least 1, got {threads}")
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # set once per process (an earlier command in this process did)
        pass
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when the tokenizer's pool starts
    return threadpool_limits(limits=threads)


def _threads_in_use() -> dict:
    """The threads the probe's pools may use, as the summary reports them."""
    import torch
    from threadpoolctl import threadpool_info

    blas = [int(p.get("num_threads", 0)) for p in threadpool_info()]
    return {"torch": int(torch.get_num_threads()), "blas": max(blas, default=None)}


@contextlib.contextmanager
def _stop_on_signals(saved):
    """SIGINT or SIGTERM asks the probe to stop at its next whole state, saved; a second one acts as usual."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handle(signum, frame):
        saved.stop = signal.Signals(signum).name
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _summary(result, run_dir, step, syntax_path, coref_path, written, args) -> dict:
    coref_all = result.probe_coref[result.probe_coref["bucket"] == "all"] if len(result.probe_coref) else None
    best_coref = None
    if coref_all is not None and len(coref_all):
        heads = coref_all[(coref_all["method"] == "head") & coref_all["accuracy"].notna()]
        if len(heads):  # none when no query could be scored (e.g. every antecedent beyond the inputs)
            row = heads.loc[heads["accuracy"].idxmax()]
            best_coref = {"layer": int(row["layer"]), "head": int(row["head"]), "accuracy": float(row["accuracy"])}
    return {
        "run": str(run_dir),
        "step": step,
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
        "segments": [str(p) for p in written],
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
