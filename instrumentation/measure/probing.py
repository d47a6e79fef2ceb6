"""``aah-viz probe`` as one library call: a run, checkpoint or model probed and its tables written.

    from instrumentation import ProbeSettings, probe_target
    done = probe_target("runs/tiny", ProbeSettings(max_docs=10, threads=2))
    done.result.probe_relations, done.run_dir, done.written

:func:`probe_target` resolves the target (``aah_viz.probes.target``), reads the inputs before any model
loads, loads one of the three sources (an AAH checkpoint, a retrofit adapter, a Hugging Face folder),
keys the saved progress by everything that decides the numbers, scores (``aah_viz.probes.runner``) and
writes the probe tables into the run. It prints nothing: progress goes to a callback, warnings to
another, and a stop request (:class:`aah_viz.stop.StopRequest`, SIGINT and SIGTERM unless the caller
gives its own) ends it with :class:`aah_viz.probes.progress.ProbeInterrupted`, what it finished saved.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aah_viz.errors import InputFormatError, RunLogError
from aah_viz.probes.inputs import read_inputs
from aah_viz.probes.progress import ProbeProgress, documents_digest, fingerprint
from aah_viz.probes.runner import ProbeResult, run_probes
from aah_viz.probes.store import write_probe_tables
from aah_viz.probes.target import ProbeTarget, resolve_target, windows_from_heads
from aah_viz.stop import StopRequest
from aah_viz.torch_import import limit_threads, threads_in_use

PROBE_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class ProbeSettings:
    """What ``aah-viz probe`` takes besides its target; the defaults are the command's (docs/probes.md)."""

    syntax: str | Path | None = None  # CoNLL-U; without syntax and coref, the bundled synthetic set
    coref: str | Path | None = None  # JSONL, GAP TSV or CoNLL-2012
    step: int | None = None  # a run's checkpoint of this step (default: the newest)
    out: str | Path | None = None  # run directory for a target that has none; created when missing
    max_docs: int | None = None
    sample_docs: int | None = None
    sample_seed: int = 0
    min_count: int = 100
    context: str = "sentence"  # or "document"
    relations: str = "universal"  # or "full"
    bootstrap: int = 1000
    null_draws: int = 200
    seed: int = 0
    start_token: bool = True  # a causal Hugging Face model without special tokens gets its BOS first
    batch_size: int = 16
    sort_by_length: bool = False
    base_model: str | Path | None = None  # a retrofit run's base model folder, where it moved
    device: str = "cpu"
    threads: int | None = None  # every pool's threads (aah_viz.torch_import.limit_threads)
    restart: bool = False  # discard an interrupted probe of the run and start over


@dataclass
class ProbeOutcome:
    result: ProbeResult  # the tables and counts
    target: ProbeTarget
    run_dir: Path  # where the tables went
    step: int  # the probed step
    syntax_path: str | Path | None
    coref_path: str | Path | None
    max_len: int  # the model's tokens in one input
    written: list[Path] = field(default_factory=list)  # the segments written
    threads: dict = field(default_factory=dict)  # {"torch": n, "blas": n} while scoring


