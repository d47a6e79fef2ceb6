"""``aah-viz frontier``: quality against compute for one pretrained model, every configuration on the same blocks.

The text is split once, by lines: the last ``eval_share`` of its characters is held out for
evaluation, the rest is the adaptation text (profiling and ``retrofit`` adaptation read only it).
Every configuration is evaluated on the same first ``eval_blocks`` blocks of the held-out part:

- ``unpatched``: the model as loaded (the reference every speed is a ratio to);
- ``full_attention``: the patch with plain causal attention (checks the patch costs nothing);
- ``sliding_window_W``: every head the static window W, for each candidate W below T;
- ``head_windows_p95``: every head the smallest candidate window holding 95% of its attention mass
  under full attention, profiled on the adaptation text (the static per-head baseline MoA and
  DuoAttention stand for);
- ``REGIME_zero_shot``: the AAH regime with its untrained controller, routing run on the evaluation
  forwards as the reference's evaluation does;
- ``REGIME_adapted``: the regime after ``adapt_steps`` of ``aah-viz retrofit`` on the adaptation text
  (a retrofit run of its own beside the frontier run), routing frozen as trained.

With ``sink_tokens`` (``--sink-tokens 1,4``: the first k positions kept visible to every query,
method §10.4), for each k also: ``sliding_window_W_sinkK``; ``head_windows_p95_sinkK`` and
``head_windows_p90_sinkK`` (each head the smallest candidate window keeping that share of its mass
when the mass on the first k positions counts as kept); ``REGIME_zero_shot_sinkK`` and
``REGIME_adapted_sinkK`` (adapted with the sinks, a retrofit run ``OUT-REGIME-sinkK``). ACR, causal
coverage and realised work count the sink pairs.

Each becomes an ``inference`` event of the frontier run, with the per-block negative
log-likelihoods (perplexity intervals, ``aah_viz.analysis.frontier``), ACR, causal coverage, realised
work, and its speed as a paired ratio to the unpatched model timed in the same process. Results are
written as they come: a second call with the same settings continues where the first stopped, and
one that names further ``--regimes`` adds their configurations to the frontier (the paper's ablations
after a first look at full_adaptive).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from aah_viz.errors import ConfigError, RunLogError, UnsafePathError
from aah_viz.paired_timing import interleave, paired_report, timed
from aah_viz.runlog.paths import INPUTS_DIR, atomic_write_bytes, is_run, run_entry
from aah_viz.torch_import import limit_threads
from instrumentation.config import REGIMES, AAHConfig, windows_for
from instrumentation.data import cut_blocks
from instrumentation.inference import eval_batches, inference_pass, model_logits

AAH_REGIMES = ("full_adaptive", "grouping_off", "fixed_random_grouping")
PROFILE_SHARE = 0.95
SINK_PROFILE_SHARES = (0.95, 0.90)  # the profiled per-head rows with sinks
MANIFEST_KEY = "frontier"


@dataclass
class FrontierConfig:
    model_dir: str
    data: str
    out: str
    seq_len: int = 512
    windows: tuple[int, ...] | None = None  # default: T/8, T/4, T/2, T
    adapt_steps: int = 0  # 0: no adapted rows
    regimes: tuple[str, ...] = AAH_REGIMES
    eval_blocks: int = 32
    eval_share: float = 0.1
    profile_blocks: int = 8
    timing_pairs: int = 5
    adapt_lr: float = 1e-4
    adapt_batch_size: int = 1
    seed: int = 0
    threads: int | None = None
    device: str = "cpu"
    progress: bool = True
    overwrite: bool = False
    aah_overrides: dict = field(default_factory=dict)  # AAH config keys of the routed regimes (--set)
    sink_tokens: tuple[int, ...] = ()  # --sink-tokens: each k adds the rows with the first k positions kept

    def candidate_windows(self) -> tuple[int, ...]:
        return tuple(self.windows) if self.windows else windows_for(self.seq_len)

    def settings(self, data_sha256: str) -> dict:
        """What must match for a second call to continue this frontier."""
        keep = ("seq_len", "adapt_steps", "eval_blocks", "eval_share", "profile_blocks", "adapt_lr", "seed")
        out = {k: getattr(self, k) for k in keep}
        out.update(
            windows=list(self.candidate_windows()),
            regimes=list(self.regimes),
            adapt_batch_size=self.adapt_batch_size,
            model_dir=str(Path(self.model_dir).resolve()),
            data_sha256=data_sha256,
        )
        if self.aah_overrides:  # only when given: frontiers made without it continue as they were
            out["aah_overrides"] = dict(sorted(self.aah_overrides.items()))
        if self.sink_tokens:
            out["sink_tokens"] = sorted({int(k) for k in self.sink_tokens})
        return out


# ----------------------------------------------------------------------------- text
def split_text(path: Path, eval_share: float) -> tuple[str, str, int]:
    """(adaptation text, evaluation text, index of the first evaluation line)."""
    if not 0.0 < eval_share < 1.0:
        raise ConfigError(f"--eval-share must be between 0 and 1, got {eval_share}")
    if not path.is_file():
        raise ConfigError(f"--data {path} is not a file; give a plain-text (UTF-8) file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); convert it to UTF-8 first") from None
    total = sum(len(line) for line in lines)
    seen, cut = 0, len(lines)
    for i, line in enumerate(lines):
        if seen >= total * (1.0 - eval_share):
            cut = i
            break
        seen += len(line)
    return "".join(lines[:cut]), "".join(lines[cut:]), cut


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Configuration:
    name: str
    family: str  # unpatched | patch | sliding_window | head_windows | zero_shot | adapted
    regime: str | None = None
    window: int | None = None
    sinks: int = 0  # sink_tokens: the first positions every query keeps
    share: float = PROFILE_SHARE  # head_windows: the share of each head's mass its window keeps


def _sink_suffix(k: int) -> str:
    return f"_sink{k}" if k else ""


def plan(fc: FrontierConfig) -> list[Configuration]:
    T = fc.seq_len
    rows = [Configuration("unpatched", "unpatched"), Configuration("full_attention", "patch", "full_attention")]
    rows += [
        Configuration(f"sliding_window_{w}", "sliding_window", "sliding_window", w)
        for w in fc.candidate_windows()
        if w < T
    ]
    rows.append(Configuration(f"head_windows_p{round(PROFILE_SHARE * 100)}", "head_windows", "head_windows"))
    rows += [Configuration(f"{r}_zero_shot", "zero_shot", r) for r in fc.regimes]
    if fc.adapt_steps > 0:
        rows += [Configuration(f"{r}_adapted", "adapted", r) for r in fc.regimes]
    for k in sorted({int(k) for k in fc.sink_tokens}):
        s = _sink_suffix(k)
        rows += [
            Configuration(f"sliding_window_{w}{s}", "sliding_window", "sliding_window", w, sinks=k)
            for w in fc.candidate_windows()
            if w < T
        ]
        rows += [
            Configuration(
                f"head_windows_p{round(share * 100)}{s}", "head_windows", "head_windows", sinks=k, share=share
            )
            for share in SINK_PROFILE_SHARES
        ]
        rows += [Configuration(f"{r}_zero_shot{s}", "zero_shot", r, sinks=k) for r in fc.regimes]
        if fc.adapt_steps > 0:
            rows += [Configuration(f"{r}_adapted{s}", "adapted", r, sinks=k) for r in fc.regimes]
    return rows


def adapt_run_dir(out: Path, regime: str, sinks: int = 0) -> Path:
    """Where the adaptation of ``regime`` (with ``sinks``) is recorded: a retrofit run beside the frontier
    run (never through a symbolic link: a link there would send the adaptation, and its pruning, elsewhere)."""
    sibling = out.parent / f"{out.name}-{regime}{_sink_suffix(sinks).replace('_', '-')}"
    if sibling.is_symlink():
        raise UnsafePathError(
            f"{sibling} is a symbolic link; the frontier's adaptation runs are written beside --out, never through "
            "a link: remove it, or give another --out"
        )
    return sibling


# ----------------------------------------------------------------------------- evaluation
def head_windows_from_needed(needed: np.ndarray, candidates: tuple[int, ...]) -> list[list[int]]:
    """Per head, the smallest candidate window at least its needed span (the largest if none is)."""
    cands = np.asarray(sorted(candidates))
    pos = np.searchsorted(cands, np.asarray(needed), side="left").clip(max=len(cands) - 1)
    return cands[pos].astype(int).tolist()


def _unpatched_pass(model, blocks: np.ndarray, device) -> dict:
    """Per-block NLL of the model as loaded: full causal attention, every pair covered."""
    losses, tokens = [], 0
    was = model.training
    model.eval()
    started = time.perf_counter()
    try:
        with torch.no_grad():
            for x, y in eval_batches(blocks, 1, device):
                logits = model_logits(model, x)
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="none")
                losses.append(nll.view(y.shape).sum(dim=1))
                tokens += int(y.numel())
        block_nll = torch.cat(losses).tolist()
    finally:
        model.train(was)
    loss = float(np.sum(block_nll)) / tokens
    T = int(blocks.shape[1] - 1)
    n_layer, n_head = int(model.config.num_hidden_layers), int(model.config.num_attention_heads)
    return dict(
        n_batches=int(blocks.shape[0]),
        tokens=tokens,
        seq_len=T,
        val_loss=loss,
        val_ppl=float(np.exp(loss)),
        elapsed_s=time.perf_counter() - started,
        acr=1.0,
        acr_causal=1.0,
        realised_work=None,  # what the model's own kernel computes is not measured
        windows=[[T] * n_head for _ in range(n_layer)],
        block_nll=block_nll,
    )


def _speed(base, work, block: np.ndarray, device, pairs: int) -> dict:
    """Tokens/s of ``work`` over the unpatched ``base`` on one block: median of paired ratios (CPU clock)."""
    x = torch.from_numpy(block[None, :-1]).to(device)

    def forward(model):
        with torch.no_grad():
            model_logits(model, x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    clock = "wall" if device.type == "cuda" else "cpu"
    raw = interleave({"speed": (timed(lambda: forward(base)), timed(lambda: forward(work)))}, pairs=pairs)
    doc = paired_report(raw, sides={"speed": ("unpatched", "configuration")}, clock=clock)
    return {**doc["ratios"]["speed"], "clock": clock}


# ----------------------------------------------------------------------------- the run
class _Run:
    """The frontier's run directory: manifest, events written as they come, what is already done."""

    def __init__(self, fc: FrontierConfig, n_layer: int, n_head: int, settings: dict):
        from aah_viz.runlog import RunWriter, load_run, make_manifest

        out = Path(fc.out)
        self.done: set[str] = set()
        self.regimes: tuple[str, ...] = tuple(fc.regimes)
        self.sink_tokens: tuple[int, ...] = tuple(sorted({int(k) for k in fc.sink_tokens}))
        if is_run(out) and not fc.overwrite:
            run = load_run(out)
            recorded = run.manifest.get(MANIFEST_KEY)
            if not isinstance(recorded, dict) or recorded.get("settings") is None:
                raise RunLogError(f"{out} holds a run that is not a frontier; give a new --out or --overwrite")
            keys = (set(settings) | set(recorded["settings"])) - {"regimes", "sink_tokens"}  # these may be added
            differ = sorted(k for k in keys if recorded["settings"].get(k) != settings.get(k))
            if differ:
                raise RunLogError(
                    f"{out} is a frontier with other settings ({', '.join(differ)}); continue it with the same "
                    "settings, or give a new --out (or --overwrite)"
                )
            had = tuple(recorded["settings"].get("regimes") or ())
            self.regimes = had + tuple(r for r in fc.regimes if r not in had)
            had_sinks = tuple(recorded["settings"].get("sink_tokens") or ())
            self.sink_tokens = tuple(sorted(set(had_sinks) | set(self.sink_tokens)))
            events = pd.concat([run.events("inference"), run.events("profile")])
            for detail in events["detail"] if len(events) else []:
                d = json.loads(detail) if isinstance(detail, str) else detail
                if d.get("configuration"):
                    self.done.add(d["configuration"])
            self.writer = RunWriter.resume(out, keep_through_step=None)
            if self.regimes != had or self.sink_tokens != had_sinks:
                grown = replace(fc, regimes=self.regimes, sink_tokens=self.sink_tokens)
                grown_settings = {**recorded["settings"], "regimes": list(self.regimes)}
                if self.sink_tokens:
                    grown_settings["sink_tokens"] = list(self.sink_tokens)
                self.writer.update_manifest(
                    **{MANIFEST_KEY: {"settings": grown_settings, "configurations": [c.name for c in plan(grown)]}}
                )
        else:
            manifest = make_manifest(
                run_id=out.name,
                regime="frontier",
                seed=fc.seed,
                config={"model_dir": settings["model_dir"], "kind": "frontier"},
                windows=list(fc.candidate_windows()),
                seq_len=int(fc.seq_len),
                n_layer=n_layer,
                n_head=n_head,
                max_depth=1,
                steps=None,
                data={"source": str(fc.data), "sha256": settings["data_sha256"]},
                base_model=settings["model_dir"],
                **{MANIFEST_KEY: {"settings": settings, "configurations": [c.name for c in plan(fc)]}},
            )
            self.writer = RunWriter.create(out, manifest, overwrite=fc.overwrite)

    def write(self, kind: str, detail: dict, tables: dict | None = None) -> None:
        for table, rows in (tables or {}).items():
            self.writer.append(table, rows)
        self.writer.event(0, kind, **detail)
        self.writer.flush()
        if detail.get("configuration"):
            self.done.add(detail["configuration"])

    def close(self, status: str) -> None:
        self.writer.close(status)


