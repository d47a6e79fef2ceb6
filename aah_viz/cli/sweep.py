"""``aah-viz sweep``: every cell x seed of a factorial design, each in its own run directory under one logs root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aah_viz.cli._json import json_text
from aah_viz.cli._options import add_output_options


def register(subparsers) -> None:
    from aah_viz.sweep.executors import EXECUTORS

    p = subparsers.add_parser(
        "sweep",
        help="run a factorial design (TOML) over seeds: every cell x seed a run, resumable, on this machine, "
        "Ray or Slurm",
        description="Run every cell x seed of a design file as aah-viz train (or retrofit or frontier on a model "
        "folder), each into --logs/CELL__seed-S. Finished trials are skipped, interrupted ones resumed (train "
        "--resume). See docs/ablations.md.",
    )
    p.add_argument(
        "design", help="the design file (TOML): the command its cells run, factors and levels, seeds, fixed settings"
    )
    p.add_argument("--logs", required=True, help="the logs root that holds one run directory per trial")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: worker processes here (default); ray: Ray tasks; slurm: job arrays via submitit",
    )
    p.add_argument("--workers", type=int, default=1, help="trials run at once (default: 1)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (and, on ray/slurm, CPUs requested) of each trial (default: local, this machine's "
        "cores over --workers; ray and slurm, 1)",
    )
    p.add_argument(
        "--gpus-per-trial",
        type=float,
        default=0,
        help='GPUs each trial requests (ray, slurm); set device = "cuda" in [fixed] to use them',
    )
    p.add_argument(
        "--address", default=None, help="ray: the address of an existing Ray cluster (default: a local Ray runtime)"
    )
    p.add_argument("--slurm-partition", default=None, help="slurm: the partition to submit to")
    p.add_argument(
        "--slurm-timeout-min",
        type=int,
        default=24 * 60,
        help="slurm: the time limit of each trial in minutes (default: 1440)",
    )
    p.add_argument(
        "--submitit-cluster",
        choices=("slurm", "local", "debug"),
        default="slurm",
        help="slurm: submitit's executor; local runs the job arrays on this machine (for trying a design out)",
    )
    p.add_argument(
        "--allow-changed-design",
        action="store_true",
        help="run a design other than the one --logs was started with (finished runs it keeps are kept)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the trials and what each needs; run nothing")
    add_output_options(p, "print a JSON summary at the end")
    p.set_defaults(func=run)


def check_against_model(design) -> None:
    """Every setting an argument of the cells' command or a model config key, every cell a valid model config
    (train) or a model folder that is there (retrofit, frontier): before any run."""
    import dataclasses

    from aah_viz.errors import ConfigError
    from aah_viz.sweep.commands import cell_arguments
    from aah_viz.sweep.design import DesignError
    from aah_viz.sweep.vocabulary import MODEL, command_misfit
    from instrumentation import AAHConfig

    known = {f.name for f in dataclasses.fields(AAHConfig)}
    places = [("[fixed]", design.fixed)] + [
        (f"factor {f.name!r} level {level!r}", f.level(level).settings) for f in design.factors for level in f.levels
    ]
    for where, settings in places:
        for key in settings:
            why = command_misfit(design.command, key, known)
            if why:
                raise DesignError(f"{where} sets {key!r}, {why} (command = {design.command!r})")
    for cell in design.cells:
        settings = design.settings(cell)
        if design.command != "train":  # the model folder's own config is read when the trial starts
            folder = Path(str(settings[MODEL]))
            if not (folder / "config.json").is_file():
                raise DesignError(f"cell {cell.label()}: model {folder} is not a model folder (no config.json there)")
            continue
        _, _, overrides = cell_arguments(design, cell)
        if settings.get("window") is not None:
            overrides["window"] = settings["window"]
        try:
            AAHConfig.from_preset(
                str(settings.get("preset", "tiny")), regime=str(settings.get("regime", "full_adaptive")), **overrides
            )
        except (ConfigError, TypeError, ValueError) as err:
            raise DesignError(f"cell {cell.label()}: {err}") from None


def run(args) -> int:
    from aah_viz.errors import ConfigError
    from aah_viz.sweep import executors, plan
    from aah_viz.sweep.design import load_design
    from aah_viz.sweep.progress import SweepProgress
    from aah_viz.torch_import import require_torch

    for flag, value in (("--workers", args.workers), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be an integer >= 1, got {value}")
    if args.gpus_per_trial < 0:
        raise ConfigError(f"--gpus-per-trial must be >= 0, got {args.gpus_per_trial}")
    design = load_design(args.design)
    logs = Path(args.logs)
    if logs.exists() and not logs.is_dir():
        raise ConfigError(f"--logs {logs} is not a folder")
    plan.check_design_record(design, logs, allow_changed=args.allow_changed_design)
    require_torch()
    check_against_model(design)
    # here: the cores shared by the workers; on a cluster this machine's cores say nothing: one unless asked
    threads = args.threads or (max(1, (os.cpu_count() or 1) // args.workers) if args.executor == "local" else 1)
    trials = plan.plan_trials(design, logs, threads=threads)
    counts = {state: sum(t.state == state for t in trials) for state in plan.STATES}
    if args.dry_run:
        for t in trials:
            print(f"{t.state:6}  {t.name}" + (f"  aah-viz {' '.join(t.argv)}" if t.argv else ""))
        print(f"{len(trials)} trials: {counts['done']} done, {counts['resume']} to resume, {counts['new']} new")
        return 0
    plan.write_design_record(design, logs)
    todo = [t for t in trials if t.state != "done"]
    progress = SweepProgress(len(trials), already_done=counts["done"], workers=args.workers, show=not args.no_progress)
    try:
        if args.executor == "local":
            executors.run_local(todo, workers=args.workers, threads=threads, on_event=progress.event)
        elif args.executor == "ray":
            executors.run_ray(
                todo,
                workers=args.workers,
                threads=threads,
                gpus=args.gpus_per_trial,
                address=args.address,
                on_event=progress.event,
            )
        else:
            executors.run_slurm(
                todo,
                workers=args.workers,
                threads=threads,
                gpus=int(args.gpus_per_trial),
                folder=logs.resolve() / plan.STATE_DIR / "submitit",
                cluster=args.submitit_cluster,
                partition=args.slurm_partition,
                timeout_min=args.slurm_timeout_min,
                on_event=progress.event,
            )
    finally:
        progress.close()
    after = plan.plan_trials(design, logs)  # the run directories say what is finished, not the exit codes
    unfinished = [t for t in after if t.state != "done"]
    summary = {
        "logs": str(logs),
        "design": design.fingerprint(),
        "trials": len(after),
        "done": len(after) - len(unfinished),
        "ran": len(todo),
        "unfinished": [t.name for t in unfinished],
    }
    if args.json:
        print(json_text(summary))
    if unfinished:
        first = unfinished[0]
        print(
            f"aah-viz: error: {len(unfinished)} of {len(after)} trials did not finish ({first.name}"
            f"{', ...' if len(unfinished) > 1 else ''}; its output: {first.log_path}); run the same command "
            "again to resume them",
            file=sys.stderr,
        )
        return 2
    if not args.json:
        print(f"sweep finished: {len(after)} trials in {logs}\nnext: aah-viz effects {logs} --design {args.design}")
    return 0
