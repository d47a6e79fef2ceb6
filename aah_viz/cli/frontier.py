"""``aah-viz frontier``: perplexity against compute for one pretrained model, every configuration on the same blocks."""

from __future__ import annotations

import argparse
import json

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options
from aah_viz.cli.evaluate import sink_tokens_arg, windows_arg
from aah_viz.cli.train import add_overrides_argument


def seeds_arg(text: str) -> tuple[int, ...]:
    """``--adapt-seeds 1,2``: distinct non-negative seeds."""
    try:
        values = tuple(sorted({int(k) for k in text.replace(",", " ").split()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects non-negative integer seeds, e.g. 1,2; got {text!r}") from None
    if not values or min(values) < 0 or max(values) >= 2**32:
        raise argparse.ArgumentTypeError(f"expects non-negative integer seeds below 2**32, e.g. 1,2; got {text!r}")
    return values


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "frontier",
        help="perplexity against compute (ACR) of a pretrained model: static windows, per-head profiled windows, "
        "AAH zero-shot and adapted, all on the same held-out blocks",
        description="Split --data by lines into an adaptation text and a held-out evaluation text (its last "
        "--eval-share of characters), then evaluate on the same held-out blocks: the unpatched model, the "
        "full-attention patch, a static sliding window at each candidate window, every head at the smallest "
        "candidate window keeping 95% of its attention mass (profiled on the adaptation text), the AAH regimes "
        "zero-shot, and, with --adapt-steps, after that many steps of aah-viz retrofit on the adaptation text "
        "(each a retrofit run beside --out). Every configuration is an inference event of the run in --out: "
        "perplexity with a bootstrap interval over blocks, ACR, causal coverage, realised work, and speed as a "
        "paired ratio to the unpatched model. Run it again with the same settings to continue after an "
        "interruption. aah-viz export --table frontier and the dashboard's Frontier view read it. "
        "See docs/real-model.md.",
    )
    p.add_argument("model_dir", help="a local Hugging Face model folder (aah-viz import-gguf makes one from GGUF)")
    p.add_argument("--data", required=True, help="plain-text (UTF-8) file: adaptation text, then held-out text")
    p.add_argument("--out", required=True, help="run directory for the frontier (continued when it exists)")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per block T (default: 512)")
    p.add_argument("--windows", type=windows_arg, default=None, help="candidate windows (default: T/8, T/4, T/2, T)")
    p.add_argument(
        "--adapt-steps", type=int, default=0, help="retrofit steps per AAH regime; 0: no adapted rows (default: 0)"
    )
    p.add_argument(
        "--regimes",
        default="full_adaptive,grouping_off,fixed_random_grouping",
        help="AAH regimes, comma-separated (default: full_adaptive,grouping_off,fixed_random_grouping); a second "
        "call on the same --out with further regimes adds theirs to the frontier",
    )
    p.add_argument("--eval-blocks", type=int, default=32, help="held-out blocks every configuration sees (default: 32)")
    p.add_argument(
        "--eval-share", type=float, default=0.1, help="share of the text held out for evaluation (default: 0.1)"
    )
    p.add_argument(
        "--profile-blocks", type=int, default=8, help="adaptation blocks the per-head profile reads (default: 8)"
    )
    p.add_argument("--timing-pairs", type=int, default=5, help="paired forwards per speed ratio (default: 5)")
    p.add_argument("--adapt-lr", type=float, default=1e-4, help="peak learning rate of the adaptation (default: 1e-4)")
    add_overrides_argument(
        p,
        "an AAH config key of the routed regimes, zero-shot and adapted (repeatable), e.g. --set "
        "feature_normalization=zscore; static windows and the profiled assignment are not routed",
    )
    p.add_argument(
        "--sink-tokens",
        type=sink_tokens_arg,
        default=(),
        help="for each k given (e.g. 1,4), also the rows that keep the first k positions visible to every query: "
        "sliding windows + k sinks, the profiled per-head windows at 95%% and 90%% of the mass with the sinks "
        "counted as kept, and each AAH regime with k sinks, zero-shot and adapted (default: none); a second call "
        "on the same --out may add further k",
    )
    p.add_argument(
        "--retrieval",
        type=int,
        default=0,
        metavar="N",
        help="also ask every configuration N passkey questions at each of five depths (a five-digit key hidden "
        "in filler, prompts a block long) and report the share it answers with Wilson's interval (default: 0, "
        "none); a second call on the same --out with N asks the configurations evaluated before",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the AAH parameters and batch order (default: 0)")
    p.add_argument(
        "--adapt-seeds",
        type=seeds_arg,
        default=(),
        metavar="S,S",
        help="further seeds of every adapted row beside --seed (e.g. 1,2): each adaptation again from that seed, "
        "a row REGIME_adapted[_sinkK]_seedS, so the spread over seeds is measured; a second call on the same "
        "--out may add seeds (default: none)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--overwrite", action="store_true", help="start the frontier in --out afresh")
    add_output_options(p, "print the frontier table as JSON", progress_help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import require_torch

    require_torch()
    from instrumentation import FrontierConfig, run_frontier

    fc = FrontierConfig(
        model_dir=args.model_dir,
        data=args.data,
        out=args.out,
        seq_len=args.seq_len,
        windows=args.windows,
        adapt_steps=args.adapt_steps,
        regimes=tuple(r.strip() for r in args.regimes.split(",") if r.strip()),
        eval_blocks=args.eval_blocks,
        eval_share=args.eval_share,
        profile_blocks=args.profile_blocks,
        timing_pairs=args.timing_pairs,
        adapt_lr=args.adapt_lr,
        seed=args.seed,
        threads=args.threads,
        device=args.device,
        progress=not args.no_progress,
        overwrite=args.overwrite,
        aah_overrides=dict(args.overrides),
        sink_tokens=tuple(args.sink_tokens),
        retrieval=args.retrieval,
        adapt_seeds=tuple(args.adapt_seeds),
    )
    result = run_frontier(fc)
    table = result["table"]
    if args.json:
        print(json_text(json.loads(table.to_json(orient="records")), indent=2))
        return 0
    shown = table[["configuration", "ppl", "ppl_lo", "ppl_hi", "acr", "acr_causal", "speed_vs_unpatched", "pareto"]]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(
        f"frontier written to {result['run_dir']} ({result['configurations']} configurations); "
        f"aah-viz export {result['run_dir']} --table frontier --format md"
    )
    return 0