def run_frontier(fc: FrontierConfig) -> dict:
    """Evaluate every configuration of ``plan(fc)`` not yet in the run; returns a summary."""
    from aah_viz.analysis.frontier import frontier_table
    from instrumentation.retrofit import load_adapter, patch_model
    from instrumentation.retrofit.load import is_model_dir, load_causal_lm, text_tokens

    limit_threads(fc.threads)
    model_dir, data, out = Path(fc.model_dir), Path(fc.data), Path(fc.out)
    if not is_model_dir(model_dir):
        raise ConfigError(f"{model_dir} is not a Hugging Face model folder (no config.json)")
    if fc.eval_blocks < 1 or fc.timing_pairs < 2 or fc.profile_blocks < 1 or fc.adapt_steps < 0:
        raise ConfigError("--eval-blocks and --profile-blocks must be >= 1, --timing-pairs >= 2, --adapt-steps >= 0")
    routed = [r for r, spec in REGIMES.items() if spec.overrides.get("enabled", True)]
    unknown = [r for r in fc.regimes if r not in routed]
    if unknown or not fc.regimes:
        raise ConfigError(
            f"--regimes {', '.join(unknown) or '(none)'}: give AAH regimes with a controller: {', '.join(routed)}"
        )
    AAHConfig.from_dict(dict(fc.aah_overrides))  # an unknown key or a bad value: refused before anything is written
    if fc.sink_tokens and "sink_tokens" in fc.aah_overrides:
        raise ConfigError("give sink tokens either as --sink-tokens (rows of their own) or --set sink_tokens, not both")
    if any(int(k) < 1 for k in fc.sink_tokens):
        raise ConfigError(f"--sink-tokens expects positive integers, got {list(fc.sink_tokens)}")
    T = int(fc.seq_len)
    adapt_text, eval_text, cut = split_text(data, fc.eval_share)
    device = torch.device(fc.device)
    if not fc.progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    hf_config = json.loads((model_dir / "config.json").read_text())
    max_pos = hf_config.get("max_position_embeddings")
    if max_pos and T > int(max_pos):
        raise ConfigError(f"--seq-len {T} exceeds the model's {max_pos} positions")
    vocab = int(hf_config.get("vocab_size") or 0)
    with tempfile.TemporaryDirectory(prefix="aah-frontier-") as tmp:
        texts = {"adapt.txt": adapt_text, "eval.txt": eval_text}
        for name, text in texts.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        blocks = cut_blocks(text_tokens(Path(tmp) / "eval.txt", model_dir, vocab), T)[: fc.eval_blocks]
        adapt_blocks = cut_blocks(text_tokens(Path(tmp) / "adapt.txt", model_dir, vocab), T)
    if blocks.shape[0] == 0 or adapt_blocks.shape[0] == 0:
        raise ConfigError(
            f"{data} is too short: the held-out and the adaptation part each need one block of {T + 1} tokens "
            f"(got {blocks.shape[0]} and {adapt_blocks.shape[0]}); use a longer text or a shorter --seq-len"
        )
    base = load_causal_lm(model_dir, fc.device).eval()
    inputs = run_entry(out, INPUTS_DIR)
    for regime in fc.regimes:  # a link where an adaptation run goes: refused before anything is written
        adapt_run_dir(out, regime)
    settings = fc.settings(_sha256(data))
    run = _Run(fc, int(base.config.num_hidden_layers), int(base.config.num_attention_heads), settings)
    fc = replace(fc, regimes=run.regimes, sink_tokens=run.sink_tokens)  # with those evaluated before
    status = "failed"
    try:
        inputs.mkdir(exist_ok=True)
        for name, text in texts.items():  # the adaptation runs read theirs from here
            atomic_write_bytes(run_entry(out, INPUTS_DIR, name), text.encode("utf-8"))
        work = load_causal_lm(model_dir, fc.device).eval()
        common = dict(seq_len=T, tokens_per_block=T, eval_split={"first_eval_line": cut, "eval_share": fc.eval_share})
        steps = [c for c in plan(fc) if c.name not in run.done]
        profiled = None
        from tqdm.auto import tqdm

        done = len(plan(fc)) - len(steps)
        bar = tqdm(total=len(plan(fc)), initial=done, desc="frontier", unit="config", disable=not fc.progress)
        try:
            for conf in steps:
                bar.set_postfix_str(conf.name)
                if conf.family == "unpatched":
                    detail = _unpatched_pass(base, blocks, device)
                    detail["speed_vs_unpatched"] = {"median": 1.0, "ci95": [1.0, 1.0], "n_pairs": 0}
                else:
                    sink_kw = {"sink_tokens": conf.sinks} if conf.sinks else {}
                    if conf.family == "head_windows":
                        profiled = profiled or _profile(work, adapt_blocks[: fc.profile_blocks], fc, run, device)
                        handle = patch_model(
                            work,
                            "head_windows",
                            fc.candidate_windows(),
                            block_size=T,
                            static_head_windows=profiled_windows(profiled, fc.candidate_windows(), conf),
                            **sink_kw,
                        )
                    elif conf.family == "adapted":
                        adapter = _adapted(
                            fc, conf.regime, inputs / "adapt.txt", out, settings["model_dir"], conf.sinks
                        )
                        handle = load_adapter(work, adapter)
                    else:
                        kw = {"window": conf.window} if conf.window else {}
                        if conf.family == "zero_shot":
                            kw.update(fc.aah_overrides)  # the routed regimes only: static windows have none
                        # the untrained AAH parameters are drawn from --seed, as `aah-viz retrofit --seed` starts
                        # them: the same command gives the same zero-shot rows
                        torch.manual_seed(int(fc.seed))
                        handle = patch_model(work, conf.regime, fc.candidate_windows(), block_size=T, **kw, **sink_kw)
                    try:
                        handle.set_step(None)
                        detail = inference_pass(
                            work, handle, eval_batches(blocks, 1, device), reference_eval=conf.family == "zero_shot"
                        )
                        detail["regime"] = handle.cfg.regime
                        detail["routing"] = "reference_eval" if conf.family == "zero_shot" else "frozen"
                        detail["speed_vs_unpatched"] = _speed(base, work, blocks[0], device, fc.timing_pairs)
                    finally:
                        handle.unpatch()
                detail.update(common, configuration=conf.name, family=conf.family, sink_tokens=conf.sinks)
                detail["adapt_steps"] = fc.adapt_steps if conf.family == "adapted" else 0
                if conf.family == "head_windows":
                    detail["profile_share"] = conf.share
                if conf.family == "adapted":
                    detail["adapt_run"] = adapt_run_dir(out, conf.regime, conf.sinks).name
                run.write("inference", detail)
                bar.update(1)
        finally:
            bar.close()
        status = "finished"
    finally:
        run.close(status)
    if status == "finished":
        shutil.rmtree(inputs, ignore_errors=True)
    from aah_viz.runlog import load_run

    events = load_run(out).events("inference")
    details = [json.loads(d) if isinstance(d, str) else d for d in events["detail"]]
    table = frontier_table(details)
    return {"run_dir": str(out), "configurations": len(table), "table": table}


