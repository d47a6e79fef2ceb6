"""``aah-viz evaluate``: load a run's checkpoint or a (patched) Hugging Face model, run the stand-alone
inference pass on a text, and write the ``inference`` event.

Sources: a run of ``aah-viz train`` (its checkpoints), a run of ``aah-viz retrofit`` (its base model
and adapters), or a Hugging Face model folder (patched with the given regime, or with ``--adapter``).
The event goes into ``out``: the source run itself (appended) or a new run directory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aah_viz.errors import ConfigError, RunLogError
from aah_viz.runlog.paths import list_adapters, list_checkpoints
from instrumentation.data import SYNTHETIC, cut_blocks
from instrumentation.measure.inference import eval_batches, inference_pass


def _pick(found: list[tuple[int, Path]], step: int | None, what: str, source: Path) -> tuple[int, Path]:
    if not found:
        raise RunLogError(f"{source} has no {what}; train or adapt it first")
    if step is None:
        return found[-1]
    for s, p in found:
        if s == step:
            return s, p
    raise RunLogError(f"{source} has no {what} at step {step}; it has steps {', '.join(str(s) for s, _ in found)}")


@dataclass
class Loaded:
    """A model ready for evaluation and what the output run needs to know about it."""

    model: torch.nn.Module
    routed: Any  # RoutedLayers: the model itself or a patched model's handle
    step: int | None
    tokens: Callable[[Path], np.ndarray]
    source: Path
    kind: str  # "run" | "retrofit_run" | "model"
    seed: int | None = None
    extra: dict = field(default_factory=dict)
    encode: Callable[[str], list[int]] | None = None  # text -> token ids, no special tokens (passkey questions)


def _lazy_encoder(make: Callable[[], Callable[[str], list[int]]]) -> Callable[[str], list[int]]:
    """An encoder that loads its tokenizer on first use (most commands never encode a string)."""
    made: list = []

    def encode(text: str) -> list[int]:
        if not made:
            made.append(make())
        return made[0](text)

    return encode


def _read_manifest(run_dir: Path) -> dict:
    from aah_viz.runlog.manifest import read_manifest

    return read_manifest(run_dir)


def load_for_evaluation(
    source: str | Path,
    *,
    checkpoint: int | None = None,
    regime: str = "full_adaptive",
    windows: Sequence[int] | None = None,
    overrides: dict | None = None,
    adapter: str | Path | None = None,
    device: str = "cpu",
    base_model: str | Path | None = None,
) -> Loaded:
    """Resolve ``source`` (a train run, a retrofit run or a model folder) to a loaded model; ``base_model``
    points a retrofit run at its base model folder where it is not where the run records it."""
    from instrumentation.retrofit import PAPER_WINDOWS, load_adapter, patch_model
    from instrumentation.retrofit.load import (
        is_model_dir,
        load_causal_lm,
        run_base_model,
        text_encoder,
        text_tokens,
    )

    source = Path(source)
    if base_model is not None and not list_adapters(source):
        raise ConfigError(f"--model names the base model of a run of aah-viz retrofit; {source} is not one")
    if list_checkpoints(source):
        from instrumentation.data import load_token_stream
        from instrumentation.measure.probe_extract import load_aah_checkpoint

        step, path = _pick(list_checkpoints(source), checkpoint, "checkpoint", source)
        model = load_aah_checkpoint(path, device=device).model
        seed = _read_manifest(source).get("seed")
        encode = lambda text: list(text.encode("utf-8"))  # noqa: E731 - byte tokens, as the run trained on
        return Loaded(model, model, step, lambda p: load_token_stream(p), source, "run", seed, encode=encode)
    if list_adapters(source):
        manifest = _read_manifest(source)
        base = run_base_model(source, manifest, base_model)
        step, path = _pick(list_adapters(source), checkpoint, "adapter", source)
        model = load_causal_lm(base, device)
        handle = load_adapter(model, path)
        vocab = int(model.config.vocab_size)
        return Loaded(
            model,
            handle,
            step,
            lambda p: text_tokens(p, base, vocab),
            source,
            "retrofit_run",
            manifest.get("seed"),
            {"base_model": str(base.resolve())},
            _lazy_encoder(lambda: text_encoder(base, vocab)),
        )
    if is_model_dir(source):
        model = load_causal_lm(source, device)
        if adapter is not None:
            handle = load_adapter(model, adapter)
        else:
            torch.manual_seed(0)  # never-trained AAH parameters: as `aah-viz retrofit --seed 0` starts them
            handle = patch_model(model, regime, tuple(windows or PAPER_WINDOWS), **(overrides or {}))
        vocab = int(model.config.vocab_size)
        return Loaded(
            model,
            handle,
            None,
            lambda p: text_tokens(p, source, vocab),
            source,
            "model",
            None,
            {"base_model": str(source)},
            _lazy_encoder(lambda: text_encoder(source, vocab)),
        )
    raise ConfigError(
        f"{source} is neither a run with checkpoints or adapters nor a Hugging Face model folder (config.json)"
    )


def evaluate(
    loaded: Loaded,
    data: str | Path,
    *,
    seq_len: int | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    reference_eval: bool = False,
    progress: bool = False,
) -> dict:
    """Run the inference pass on ``data`` cut into blocks of ``seq_len`` (default: the config's)."""
    blocks = _blocks(loaded, data, seq_len, batch_size, max_batches)
    device = next(loaded.model.parameters()).device
    loaded.routed.set_step(None)  # stand-alone inference: no training step (every forward is due, if mutating)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=math.ceil(blocks.shape[0] / batch_size), desc="evaluate", unit="batch")
    try:
        detail = inference_pass(
            loaded.model,
            loaded.routed,
            eval_batches(blocks, batch_size, device),
            reference_eval=reference_eval,
            progress=None if bar is None else bar.update,
        )
    finally:
        if bar is not None:
            bar.close()
    detail["checkpoint_step"] = loaded.step
    detail["routing"] = "reference_eval" if reference_eval else "frozen"
    detail["data"] = str(data)
    return detail


def _blocks(loaded: Loaded, data, seq_len: int | None, batch_size: int, max_batches: int | None):
    cfg = loaded.routed.cfg
    for flag, value in (("--batch-size", batch_size), ("--batches", max_batches), ("--seq-len", seq_len)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{flag} must be an integer >= 1, got {value!r}")
    if not (loaded.kind == "run" and str(data) == SYNTHETIC) and not Path(data).is_file():
        raise ConfigError(f"--data {data} is not a file; give the plain-text (UTF-8) file to evaluate on")
    T = int(seq_len or cfg.block_size)
    if T > cfg.block_size and loaded.kind == "run":
        raise ConfigError(f"--seq-len {T} exceeds the model's block_size {cfg.block_size}")
    blocks = cut_blocks(loaded.tokens(Path(data)), T)
    if max_batches is not None:
        blocks = blocks[: max_batches * batch_size]
    if blocks.shape[0] == 0:
        raise ConfigError(f"{data} holds fewer than {T + 1} tokens: use a longer text or a shorter --seq-len")
    return blocks


def profile_source(
    loaded: Loaded,
    data,
    out,
    *,
    seq_len: int | None = None,
    batch_size: int = 1,
    max_batches: int | None = 4,
    overwrite: bool = False,
    sink_tokens=(),
    retrieval: int = 0,
    retrieval_window: int | None = None,
    progress: bool = False,
) -> tuple[Path, dict]:
    """``aah-viz profile``: the ``head_spans`` rows of ``loaded`` on ``data``, written with a ``profile`` event
    (with ``sink_tokens``, each head's needed windows with the first k positions kept, ``profile_heads``).

    With ``retrieval`` N, also the ``head_retrieval`` rows: N passkey questions at each of five depths, a
    block long, asked with each head alone cut to ``retrieval_window`` (default: the smallest candidate
    window; with the first k positions kept for the largest k of ``sink_tokens``), ``head_retrieval``."""
    from instrumentation.measure.profile import profile_heads
    from instrumentation.model import model_logits

    blocks = _blocks(loaded, data, seq_len, batch_size, max_batches)
    T = int(blocks.shape[1] - 1)
    if retrieval:  # the questions first: one that cannot be asked is refused before the profile's work
        from instrumentation.measure.head_retrieval import head_retrieval_of, retrieval_questions

        below = [int(w) for w in loaded.routed.cfg.windows if int(w) < T]
        window = int(retrieval_window or (min(below) if below else max(T // 8, 1)))
        questions = retrieval_questions(loaded, T, retrieval, window)
    device = next(loaded.model.parameters()).device
    rows, detail = profile_heads(
        loaded.model,
        loaded.routed,
        eval_batches(blocks, batch_size, device),
        logits_fn=model_logits,
        step=loaded.step,
        sink_tokens=sink_tokens,
    )
    detail.update(data=str(data), seq_len=T, checkpoint_step=loaded.step)
    tables = {"head_spans": rows}
    if retrieval:
        sinks = max((int(k) for k in sink_tokens), default=0)
        tables["head_retrieval"], detail["head_retrieval"] = head_retrieval_of(
            loaded, questions, window, sinks, progress=progress
        )
    path = write_result(out, loaded, "profile", detail, tables=tables, overwrite=overwrite)
    return path, detail


def write_inference(out: str | Path, loaded: Loaded, detail: dict, *, overwrite: bool = False) -> Path:
    """Write ``detail`` as an ``inference`` event: appended to the source run when ``out`` is it,
    else into a new run directory that names its source (with the evaluated windows as one step)."""
    return write_result(out, loaded, "inference", detail, overwrite=overwrite)


def write_result(
    out: str | Path,
    loaded: Loaded,
    kind: str,
    detail: dict,
    *,
    tables: dict | None = None,
    overwrite: bool = False,
    before_step: Callable[[], None] | None = None,
    seq_len: int | None = None,
) -> Path:
    """An event ``kind`` with ``detail`` and the rows of ``tables`` ({table: rows}) at the loaded step,
    appended to the source run when ``out`` is it, else as step 0 of a new one-step run that names its
    source and the source's step (``evaluation_of``, ``evaluation_of_step``); ``before_step`` runs once the
    new run's recorder listens, before step 0 is closed (a forward whose windows and ACR that step records,
    of ``seq_len`` tokens: the manifest's length)."""
    out = Path(out)
    step = int(loaded.step or 0)
    if out.resolve() == loaded.source.resolve() and loaded.kind != "model":
        from aah_viz.runlog import RunWriter
        from aah_viz.runlog.manifest import STATUSES

        before = _read_manifest(out).get("status")
        if tables:  # a second profile of this step replaces the first's rows (never both)
            import pandas as pd

            from aah_viz.runlog.rewrite import rewrite_step

            rewrite_step(
                out,
                {t: pd.DataFrame(rows) for t, rows in tables.items()},
                step,
                purpose=f"writing {kind}",
                clear_empty=True,
            )
        writer = RunWriter.resume(out, keep_through_step=None)
        try:
            writer.event(step, kind, **detail)
        finally:
            # an interrupted run stays interrupted (and resumable): appending a result finishes nothing
            writer.close(before if before in STATUSES else "finished")
        return out
    from instrumentation.recorder import Recording, RoutingRecorder

    extra = {"evaluation_of": str(loaded.source), "evaluation_of_step": loaded.step, **loaded.extra}
    if seq_len is not None:
        extra["seq_len"] = int(seq_len)
    step = 0  # the new run holds this one step; the source's step is in the manifest and the detail
    tables = {name: {**rows, "step": [step] * len(rows["step"])} for name, rows in (tables or {}).items()}
    recording = Recording(
        out,
        "minimal",
        seed=loaded.seed,
        steps=1,
        data=str(detail.get("data")),
        overwrite=overwrite,
        manifest_extra=extra,
    )
    # record_eval_forwards: the windows of before_step's forward (evaluation mode) make step 0
    rec = RoutingRecorder(loaded.routed, recording, record_eval_forwards=True, background=False).attach()
    try:
        if before_step is not None:
            before_step()
        rec.step(step, tokens=detail.get("tokens"))
        for table, rows in tables.items():
            rec.writer.append(table, rows)
        rec.event(step, kind, **detail)
    except BaseException:
        rec.detach("failed")
        raise
    rec.detach()
    return out


def summary_fields(detail: dict) -> dict:
    """What ``aah-viz evaluate --json`` prints of an evaluation (through the CLI's one JSON printer)."""
    keys = ("val_loss", "val_ppl", "tokens_per_s", "elapsed_s", "peak_mem_mb", "acr", "acr_causal", "realised_work")
    return {k: detail.get(k) for k in keys} | {"window_frac": detail.get("window_frac")}
