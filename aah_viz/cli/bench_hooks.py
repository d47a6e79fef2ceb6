"""``aah-viz bench hooks``: what the recorder costs a training step.

Two identical models (same seed, same batches) train side by side in one process, one step each
in turn: one with a ``RoutingRecorder`` attached (the recorder's ``step`` call and its flushes are
inside the timed region), one without. The step-time ratio is the median recorded step over the
median plain step; the run directory written gives the bytes per step.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hooks",
        help="recorder overhead: step time with and without the recorder, and bytes written per step",
        description="Train the same model twice, interleaved step by step, with and without the routing "
        "recorder, and print the step-time ratio (medians) and the bytes written per step as JSON.",
    )
    p.add_argument("--preset", default="small", choices=("tiny", "small", "paper-1b"), help="model size (default: small)")
    p.add_argument("--regime", default="full_adaptive", help="routing regime (default: full_adaptive)")
    p.add_argument("--detail", default="full", choices=("full", "light", "minimal"), help="recorder detail (default: full)")
    p.add_argument("--steps", type=int, default=60, help="timed steps per variant (default: 60)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the medians (default: 5)")
    p.add_argument("--batch-size", type=int, default=4, help="sequences per step (default: 4)")
    p.add_argument("--flush-every", type=int, default=50, help="recorder flush cadence in steps (default: 50)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1, steadier timings)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--out", default=None, help="keep the recorded run here (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print JSON (the only output format; accepted for symmetry)")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import require_torch

    torch = require_torch()
    result = measure(args, torch)
    print(json.dumps(result, indent=None))
    return 0


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet") if not f.name.startswith((".", "_")))


def measure(args, torch) -> dict:
    from instrumentation import data as data_mod
    from instrumentation.config import AAHConfig
    from instrumentation.model import AAHTransformer
    from instrumentation.recorder import RoutingRecorder

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = AAHConfig.from_preset(args.preset, regime=args.regime)
    models, opts = [], []
    for _ in range(2):
        torch.manual_seed(args.seed)
        model = AAHTransformer(cfg)
        models.append(model)
        opts.append(torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1))
    n_docs = max(20, args.steps * args.batch_size * (cfg.block_size + 1) // 1100 + 10)
    splits = data_mod.split_blocks(data_mod.load_token_stream(seed=0, n_docs=n_docs), cfg.block_size)
    tmp = tempfile.TemporaryDirectory(prefix="aah-bench-hooks-")
    run_dir = Path(args.out) if args.out else Path(tmp.name) / "run"
    times = {"recorded": [], "plain": []}
    tokens = args.batch_size * cfg.block_size
    with tmp, RoutingRecorder(models[0], run_dir, args.detail, flush_every=args.flush_every, seed=args.seed,
                              preset=args.preset, steps=args.steps, overwrite=bool(args.out)) as rec:
        for step in range(args.steps):
            x, y = data_mod.training_batch(splits, step, args.batch_size, seed=args.seed)
            order = (0, 1) if step % 2 == 0 else (1, 0)  # alternate which variant goes first
            for which in order:
                model, opt = models[which], opts[which]
                t0 = time.perf_counter()
                model.train()
                model.set_step(step)
                opt.zero_grad(set_to_none=True)
                loss = model(x, targets=y).loss
                loss.backward()
                opt.step()
                if which == 0:
                    rec.step(step, loss=loss, lr=3e-4, tokens=tokens)
                elapsed = time.perf_counter() - t0
                times["recorded" if which == 0 else "plain"].append(elapsed)
        rec.detach()
        written = _folder_bytes(run_dir)
    rec_t = times["recorded"][args.skip:]
    plain_t = times["plain"][args.skip:]
    med_rec, med_plain = statistics.median(rec_t), statistics.median(plain_t)
    pair_ratios = [a / b for a, b in zip(rec_t, plain_t)]
    upd = [i for i in range(args.skip, args.steps) if i >= cfg.warmup_steps and (i - cfg.warmup_steps) % cfg.control_interval == 0]
    return {
        "step_time_ratio": round(med_rec / med_plain, 4),
        "bytes_per_step": round(written / args.steps, 1),
        "median_step_s_recorded": round(med_rec, 5),
        "median_step_s_plain": round(med_plain, 5),
        "median_paired_ratio": round(statistics.median(pair_ratios), 4),
        "mean_step_s_recorded": round(statistics.fmean(rec_t), 5),
        "mean_step_s_plain": round(statistics.fmean(plain_t), 5),
        "update_steps_timed": len(upd),
        "steps": args.steps,
        "skipped": args.skip,
        "preset": args.preset,
        "regime": args.regime,
        "detail": args.detail,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "bytes_total": written,
    }
