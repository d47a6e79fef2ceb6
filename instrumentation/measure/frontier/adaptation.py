"""The frontier's adapted rows: a retrofit run of each regime beside the frontier run, reused when it was
made with the same settings on the same text, continued when it was interrupted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from aah_viz.errors import RunLogError
from aah_viz.runlog.paths import is_run
from instrumentation.measure.frontier.plan import FrontierConfig, adapt_run_dir, file_sha256


def adaptation_settings(rc) -> dict:
    """What an adaptation run must have been made with to be reused: model, data (its hash), lr, steps,
    seed, windows, block length, batch size and the --set keys."""
    return {
        "model_dir": str(Path(rc.model_dir).resolve()),
        "regime": rc.regime,
        "windows": [int(w) for w in rc.windows],
        "steps": int(rc.steps),
        "seed": int(rc.seed),
        "lr": float(rc.lr),
        "batch_size": int(rc.batch_size),
        "seq_len": int(rc.seq_len),
        "overrides": dict(sorted(rc.overrides.items())),
    }


def recorded_adaptation_settings(manifest: dict) -> tuple[dict, str | None]:
    """The settings an adaptation run's manifest records (as ``adaptation_settings``) and its data hash."""
    args = manifest.get("retrofit") if isinstance(manifest.get("retrofit"), dict) else {}
    data = manifest.get("data") if isinstance(manifest.get("data"), dict) else {}
    keys = ("model_dir", "regime", "windows", "steps", "seed", "lr", "batch_size", "seq_len", "overrides")
    got = {k: args.get(k) for k in keys}
    if isinstance(got["model_dir"], str):
        got["model_dir"] = str(Path(got["model_dir"]).resolve())
    if isinstance(got["overrides"], dict):
        got["overrides"] = dict(sorted(got["overrides"].items()))
    return got, data.get("sha256")


ADAPT_EVALUATIONS = 10  # validation points along an adaptation: its curve on the Frontier page


def adapted_adapter(
    fc: FrontierConfig,
    regime: str,
    adapt_text: Path,
    out: Path,
    model_dir: str,
    sinks: int = 0,
    seed: int | None = None,
) -> Path:
    """The final adapter of ``regime`` (with ``sinks``, from ``seed``, default --seed) after ``adapt_steps``:
    reused only when its run was made with these settings on this text; continued when it was interrupted;
    made afresh under --overwrite."""
    from aah_viz.runlog import read_manifest
    from aah_viz.runlog.paths import list_adapters
    from instrumentation.retrofit.adapt import RetrofitConfig, adapt

    run_dir = adapt_run_dir(out, regime, sinks, seed)
    rc = RetrofitConfig(
        model_dir=model_dir,
        out=str(run_dir),
        data=str(adapt_text),
        regime=regime,
        windows=fc.candidate_windows(),
        steps=fc.adapt_steps,
        seed=fc.seed if seed is None else int(seed),
        train="aah",
        batch_size=fc.adapt_batch_size,
        seq_len=fc.seq_len,
        lr=fc.adapt_lr,
        eval_interval=max(1, fc.adapt_steps // ADAPT_EVALUATIONS),
        eval_batches=2,
        keep_checkpoints=1,
        checkpoint_interval=max(1, fc.adapt_steps // 4),
        device=fc.device,
        threads=fc.threads,
        progress=fc.progress,
        overrides={**fc.aah_overrides, "block_size": fc.seq_len, **({"sink_tokens": sinks} if sinks else {})},
    )
    exists = is_run(run_dir)
    if exists and not fc.overwrite:
        recorded, data_hash = recorded_adaptation_settings(read_manifest(run_dir))
        wanted = adaptation_settings(rc)
        differ = [k for k in wanted if recorded.get(k) != wanted[k]]
        if data_hash is None:
            differ.append("data: it records no hash of its text")  # made before adaptations recorded one
        elif data_hash != file_sha256(adapt_text):
            differ.append("data")
        if differ:
            raise RunLogError(
                f"{run_dir} is an adaptation made with other settings ({', '.join(differ)}); pass --overwrite to "
                "adapt afresh, or give a new --out"
            )
        found = list_adapters(run_dir)
        if found and found[-1][0] == fc.adapt_steps - 1:
            return found[-1][1]
    rc = replace(rc, resume=exists and not fc.overwrite, overwrite=exists and fc.overwrite)
    adapt(rc)
    return list_adapters(run_dir)[-1][1]


def adaptation_curve(run_dir: Path) -> list[list[float]]:
    """[step, validation loss] of an adaptation run at each of its evaluations, in step order."""
    from aah_viz.runlog import load_run

    if not is_run(run_dir):
        return []
    rows = load_run(run_dir).scalar("val_loss").drop_duplicates("step", keep="last")
    return [[int(step), float(value)] for step, value in zip(rows["step"], rows["value"])]