def probe_target(
    target: str | Path,
    settings: ProbeSettings = ProbeSettings(),
    *,
    progress: Callable[[int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
    stop: StopRequest | None = None,
) -> ProbeOutcome:
    """Probe ``target`` (a run directory, a checkpoint .pt, a Hugging Face folder) and write its tables.

    ``progress(done, total)`` is called with the inputs done, first with those an interrupted probe saved;
    ``warn(text)`` with each warning (sentences longer than the model's inputs); ``stop`` (default: SIGINT
    and SIGTERM) is entered around the scoring. Bad input raises before anything is written."""
    s = settings
    if s.bootstrap < 1:
        raise InputFormatError(f"--bootstrap must be at least 1, got {s.bootstrap}")
    if s.null_draws < 1:
        raise InputFormatError(f"--null-draws must be at least 1, got {s.null_draws}")
    found = resolve_target(str(target), s.step)
    if found.run_dir is None and s.out is None:
        raise RunLogError(f"{found.model_path} belongs to no run directory; pass --out RUN for the probe tables")
    inputs = read_inputs(  # before the model: fail fast
        s.syntax, s.coref, max_docs=s.max_docs, sample_docs=s.sample_docs, sample_seed=s.sample_seed
    )
    limits = limit_threads(s.threads)
    source = _load_source(found, s)
    step = int(found.step if found.step is not None else (source.step or 0))
    windows = None
    if found.run_dir is not None:
        from aah_viz.runlog import load_run

        heads = load_run(found.run_dir).table("heads", columns=["step", "layer", "head", "window"])
        windows = windows_from_heads(heads, step, source.n_layer, source.n_head)
    if windows is None:
        windows = source.windows
    stop = stop if stop is not None else StopRequest(signals=PROBE_SIGNALS)
    saved = _saved_progress(found, s, source, step, windows, inputs, stop)
    with stop, limits:
        threads = threads_in_use()
        result = run_probes(
            source,
            inputs.syntax_docs,
            inputs.coref_docs,
            step=step,
            windows=windows,
            candidate_windows=source.candidate_windows,
            min_count=s.min_count,
            context=s.context,
            relations=s.relations,
            progress=progress,
            batch_size=s.batch_size,
            n_boot=s.bootstrap,
            seed=s.seed,
            sort_by_length=s.sort_by_length,
            saved=saved,
            null_draws=s.null_draws,
        )
    if result.n_long_sentences and warn is not None:
        warn(
            f"{result.n_long_sentences} sentence(s) of {inputs.syntax_path} have more words than the model "
            f"takes tokens in one input ({source.max_len}) and were left out"
        )
    run_dir = _output_run(found, s.out, source)
    written = write_probe_tables(run_dir, result.tables(), step)
    saved.clear()  # the tables hold it all now
    return ProbeOutcome(
        result, found, run_dir, step, inputs.syntax_path, inputs.coref_path, int(source.max_len), written, threads
    )


def _load_source(found: ProbeTarget, s: ProbeSettings):
    from instrumentation.measure.probe_extract import load_aah_checkpoint, load_hf_model, load_retrofit_adapter

    if found.kind == "aah":
        return load_aah_checkpoint(found.model_path, s.device)
    if found.kind == "retrofit":
        return load_retrofit_adapter(
            found.model_path, found.run_dir, device=s.device, with_start_token=s.start_token, base_model=s.base_model
        )
    return load_hf_model(found.model_path, device=s.device, with_start_token=s.start_token)


def _saved_progress(found: ProbeTarget, s: ProbeSettings, source, step, windows, inputs, stop) -> ProbeProgress:
    """Where this probe keeps what it finished (the run's ``.probe-progress``), keyed by everything
    that decides its numbers; ``restart`` discards an interrupted one."""
    run_dir = found.run_dir if found.run_dir is not None and s.out is None else Path(s.out)
    digest = fingerprint(
        model=_model_identity(found),
        kind=found.kind,
        step=step,
        windows=np.asarray(windows, dtype=np.int64),
        candidate_windows=[int(w) for w in source.candidate_windows],
        context=s.context,
        relations=s.relations,
        batch_size=s.batch_size,
        sort_by_length=s.sort_by_length,
        start_token=s.start_token,
        syntax=documents_digest(inputs.syntax_docs),
        coref=documents_digest(inputs.coref_docs),
    )
    saved = ProbeProgress(run_dir, digest, stop=stop)
    if s.restart:
        saved.clear()
    else:
        saved.saved()  # an interrupted probe of something else: refused before any work
    return saved


def _model_identity(found: ProbeTarget) -> str:
    """What the probed model is: inside a run, the run's id and the file's place in it (a moved or copied
    run continues its interrupted probe); else the model's resolved path."""
    from aah_viz.runlog import read_manifest

    model = Path(found.model_path).resolve()
    if found.run_dir is None:
        return str(model)
    try:
        inside = model.relative_to(Path(found.run_dir).resolve())
        uid = read_manifest(found.run_dir).get("run_uid")
    except (ValueError, RunLogError):
        return str(model)
    return f"run {uid}/{inside.as_posix()}" if isinstance(uid, str) else str(model)


def _output_run(found: ProbeTarget, out, source) -> Path:
    """The run the tables go into: the target's own, or ``out`` (made a run when it is none)."""
    from aah_viz.runlog import RunWriter, make_manifest
    from aah_viz.runlog.paths import is_run

    if found.run_dir is not None and out is None:
        return found.run_dir
    if out is None:
        raise RunLogError(f"{found.model_path} belongs to no run directory; pass --out RUN for the probe tables")
    out = Path(out)
    if is_run(out):
        return out
    windows = sorted({int(w) for w in source.windows.ravel()} | set(source.candidate_windows))
    manifest = make_manifest(
        run_id=out.name,
        regime="external" if found.kind == "hf" else "checkpoint",
        seed=None,
        config={"source": str(found.model_path), "kind": found.kind},
        windows=windows,
        seq_len=int(source.max_len),
        n_layer=int(source.n_layer),
        n_head=int(source.n_head),
        max_depth=0,
        probed_model=str(found.model_path),
    )
    RunWriter.create(out, manifest).close("imported")
    return out
