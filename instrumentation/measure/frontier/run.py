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

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from aah_viz.errors import ConfigError
from aah_viz.runlog.paths import INPUTS_DIR, atomic_write_bytes, run_entry
from aah_viz.torch_import import limit_threads
from instrumentation.config import REGIMES, AAHConfig
from instrumentation.data import cut_blocks
from instrumentation.measure.frontier.adaptation import adaptation_curve, adapted_adapter
from instrumentation.measure.frontier.passes import profile_head_windows, speed_vs_unpatched, unpatched_pass
from instrumentation.measure.frontier.plan import (
    FrontierConfig,
    adapt_run_dir,
    file_sha256,
    plan,
    profiled_windows,
    split_text,
)
from instrumentation.measure.frontier.record import FrontierRun
from instrumentation.measure.inference import eval_batches, inference_pass
from instrumentation.measure.retrieval import passkey_retrieval
from instrumentation.training.loop import StoppedBySignal


def passkey_questions(fc: FrontierConfig, encode) -> list:
    """The passkey questions every configuration is asked: ``fc.retrieval`` at each of five depths, each
    prompt with its answer at most a block long (a token spare for the prompt and answer tokenized apart)."""
    from aah_viz.corpus.passkey import passkey_items

    try:
        return passkey_items(
            int(fc.seq_len), lambda text: len(encode(text)) + 1, per_depth=int(fc.retrieval), seed=int(fc.seed)
        )
    except ValueError as err:
        raise ConfigError(f"--retrieval at --seq-len {fc.seq_len}: {err}") from None


def run_frontier(fc: FrontierConfig) -> dict:
    """Evaluate every configuration of ``plan(fc)`` not yet in the run; returns a summary."""
    from aah_viz.analysis.frontier import frontier_table
    from instrumentation.retrofit import load_adapter, patch_model
    from instrumentation.retrofit.load import is_model_dir, load_causal_lm, text_encoder, text_tokens

    limit_threads(fc.threads)
    model_dir, data, out = Path(fc.model_dir), Path(fc.data), Path(fc.out)
    if not is_model_dir(model_dir):
        raise ConfigError(f"{model_dir} is not a Hugging Face model folder (no config.json)")
    if not 0 <= int(fc.retrieval) <= 1000:
        raise ConfigError(f"--retrieval {fc.retrieval}: give the passkey questions per depth, from 0 to 1000")
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
    for conf in plan(fc):  # a link where an adaptation run goes: refused before anything is written
        if conf.family == "adapted":
            adapt_run_dir(out, conf.regime, conf.sinks, conf.seed)
    settings = fc.settings(file_sha256(data))
    run = FrontierRun(fc, int(base.config.num_hidden_layers), int(base.config.num_attention_heads), settings)
    # with what earlier calls evaluated and asked
    fc = replace(
        fc, regimes=run.regimes, sink_tokens=run.sink_tokens, retrieval=run.retrieval, adapt_seeds=run.adapt_seeds
    )
    status = "failed"
    try:
        inputs.mkdir(exist_ok=True)
        for name, text in texts.items():  # the adaptation runs read theirs from here
            atomic_write_bytes(run_entry(out, INPUTS_DIR, name), text.encode("utf-8"))
        work = load_causal_lm(model_dir, fc.device).eval()
        common = dict(seq_len=T, tokens_per_block=T, eval_split={"first_eval_line": cut, "eval_share": fc.eval_share})
        encode = text_encoder(model_dir, vocab)
        questions = passkey_questions(fc, encode) if fc.retrieval else []
        steps = [c for c in plan(fc) if c.name not in run.done or (questions and c.name not in run.retrieved)]
        profiled = None
        from tqdm.auto import tqdm

        done = len(plan(fc)) - len(steps)
        bar = tqdm(total=len(plan(fc)), initial=done, desc="frontier", unit="config", disable=not fc.progress)
        try:
            for conf in steps:
                bar.set_postfix_str(conf.name)
                measure = conf.name not in run.done
                ask = bool(questions) and conf.name not in run.retrieved
                asked = None
                if conf.family == "unpatched":
                    if measure:
                        detail = unpatched_pass(base, blocks, device)
                        detail["speed_vs_unpatched"] = {"median": 1.0, "ci95": [1.0, 1.0], "n_pairs": 0}
                    if ask:
                        asked = passkey_retrieval(base, None, questions, encode, device)
                else:
                    sink_kw = {"sink_tokens": conf.sinks} if conf.sinks else {}
                    if conf.family == "head_windows":
                        profiled = profiled or profile_head_windows(
                            work, adapt_blocks[: fc.profile_blocks], fc, run, device
                        )
                        handle = patch_model(
                            work,
                            "head_windows",
                            fc.candidate_windows(),
                            block_size=T,
                            static_head_windows=profiled_windows(profiled, fc.candidate_windows(), conf),
                            **sink_kw,
                        )
                    elif conf.family == "adapted":
                        adapter = adapted_adapter(
                            fc, conf.regime, inputs / "adapt.txt", out, settings["model_dir"], conf.sinks, conf.seed
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
                        # a zero-shot row routes while it is evaluated: its questions are asked where that left it
                        if measure or conf.family == "zero_shot":
                            detail = inference_pass(
                                work, handle, eval_batches(blocks, 1, device), reference_eval=conf.family == "zero_shot"
                            )
                            detail["regime"] = handle.cfg.regime
                            detail["routing"] = "reference_eval" if conf.family == "zero_shot" else "frozen"
                        if measure:
                            detail["speed_vs_unpatched"] = speed_vs_unpatched(
                                base, work, blocks[0], device, fc.timing_pairs
                            )
                        if ask:
                            asked = passkey_retrieval(work, handle, questions, encode, device)
                    finally:
                        handle.unpatch()
                if measure:
                    detail.update(common, configuration=conf.name, family=conf.family, sink_tokens=conf.sinks)
                    detail["adapt_steps"] = fc.adapt_steps if conf.family == "adapted" else 0
                    if conf.family == "head_windows":
                        detail["profile_share"] = conf.share
                    if conf.family == "adapted":
                        adapt_dir = adapt_run_dir(out, conf.regime, conf.sinks, conf.seed)
                        detail["adapt_run"] = adapt_dir.name
                        detail["adapt_seed"] = int(fc.seed if conf.seed is None else conf.seed)
                        detail["adapt_curve"] = adaptation_curve(adapt_dir)  # [step, validation loss]
                    run.write("inference", detail)
                if asked is not None:
                    asked.update(configuration=conf.name, family=conf.family, sink_tokens=conf.sinks)
                    run.write("retrieval", {**asked, "questions_per_depth": fc.retrieval, "seed": fc.seed})
                bar.update(1)
        finally:
            bar.close()
        status = "finished"
    except (KeyboardInterrupt, StoppedBySignal):
        # Ctrl-C, or SIGTERM during an adaptation (which stops after a whole step): what is written stays,
        # and the same command continues it
        status = "stopped"
        raise
    finally:
        run.close(status)
    if status == "finished":
        shutil.rmtree(inputs, ignore_errors=True)
    from aah_viz.runlog import load_run

    events = load_run(out).events("inference")
    details = [json.loads(d) if isinstance(d, str) else d for d in events["detail"]]
    table = frontier_table(details)
    return {"run_dir": str(out), "configurations": len(table), "table": table}