def profiled_windows(detail: dict, candidates: tuple[int, ...], conf: Configuration) -> list[list[int]]:
    """The per-head windows of a ``head_windows`` row from the profile's ``detail``: each head the smallest
    candidate keeping ``conf.share`` of its mass (the mass on the first ``conf.sinks`` positions kept)."""
    key = f"needed_{round(conf.share * 100)}"
    needed = detail["needed_with_sinks"][str(conf.sinks)][key] if conf.sinks else detail[key]
    return head_windows_from_needed(np.asarray(needed), candidates)


def _profile(work, blocks: np.ndarray, fc: FrontierConfig, run: _Run, device) -> dict:
    """Profile ``work`` under full attention on adaptation blocks (written to the run once, with the
    needed windows of every head at each share, without and with each number of sink tokens)."""
    from instrumentation.profile import profile_heads
    from instrumentation.retrofit import patch_model

    handle = patch_model(work, "full_attention", fc.candidate_windows(), block_size=fc.seq_len)
    try:
        rows, detail = profile_heads(
            work,
            handle,
            eval_batches(blocks, 1, device),
            logits_fn=model_logits,
            step=0,
            sink_tokens=fc.sink_tokens,
        )
    finally:
        handle.unpatch()
    if "needed_95" not in detail:  # without sink tokens the detail holds no per-head arrays: from the rows
        cols = {k: np.asarray(v) for k, v in rows.items()}
        one = cols["window"] == cols["window"].min()  # one row per (layer, head), in layer-then-head order
        detail["needed_95"] = cols["needed_95"][one].reshape(int(work.config.num_hidden_layers), -1).tolist()
    assignment = profiled_windows(detail, fc.candidate_windows(), Configuration("", "head_windows"))
    event = {
        **detail,
        "data": "adaptation text",
        "profile_share": PROFILE_SHARE,
        "configuration": "profile",
        "head_windows": assignment,
    }
    if "profile" not in run.done:
        run.write("profile", event, tables={"head_spans": rows})
    elif fc.sink_tokens:  # a continuation that adds sink tokens: their needed windows, the same head_spans rows
        run.write("profile", event)
    return detail


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


def _adapted(fc: FrontierConfig, regime: str, adapt_text: Path, out: Path, model_dir: str, sinks: int = 0) -> Path:
    """The final adapter of ``regime`` (with ``sinks``) after ``adapt_steps``: reused only when its run was made
    with these settings on this text; continued when it was interrupted; made afresh under --overwrite."""
    from aah_viz.runlog import read_manifest
    from aah_viz.runlog.paths import list_adapters
    from instrumentation.retrofit.adapt import RetrofitConfig, adapt

    run_dir = adapt_run_dir(out, regime, sinks)
    rc = RetrofitConfig(
        model_dir=model_dir,
        out=str(run_dir),
        data=str(adapt_text),
        regime=regime,
        windows=fc.candidate_windows(),
        steps=fc.adapt_steps,
        seed=fc.seed,
        train="aah",
        batch_size=fc.adapt_batch_size,
        seq_len=fc.seq_len,
        lr=fc.adapt_lr,
        eval_interval=max(1, fc.adapt_steps // 4),
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
        if data_hash != _sha256(adapt_text):
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


def describe(fc: FrontierConfig) -> dict:
    return {k: v for k, v in asdict(fc).items() if k not in ("progress",)}
