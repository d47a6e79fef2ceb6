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

With ``report_every`` N > 0 a third identical model trains in the same rotation, recorded the same way
and also reporting its ``aah/`` scalars every N steps (a trainer's logging cadence) to ``report_to``
(``tensorboard``: real event files beside the run; ``none``: the scalars computed, sent nowhere). Its
figures sit under ``reported`` beside the recorded ones: the same ratios and cost fraction with the
reporting inside the timed steps, ``reporting_cost_fraction`` (the reporting calls' own CPU time per
step over the median plain step) and ``overhead_change`` (reported minus recorded, medians and cost
fractions; the reporting path must keep it under 0.01).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from aah_viz.paired_timing import paired_report
from aah_viz.reporting.reporter import Reporter, ReportSettings
from aah_viz.reporting.sinks import open_sinks
from aah_viz.runlog.paths import TENSORBOARD_DIR, run_entry
from instrumentation import data as data_mod
from instrumentation.config import AAHConfig
from instrumentation.model import AAHTransformer
from instrumentation.recorder import Recording, RoutingRecorder


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
    report_every: int = 0,
    report_to: str = "tensorboard",
) -> dict:
    """Step-time and CPU-time ratios of a recorded vs a plain model (and a reporting one), bytes per step."""
    cfg = AAHConfig.from_preset(preset, regime=regime)
    names = ["recorded", "plain"] + (["reported"] if report_every > 0 else [])
    models, opts = [], []
    for _ in names:
        torch.manual_seed(seed)
        model = AAHTransformer(cfg)
        models.append(model)
        opts.append(torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1))
    n_docs = max(20, steps * batch_size * (cfg.block_size + 1) // 1100 + 10)
    splits = data_mod.split_blocks(data_mod.load_token_stream(seed=0, n_docs=n_docs), cfg.block_size)
    tmp = tempfile.TemporaryDirectory(prefix="aah-bench-hooks-")
    run_dir = Path(out) if out else Path(tmp.name) / "run"
    times = {n: [] for n in names}
    cpu = {n: [] for n in names}
    tokens = batch_size * cfg.block_size
    rec_args = dict(flush_every=flush_every, seed=seed, preset=preset, steps=steps)  # of each Recording
    reporting = {"s": 0.0, "cpu_s": 0.0, "n": 0}
    with tmp, RoutingRecorder(models[0], Recording(run_dir, detail, **rec_args)) as rec:
        rep_rec = reporter = None
        if report_every > 0:
            rep_dir = run_dir.parent / f"{run_dir.name}-reported"
            rep_rec = RoutingRecorder(models[2], Recording(rep_dir, detail, **rec_args)).attach()
            targets = () if report_to == "none" else (report_to,)
            sinks = open_sinks(targets, tensorboard_dir=run_entry(rep_dir, TENSORBOARD_DIR), run_name=rep_dir.name)
            reporter = Reporter(ReportSettings(targets, every=report_every), sinks)
        try:
            for step in range(steps):
                x, y = data_mod.training_batch(splits, step, batch_size, seed=seed)
                # rotate which variant goes first
                order = [(step + k) % len(names) for k in range(len(names))]
                rng = torch.get_rng_state()
                for which in order:
                    torch.set_rng_state(rng)  # the same dropout masks: the models stay identical, routing included
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
                    elif which == 2:
                        rep_rec.step(step, loss=loss, lr=3e-4, tokens=tokens)
                        if reporter.due(step, step == steps - 1):
                            r0, rc0 = time.perf_counter(), time.thread_time()
                            reporter.scalars(step, rep_rec.routing_rows(), **{"train/loss": float(loss.detach())})
                            reporting["s"] += time.perf_counter() - r0
                            reporting["cpu_s"] += time.thread_time() - rc0
                            reporting["n"] += 1
                    elapsed, cpu_s = time.perf_counter() - t0, time.thread_time() - c0
                    times[names[which]].append(elapsed)
                    cpu[names[which]].append(cpu_s)
        finally:
            if reporter is not None:
                reporter.close()
            if rep_rec is not None:
                rep_rec.detach()
        rec.detach()
        written = _folder_bytes(run_dir)
        writer_cpu = rec.write_cpu_s
        hot_path = rec.hot_path_s
        rep_cost = (rep_rec.write_cpu_s, rep_rec.hot_path_s) if rep_rec is not None else None
    rec_t = times["recorded"][skip:]
    plain_t = times["plain"][skip:]
    med_rec, med_plain = statistics.median(rec_t), statistics.median(plain_t)
    measured = {
        which: [{"wall": w, "cpu": c} for w, c in zip(times[which][skip:], cpu[which][skip:])]
        for which in ("recorded", "plain")
    }
    key = "recorded_vs_plain_step"
    pairs = {key: (measured["recorded"], measured["plain"])}
    sides = {key: ("recorded", "plain")}
    if report_every > 0:
        measured["reported"] = [{"wall": w, "cpu": c} for w, c in zip(times["reported"][skip:], cpu["reported"][skip:])]
        pairs["reported_vs_plain_step"] = (measured["reported"], measured["plain"])
        sides["reported_vs_plain_step"] = ("reported", "plain")
    paired = paired_report(pairs, sides=sides, clock=clock)
    cpu_rec = statistics.median(cpu["recorded"][skip:]) + writer_cpu / steps
    cpu_plain = statistics.median(cpu["plain"][skip:])
    upd = [
        i for i in range(skip, steps) if i >= cfg.warmup_steps and (i - cfg.warmup_steps) % cfg.control_interval == 0
    ]
    result = {
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
    if report_every > 0:
        result["reported"] = _reported_figures(
            times, cpu, skip, steps, med_plain, cpu_plain, rep_cost, reporting, result, paired, report_every, report_to
        )
    return result


def _reported_figures(times, cpu, skip, steps, med_plain, cpu_plain, rep_cost, reporting, result, paired, every, to):
    """The reporting variant's figures beside the recorded one's, and how far reporting moves them."""
    med_rep = statistics.median(times["reported"][skip:])
    writer_cpu, hot_path = rep_cost
    # the reporting calls' CPU time: their wall time also holds waits for the recorder's writer thread
    # (whose flush may fall on a reporting step), which writer_cpu already counts
    cost = (hot_path + writer_cpu + reporting["cpu_s"]) / steps / med_plain
    report_fraction = reporting["cpu_s"] / steps / med_plain
    step_ratio = med_rep / med_plain
    pair = paired["ratios"].get("reported_vs_plain_step", {}).get("median")
    recorded_pair = paired["ratios"].get("recorded_vs_plain_step", {}).get("median")
    return {
        "report_every": every,
        "report_to": to,
        "reports": reporting["n"],
        "reporting_s_per_report": round(reporting["s"] / max(reporting["n"], 1), 6),
        "reporting_cpu_s_per_report": round(reporting["cpu_s"] / max(reporting["n"], 1), 6),
        "reporting_cost_fraction": round(report_fraction, 5),
        "step_time_ratio": round(step_ratio, 4),
        "cpu_time_ratio": round((statistics.median(cpu["reported"][skip:]) + writer_cpu / steps) / cpu_plain, 4),
        "recorder_cost_fraction": round(cost, 5),
        "median_step_s_reported": round(med_rep, 5),
        "mean_step_s_reported": round(statistics.fmean(times["reported"][skip:]), 5),
        "overhead_change": {
            "paired_median_ratio": None if pair is None or recorded_pair is None else round(pair - recorded_pair, 4),
            "step_time_ratio": round(step_ratio - result["step_time_ratio"], 4),
            "cost_fraction": round(cost - result["recorder_cost_fraction"], 5),
        },
    }
