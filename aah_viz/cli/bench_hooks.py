"""``aah-viz bench hooks``: what the recorder costs a training step.

Two identical models (same seed, same batches, the same dropout masks, hence the same routing)
train side by side in one process, one step each in turn: one with a ``RoutingRecorder``
attached (the recorder's ``step`` call and its flushes are inside the timed region), one
without. ``step_time_ratio`` is the median wall time of a recorded step over the median plain
step. The recorder writes its segments from a worker thread, so
``cpu_time_ratio`` adds that thread's CPU time per step to the recorded steps' CPU time: a
measure of the whole cost that other processes' load on a shared machine does not disturb.
``recorder_cost_fraction`` is the recorder's own time (its event callbacks and ``step`` calls
on the training thread, timed by the recorder itself, plus the writer thread's CPU time) per
step over the median plain step: the same cost without the noise of a shared machine.
``bytes_per_step`` is the size of the run directory written, per step.
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
    p.add_argument(
        "--preset", default="small", choices=("tiny", "small", "paper-1b"), help="model size (default: small)"
    )
    p.add_argument("--regime", default="full_adaptive", help="routing regime (default: full_adaptive)")
    p.add_argument(
        "--detail", default="full", choices=("full", "light", "minimal"), help="recorder detail (default: full)"
    )
    p.add_argument("--steps", type=int, default=100, help="timed steps per variant (default: 100)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the medians (default: 5)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=4,
        help="sequences per step (default: 4, what aah-viz train uses at the small preset)",
    )
    p.add_argument("--flush-every", type=int, default=50, help="recorder flush cadence in steps (default: 50)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1, steadier timings)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--out", default=None, help="keep the recorded run in this new folder (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print JSON (the only output format; accepted for symmetry)")
    p.set_defaults(func=run)


def run(args) -> int:
    from aah_viz.torch_import import require_torch

    torch = require_torch()
    result = measure(args, torch)
    print(json.dumps(result, indent=None))
    return 0


def _bootstrap_ci(values: list[float], seed: int, n: int = 2000) -> list[float]:
    """95% bootstrap interval of the median of ``values``."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(arr[rng.integers(0, len(arr), size=(n, len(arr)))], axis=1)
    return [round(float(np.percentile(meds, 2.5)), 4), round(float(np.percentile(meds, 97.5)), 4)]


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
    cpu = {"recorded": [], "plain": []}
    tokens = args.batch_size * cfg.block_size
    with (
        tmp,
        RoutingRecorder(
            models[0],
            run_dir,
            args.detail,
            flush_every=args.flush_every,
            seed=args.seed,
            preset=args.preset,
            steps=args.steps,
        ) as rec,
    ):
        for step in range(args.steps):
            x, y = data_mod.training_batch(splits, step, args.batch_size, seed=args.seed)
            order = (0, 1) if step % 2 == 0 else (1, 0)  # alternate which variant goes first
            rng = torch.get_rng_state()
            for which in order:
                torch.set_rng_state(rng)  # the same dropout masks: both models stay identical, routing included
                model, opt = models[which], opts[which]
                t0, c0 = time.perf_counter(), time.thread_time()
                model.train()
                model.set_step(step)
                opt.zero_grad(set_to_none=True)
                loss = model(x, targets=y).loss
                loss.backward()
                opt.step()
                if which == 0:
                    rec.step(step, loss=loss, lr=3e-4, tokens=tokens)
                elapsed, cpu_s = time.perf_counter() - t0, time.thread_time() - c0
                times["recorded" if which == 0 else "plain"].append(elapsed)
                cpu["recorded" if which == 0 else "plain"].append(cpu_s)
        rec.detach()
        written = _folder_bytes(run_dir)
        writer_cpu = rec.write_cpu_s
        hot_path = rec.hot_path_s
    rec_t = times["recorded"][args.skip :]
    plain_t = times["plain"][args.skip :]
    med_rec, med_plain = statistics.median(rec_t), statistics.median(plain_t)
    pair_ratios = [a / b for a, b in zip(rec_t, plain_t)]
    cpu_rec = statistics.median(cpu["recorded"][args.skip :]) + writer_cpu / args.steps
    cpu_plain = statistics.median(cpu["plain"][args.skip :])
    upd = [
        i
        for i in range(args.skip, args.steps)
        if i >= cfg.warmup_steps and (i - cfg.warmup_steps) % cfg.control_interval == 0
    ]
    return {
        "step_time_ratio": round(med_rec / med_plain, 4),
        "cpu_time_ratio": round(cpu_rec / cpu_plain, 4),
        "recorder_cost_fraction": round((hot_path + writer_cpu) / args.steps / med_plain, 5),
        "bytes_per_step": round(written / args.steps, 1),
        "median_step_s_recorded": round(med_rec, 5),
        "median_step_s_plain": round(med_plain, 5),
        "median_paired_ratio": round(statistics.median(pair_ratios), 4),
        "mean_step_s_recorded": round(statistics.fmean(rec_t), 5),
        "mean_step_s_plain": round(statistics.fmean(plain_t), 5),
        "median_cpu_s_recorded": round(cpu_rec, 5),
        "median_cpu_s_plain": round(cpu_plain, 5),
        "writer_cpu_s_per_step": round(writer_cpu / args.steps, 6),
        "hot_path_s_per_step": round(hot_path / args.steps, 6),
        "paired_ratio_ci95": _bootstrap_ci(pair_ratios, args.seed),
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
