"""``aah-viz bench probe``: the probe's time over the same model's plain forward passes on the same text."""

from __future__ import annotations

import argparse
import sys

from aah_viz.cli._json import json_text
from aah_viz.paired_timing import add_clock_argument, add_pairs_argument, check_pairs, resolve_clock


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "probe",
        help="probe time as a ratio to the same model's forward passes with attentions on the same text",
        description="Time `aah-viz probe`'s work (tokenising, aligning words, forward passes, scoring, bootstrap "
        "intervals) against the same model's forward passes with attentions on exactly the inputs the probe feeds "
        "it, in interleaved pairs, and print the median per-pair ratio with its 95% interval as JSON (goal: at "
        "most 1.5). Without a target, a freshly initialised tiny AAH model; without data, the bundled synthetic "
        "probe set.",
    )
    p.add_argument(
        "target",
        nargs="?",
        default=None,
        metavar="RUN_OR_MODEL",
        help="a run directory, a checkpoint .pt or a local Hugging Face model folder (default: a new tiny AAH model)",
    )
    p.add_argument("--syntax", metavar="FILE.conllu", default=None, help="CoNLL-U file (default: the bundled set)")
    p.add_argument("--coref", metavar="FILE", default=None, help="coreference file (default: the bundled set)")
    p.add_argument("--max-docs", type=int, default=None, metavar="N", help="read at most N documents of each input")
    p.add_argument(
        "--context",
        choices=("sentence", "document"),
        default="sentence",
        help="syntax inputs per sentence (default) or per document, as aah-viz probe",
    )
    p.add_argument("--batch-size", type=int, default=16, help="model inputs per forward pass (default: 16)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the probe (default: 1000)")
    add_pairs_argument(p, default=5)
    add_clock_argument(p)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1, steadier timings)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--json", action="store_true", help="print JSON (the only output format; accepted for symmetry)")
    p.set_defaults(func=run)


def _source(target, device: str):
    if target is None:
        import torch

        from instrumentation import AAHAttentionSource, AAHConfig, AAHTransformer

        torch.manual_seed(0)
        return AAHAttentionSource(AAHTransformer(AAHConfig.from_preset("tiny")), step=0, device=device)
    from aah_viz.probes.target import resolve_target
    from instrumentation import load_aah_checkpoint, load_hf_model

    resolved = resolve_target(target, None)
    if resolved.kind == "aah":
        return load_aah_checkpoint(resolved.model_path, device)
    return load_hf_model(resolved.model_path, device=device)


def run(args: argparse.Namespace) -> int:
    from aah_viz.probes.inputs import read_inputs
    from aah_viz.torch_import import limit_threads, require_torch

    check_pairs(args.pairs)
    syntax_docs, coref_docs, _, _ = read_inputs(args.syntax, args.coref, max_docs=args.max_docs)
    require_torch()
    limit_threads(args.threads)
    from instrumentation import bench_probe

    source = _source(args.target, args.device)
    from tqdm import tqdm

    with tqdm(total=args.pairs + 1, desc="bench probe (pairs)", file=sys.stderr) as bar:
        result = bench_probe(
            source,
            syntax_docs,
            coref_docs,
            context=args.context,
            batch_size=args.batch_size,
            n_boot=args.bootstrap,
            pairs=args.pairs,
            clock=resolve_clock(args.clock, args.device),
            progress=bar,
        )
    print(json_text(result, indent=None))
    return 0
