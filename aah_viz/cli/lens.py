"""``aah-viz lens``: what each head reads on a few documents, and what its executed window cuts."""

from __future__ import annotations

import sys

from aah_viz.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "lens",
        help="record the token lens: each head's strongest keys on a few documents and what its window cuts",
        description="Run a run's model (the newest checkpoint of aah-viz train, or the newest adapter of aah-viz "
        "retrofit on its base model) on a few documents and write into the run, per layer, head and query, the "
        "keys it weighs most under full attention, the window it executes, the attention mass that window cuts "
        "and the mass on the first token; for CoNLL-U and GAP input also the gold dependency arcs and the "
        "pronoun's candidate names. A Hugging Face model folder with --out gives the same document under "
        "another configuration (default: full attention, the unpatched model's) in a new run, for the page's "
        "side-by-side view. The dashboard's Lens page and aah-viz figure --kind tokens show it. "
        "See docs/lens.md.",
    )
    p.add_argument(
        "run",
        help="run directory of aah-viz train (checkpoints) or aah-viz retrofit (adapters), or a Hugging Face "
        "model folder (with --out)",
    )
    p.add_argument("--text", help="plain-text (UTF-8) file: its paragraphs are documents")
    p.add_argument("--syntax", help="CoNLL-U file: its sentences are documents, with their gold dependency arcs")
    p.add_argument("--coref", help="GAP TSV file: its snippets are documents, with the pronoun and its two names")
    p.add_argument(
        "--docs", type=int, default=4, help="documents to record from each of --text, --syntax, --coref (default: 4)"
    )
    p.add_argument(
        "--max-tokens", type=int, default=64, help="tokens per document, a start token included (default: 64)"
    )
    p.add_argument("--top-k", type=int, default=8, help="strongest keys kept per query (default: 8)")
    p.add_argument("--checkpoint", type=int, default=None, help="checkpoint or adapter step (default: the newest)")
    p.add_argument(
        "--model",
        default=None,
        help="the base model folder of a retrofit run, where it is not where the run records it",
    )
    p.add_argument(
        "--out",
        default=None,
        help="for a Hugging Face model folder: the new run directory its lens is written to (a run's lens is "
        "written into the run itself)",
    )
    p.add_argument(
        "--regime",
        default=None,
        help=f"for a Hugging Face model folder: the regime it is patched with (aah-viz regimes lists all; default: "
        f"{MODEL_REGIME}, every head at full causal attention: the unpatched model's attention, nothing cut)",
    )
    p.add_argument("--overwrite", action="store_true", help="with --out: replace an existing run there")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an interrupted lens saved in the run (RUN/.lens-progress) and start over; without it the "
        "same command continues an interrupted lens from its next document",
    )
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar on stderr")
    p.set_defaults(func=run)


MODEL_REGIME = "full_attention"  # a model folder's lens: the configuration an adapted run's lens is compared with


def _positive(name: str, value: int, least: int = 1) -> None:
    if value < least:
        raise ConfigError(f"--{name} {value}: give at least {least}")


def documents(args):
    from aah_viz.probes.lens_docs import coref_docs, syntax_docs, text_docs

    readers = ((args.text, text_docs), (args.syntax, syntax_docs), (args.coref, coref_docs))
    if not any(path for path, _ in readers):
        raise ConfigError("give the documents: --text FILE, --syntax FILE.conllu or --coref GAP.tsv (or several)")
    return [doc for path, read in readers if path for doc in read(path, args.docs)]


def _check_source(args) -> bool:
    """Whether ``args.run`` is a Hugging Face model folder (its lens goes to ``--out``) rather than a run;
    refusals in one line before any model loads."""
    from pathlib import Path

    from aah_viz.runlog.paths import list_adapters, list_checkpoints

    if list_checkpoints(args.run) or list_adapters(args.run):
        for flag, value in (("--out", args.out), ("--regime", args.regime), ("--overwrite", args.overwrite)):
            if value:
                raise ConfigError(
                    f"{flag} is for a Hugging Face model folder's lens; a run's lens is written into the run"
                )
        return False
    if not (Path(args.run) / "config.json").is_file():
        raise ConfigError(
            f"{args.run} has no checkpoint or adapter to run: the lens needs a run of aah-viz train "
            "(with checkpoints) or of aah-viz retrofit, or a Hugging Face model folder with --out"
        )
    for flag, value in (("--model", args.model), ("--checkpoint", args.checkpoint), ("--restart", args.restart)):
        if value not in (None, False):
            raise ConfigError(f"{flag} is for a run's lens; {args.run} is a Hugging Face model folder")
    if not args.out:
        raise ConfigError(f"{args.run} is a Hugging Face model folder: give --out DIR, the new run its lens goes to")
    out = Path(args.out)
    if out.exists() and not args.overwrite and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists; give another folder or --overwrite")
    if out.resolve() == Path(args.run).resolve():
        raise ConfigError("--out must be a new folder, not the model folder itself")
    return True


def run(args) -> int:
    _positive("docs", args.docs)
    _positive("max-tokens", args.max_tokens, 2)
    _positive("top-k", args.top_k)
    docs = documents(args)  # bad input is refused before any model loads
    of_model = _check_source(args)
    from aah_viz.probes.lens_progress import LensInterrupted
    from aah_viz.torch_import import limit_threads, quiet_model_loading, require_torch

    require_torch()
    from instrumentation import (
        check_device,
        lens_progress,
        load_for_evaluation,
        longest_lens_document,
        record_lens,
        write_lens,
    )

    check_device(args.device)
    limit_threads(args.threads)
    if args.no_progress:
        quiet_model_loading()
    if of_model:
        regime = args.regime or MODEL_REGIME
        loaded = load_for_evaluation(args.run, regime=regime, device=args.device)
        saved = None  # nothing of it is written before the new run: an interrupted model folder's lens starts over
    else:
        loaded = load_for_evaluation(args.run, checkpoint=args.checkpoint, base_model=args.model, device=args.device)
        saved = lens_progress(loaded, docs, max_tokens=args.max_tokens, top_k=args.top_k, restart=args.restart)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(docs), desc="lens", unit="doc", disable=args.no_progress)  # shown on a pipe too, as probe's
    try:
        tables = record_lens(
            loaded, docs, max_tokens=args.max_tokens, top_k=args.top_k, progress=bar.update, saved=saved
        )
    except LensInterrupted as err:
        bar.close()  # before the one line
        print(f"aah-viz: {err}", file=sys.stderr)
        return 130
    bar.close()
    sources = sorted({d.source for d in docs})
    detail = {"sources": sources, "top_k": args.top_k, "max_tokens": args.max_tokens}
    replay = None
    if of_model:  # a new run: it names its documents and configuration, its step 0 the longest document's windows
        files = [str(f) for f in (args.text, args.syntax, args.coref) if f]
        detail.update(data=", ".join(files), regime=regime)
        replay = longest_lens_document(loaded, docs, args.max_tokens)
    out = write_lens(loaded, tables, out=args.out, overwrite=args.overwrite, replay=replay, **detail)
    n_rows = len(tables["attention_samples"]["query"])
    step = "" if of_model else f" at step {loaded.step}"
    print(f"lens written to {out}: {len(docs)} documents, {n_rows} (layer, head, query) rows{step}")
    if saved is not None:
        saved.clear()  # the run's tables hold it all now
    print(f"  open it: aah-viz dashboard --logs {out.parent}  (page Lens)")
    return 0
