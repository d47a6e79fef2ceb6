"""What the recorder costs a training step (``aah-viz bench hooks``).

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
``bytes_per_step`` is the size of the run directory written, per step. ``ratios.recorded_vs_plain_step``
is the median of the per-step-pair ratios with a bootstrap 95% interval (``aah_viz.paired_timing``;
its ``cpu`` clock is the training thread's CPU time, the writer thread's share is in ``cpu_time_ratio``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from aah_viz.paired_timing import paired_report
from instrumentation import data as data_mod
from instrumentation.config import AAHConfig
from instrumentation.model import AAHTransformer
from instrumentation.recorder import RoutingRecorder


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet") if not f.name.startswith((".", "_")))


def bench_hooks(
    *,
    preset: str = "small",
    regime: str = "full_adaptive",
    detail: str = "full",
    steps: int = 100,
    skip: int = 5,
    batch_size: int = 4,
    flush_every: int = 50,
    seed: int = 0,
    out: str | Path | None = None,
    clock: str = "cpu",
) -> dict:
    """Step-time and CPU-time ratios of a recorded vs a plain model, and bytes written per step."""
    cfg = AAHConfig.from_preset(preset, regime=regime)
    models, opts = [], []
    for _ in range(2):
        torch.manual_seed(seed)
        model = AAHTransformer(cfg)
        models.append(model)
        opts.append(torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1))
    n_docs = max(20, steps * batch_size * (cfg.block_size + 1) // 1100 + 10)
    splits = data_mod.split_blocks(data_mod.load_token_stream(seed=0, n_docs=n_docs), cfg.block_size)
    tmp = tempfile.TemporaryDirectory(prefix="aah-bench-hooks-")
    run_dir = Path(out) if out else Path(tmp.name) / "run"
    times = {"recorded": [], "plain": []}
    cpu = {"recorded": [], "plain": []}
    tokens = batch_size * cfg.block_size
    with (
        tmp,
        RoutingRecorder(
            models[0],
            run_dir,
            detail,
            flush_every=flush_every,
            seed=seed,
            preset=preset,
            steps=steps,
        ) as rec,
    ):
        for step in range(steps):
            x, y = data_mod.training_batch(splits, step, batch_size, seed=seed)
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
    rec_t = times["recorded"][skip:]
    plain_t = times["plain"][skip:]
    med_rec, med_plain = statistics.median(rec_t), statistics.median(plain_t)
    measured = {
        which: [{"wall": w, "cpu": c} for w, c in zip(times[which][skip:], cpu[which][skip:])]
        for which in ("recorded", "plain")
    }
    key = "recorded_vs_plain_step"
    paired = paired_report(
        {key: (measured["recorded"], measured["plain"])}, sides={key: ("recorded", "plain")}, clock=clock
    )
    cpu_rec = statistics.median(cpu["recorded"][skip:]) + writer_cpu / steps
    cpu_plain = statistics.median(cpu["plain"][skip:])
    upd = [
        i for i in range(skip, steps) if i >= cfg.warmup_steps and (i - cfg.warmup_steps) % cfg.control_interval == 0
    ]
    return {
        "clock": clock,
        "ratios": paired["ratios"],
        "ratios_by_clock": paired["ratios_by_clock"],
        "warnings": paired["warnings"],
        "step_time_ratio": round(med_rec / med_plain, 4),
        "cpu_time_ratio": round(cpu_rec / cpu_plain, 4),
        "recorder_cost_fraction": round((hot_path + writer_cpu) / steps / med_plain, 5),
        "bytes_per_step": round(written / steps, 1),
        "median_step_s_recorded": round(med_rec, 5),
        "median_step_s_plain": round(med_plain, 5),
        "mean_step_s_recorded": round(statistics.fmean(rec_t), 5),
        "mean_step_s_plain": round(statistics.fmean(plain_t), 5),
        "median_cpu_s_recorded": round(cpu_rec, 5),
        "median_cpu_s_plain": round(cpu_plain, 5),
        "writer_cpu_s_per_step": round(writer_cpu / steps, 6),
        "hot_path_s_per_step": round(hot_path / steps, 6),
        "raw_s": paired["raw_s"],
        "update_steps_timed": len(upd),
        "steps": steps,
        "skipped": skip,
        "preset": preset,
        "regime": regime,
        "detail": detail,
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "bytes_total": written,
    }
