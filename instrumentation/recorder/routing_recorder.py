"""``RoutingRecorder``: subscribes to an AAH model's routing events and writes the run directory.

    with RoutingRecorder(model, Recording(run_dir, detail="full")) as rec:
        for step, batch in ...:
            model.prepare_step(step); loss = model(x, targets=y).loss; loss.backward(); opt.step()
            rec.step(step, loss=loss, lr=lr, tokens=n_tokens)

It records every routing update (events, not samples) and, per step, the executed window of
every head with its group at every level, the branch frequencies, ACR and causal-pair coverage
per layer, and the cheap training scalars. Detail levels: ``full`` (everything, feature rows
included), ``light`` (no feature rows and no logit vectors in ``tree``), ``minimal`` (``heads``,
``scalars`` and the lifecycle events only).

The hot path never forces a device sync: event tensors are staged as they arrive and become numpy
rows only at flush time, on a writer thread (``payload``, ``aah_viz.runlog.rows``). The
model is read through ``model_state``. ``detach`` always runs (context manager exit, exceptions
included) and removes every subscription.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aah_viz.reporting.last_step import LastStep
from aah_viz.runlog import rows
from aah_viz.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_STOPPED
from instrumentation.recorder import model_state as rm
from instrumentation.recorder import payload as rp
from instrumentation.recorder.recording import Recording
from instrumentation.recorder.row_worker import RowWorker


def _empty_buffers() -> dict[str, list]:
    """What the training thread buffers between flushes: closed steps, updates, events, scalars."""
    keys = ("steps", "idx", "win", "T", "groups", "raw", "work", "scalars", "layer_scalars", "updates", "events")
    return {k: [] for k in keys}


class RoutingRecorder:
    """Record an AAH model's routing into a run directory (see ``docs/training.md``)."""

    def __init__(
        self,
        model: torch.nn.Module,
        recording: Recording,
        *,
        rank: int | None = None,
        record_eval_forwards: bool = False,
        controller_init: list[torch.Tensor] | None = None,
        background: bool = True,
    ):
        """``recording``: the run and its manifest; ``rank``: this process's (only rank 0 writes; default:
        torch.distributed's); ``record_eval_forwards``: also the forwards of ``model.eval()``;
        ``controller_init``: the controller weights drift is measured from (a resume's); ``background``:
        rows built and written on a worker thread."""
        self.model = model
        self.recording = recording
        self.run_dir, self.detail, self.flush_every = recording.run_dir, recording.detail, recording.flush_every
        self.record_eval_forwards = record_eval_forwards
        self.rank = rm.dist_rank() if rank is None else int(rank)
        self.is_writer = self.rank == 0
        self.routed = rm.routed_layers(model)
        self.cfg = cfg = self.routed.cfg
        self.n_layer, self.n_head = int(cfg.n_layer), int(cfg.n_head)
        self.max_depth = int(cfg.max_depth or 1)
        self.w_min = int(cfg.w_min or 0)
        self.sinks = int(getattr(cfg, "sink_tokens", 0) or 0)
        self.windows = tuple(int(w) for w in cfg.windows)
        self.seq_len = int(cfg.block_size)
        self.flops_shape = (int(cfg.n_embd), int(cfg.n_ff)) if cfg.n_embd and cfg.n_ff else None
        self._controller_init = controller_init
        self.writer = None
        self.write_cpu_s = 0.0  # CPU time spent building rows and writing segments (any thread)
        self.hot_path_s = 0.0  # wall time spent in event callbacks and step() on the training thread
        self._rows = RowWorker(background)
        self._handles: list[Any] = []
        self.attached = False
        self._layer_now: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        self._raw_now: dict[int, torch.Tensor] = {}
        self._work_now: dict[int, Any] = {}
        self._buf = _empty_buffers()
        self._needs_sync = False
        self._health: rm.ControllerHealth | None = None
        self.last_step = LastStep(self.n_layer, self.windows, self.w_min, self.sinks)  # what a logger reads

    # ------------------------------------------------------------------ lifecycle
    def attach(self) -> RoutingRecorder:
        """Open the run directory and subscribe to every AAH layer. Returns ``self``."""
        if self.attached:
            return self
        self._last_time = time.perf_counter()
        self._since_flush = 0
        self._warmup_seen = False
        self._warmup_end_done = False
        self._frozen_layers: set[int] = set()
        self._fallback_done = False
        self._event_src: dict[int, tuple] = {}
        self._static_idx, self._static_win = rm.static_windows(self.routed, self.windows)
        self._last_idx = [self._static_idx[l] for l in range(self.n_layer)]
        self._last_win = [self._static_win[l] for l in range(self.n_layer)]
        self._groups = np.full((self.n_layer, max(self.max_depth, 0), self.n_head), -1, dtype=np.int16)
        self._device = rm.model_device(self.model)
        self._health = rm.ControllerHealth(self.routed, self._controller_init)
        if not self.is_writer:  # only rank 0 writes; other ranks record nothing
            self.attached = True
            return self
        from aah_viz.runlog import RunWriter

        rec = self.recording
        if rec.resume_from_step is not None:
            self.writer = RunWriter.resume(self.run_dir, keep_through_step=int(rec.resume_from_step))
            self._frozen_layers, self._warmup_end_done = rp.restore_groups(self.run_dir, self._groups)
            self.last_step.restore(self.run_dir)
        else:
            manifest = rec.manifest or rm.run_manifest(
                self.cfg,
                self.run_dir,
                recorder={"detail": self.detail, "flush_every": self.flush_every},
                **{k: getattr(rec, k) for k in ("run_id", "seed", "preset", "steps", "data", "backend")},
                extra=rec.manifest_extra,
            )
            self.writer = RunWriter.create(self.run_dir, manifest, overwrite=rec.overwrite)
        self._rows.start()
        try:
            self._handles = [self.routed.subscribe(self._on_event)]
        except BaseException:
            self._rows.stop()
            self.writer.close(STATUS_FAILED)
            self.writer = None
            raise
        self.attached = True
        return self

    def detach(self, status: str | None = None) -> None:
        """Remove every subscription, flush what is buffered and close the run (always safe)."""
        handles, self._handles = self._handles, []
        for handle in handles:
            try:
                handle.remove()
            except Exception:  # noqa: BLE001 - removing the others matters more
                pass
        if not self.attached:
            return
        self.attached = False
        if self.writer is None:
            return
        try:
            self.flush(wait=True)
        finally:
            writer, self.writer = self.writer, None
            try:
                self._wait()  # never leave a worker writing behind a closed writer
            finally:
                self._rows.stop()
                writer.close(status or STATUS_FINISHED)

    def __enter__(self) -> RoutingRecorder:
        return self.attach()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self.writer is not None:
            try:
                self._event(self._last_step_or_zero(), "error", error=exc_type.__name__, message=str(exc)[:500])
            except Exception:  # noqa: BLE001 - detaching must still happen
                pass
        self.detach(_closing_status(exc_type))

    def controller_reference(self) -> list[torch.Tensor]:
        """The controller weights that weight drift is measured from (saved in checkpoints)."""
        return [t.detach().cpu().clone() for t in (self._health.reference if self._health else [])]

    # ------------------------------------------------------------------ hot path
    def _on_event(self, ev) -> None:
        if not ev.training and not self.record_eval_forwards:
            return
        started = time.perf_counter()
        try:
            self._take_event(ev)
        finally:
            self.hot_path_s += time.perf_counter() - started

    def _take_event(self, ev) -> None:
        layer = int(ev.layer)
        if tuple(ev.candidate_windows) == self.windows:
            src = self._event_src.get(layer)
            if src is not None and src[0] is ev.window_idx and src[1] is ev.windows:
                staged = src[2]  # the model hands out the same tensors while the windows stay the same
            else:
                staged = (rp.stage(ev.window_idx), rp.stage(ev.windows), int(ev.seq_len))
                self._event_src[layer] = (ev.window_idx, ev.windows, staged)
            self._layer_now[layer] = staged if staged[2] == int(ev.seq_len) else (staged[0], staged[1], int(ev.seq_len))
        elif int(ev.seq_len) == self.seq_len:  # a plain layer (baselines): its fixed window, known since attach
            self._layer_now[layer] = (self._static_idx[layer], self._static_win[layer], self.seq_len)
        else:  # rare: a plain layer at another length (a blocking copy is acceptable here)
            win = ev.windows.detach().cpu()
            self._layer_now[layer] = (rm.candidate_index(win, self.windows), win, int(ev.seq_len))
        self._needs_sync = self._needs_sync or ev.window_idx.device.type != "cpu"
        if ev.realised_work is not None:
            self._work_now[layer] = rp.stage_value(ev.realised_work)
        if ev.in_warmup:
            self._warmup_seen = True
        elif self._warmup_seen and not self._warmup_end_done and ev.step is not None:
            self._warmup_end_done = True
            self._event(int(ev.step), "warmup_end")
        fallback = ev.fallback_reason
        if fallback and not self._fallback_done:
            self._fallback_done = True
            self._event(int(ev.step or 0), "fallback", layer=layer, backend=ev.backend, reason=str(fallback))
        if ev.updated:
            self._on_update(ev, layer)

    def _on_update(self, ev, layer: int) -> None:
        step = int(ev.step) if ev.step is not None else self._last_step_or_zero()
        if ev.raw_head_idx is not None:
            self._raw_now[layer] = rp.stage(ev.raw_head_idx)
        tree = ev.tree or []
        self.last_step.take_update(layer, ev.group_change_rate, tree[0].facts.origin if tree else None)
        if tree:
            groups = self._groups.copy()  # copy on write: earlier steps keep their snapshot
            groups[layer] = -1
            for tl in tree:
                if tl.level < groups.shape[1]:
                    for gid, members in enumerate(tl.members):
                        groups[layer, tl.level, members] = gid
            self._groups = groups
        counts = [len(tl.groups) for tl in tree]
        self._event(
            step,
            "routing_update",
            layer=layer,
            path_mode=ev.path_mode,
            applied=bool(ev.applied),
            shadow=not ev.applied,
            in_warmup=bool(ev.in_warmup),
            group_counts=counts,
            n_levels=len(counts),
            group_change_rate=ev.group_change_rate,
            resolution_delta=ev.resolution_delta,
            backend=ev.backend,
        )
        if tree and ev.applied and layer not in self._frozen_layers and rm.freezes_topology(self.cfg, ev):
            self._frozen_layers.add(layer)
            self._event(
                step,
                "freeze",
                layer=layer,
                path_mode=ev.path_mode,
                topology=[tl.groups for tl in tree],
                members=[tl.members for tl in tree],
            )
        if self.detail != "minimal" and tree:
            self._buf["updates"].append(rp.stage_update(ev, step, layer, features=self.detail == "full"))

    def step(self, step: int, *, loss: Any = None, lr: Any = None, tokens: int | None = None, **scalars: Any) -> None:
        """Close one training step: its per-head windows, groups and the cheap scalars."""
        if not self.attached or not self.is_writer:
            return
        now = time.perf_counter()
        try:
            self._take_step(now, step, loss, lr, tokens, scalars)
        finally:
            self.hot_path_s += time.perf_counter() - now

    def _take_step(self, now: float, step: int, loss: Any, lr: Any, tokens: int | None, scalars: dict) -> None:
        step_time = now - self._last_time
        self._last_time = now
        step = int(step)
        idx_rows, win_rows, seq_len = [], [], self.seq_len
        for layer in range(self.n_layer):
            got = self._layer_now.get(layer)
            if got is not None:
                self._last_idx[layer], self._last_win[layer], seq_len = got
            idx_rows.append(self._last_idx[layer])
            win_rows.append(self._last_win[layer])
        self._buf["steps"].append(step)
        self._buf["idx"].append(idx_rows)  # stacked by the writer, once non-blocking copies are complete
        self._buf["win"].append(win_rows)
        self._buf["T"].append(seq_len)
        self._buf["groups"].append(self._groups)
        self._buf["raw"].append(self._raw_now)
        self._buf["work"].append(self._work_now)
        self.last_step.take_step(step, seq_len, self._work_now)
        self._layer_now, self._raw_now, self._work_now = {}, {}, {}
        add = self._buf["scalars"].append
        if loss is not None:
            add((step, "loss", rp.stage_value(loss)))
        if lr is not None:
            add((step, "lr", lr))
        add((step, "step_time_s", step_time))
        if tokens is not None and step_time > 0:
            add((step, "tokens_per_s", float(tokens) / step_time))
        add((step, "peak_mem_mb", rm.peak_memory_mb(self._device)))
        grad_norm, drift = self._health()
        self.last_step.grad_norm = grad_norm
        add((step, "controller_grad_norm", grad_norm))
        add((step, "controller_weight_drift", drift))
        for name, value in scalars.items():
            if value is not None:
                add((step, name, rp.stage_value(value)))
        self._since_flush += 1
        if self._since_flush >= self.flush_every:
            self.flush()

    def eval(self, step: int, *, val_loss: float, n_batches: int | None = None, **scalars: Any) -> None:
        """Record one evaluation: ``val_loss``, ``val_ppl`` and an ``eval`` event."""
        if not self.attached or not self.is_writer:
            return
        val_loss = rows.float_or_none(val_loss)
        ppl = math.exp(val_loss) if val_loss is not None and val_loss < 700 else None
        self._buf["scalars"].append((int(step), "val_loss", val_loss))
        self._buf["scalars"].append((int(step), "val_ppl", ppl))
        extra = {k: rows.float_or_none(v) for k, v in scalars.items()}
        for name, value in extra.items():
            self._buf["scalars"].append((int(step), name, value))
        self._event(int(step), "eval", val_loss=val_loss, val_ppl=ppl, n_batches=n_batches, **extra)

    def scalars(self, step: int, layer: int | None = None, **named: Any) -> None:
        """Extra named scalars of an already recorded ``step`` (model-wide unless ``layer``)."""
        if not self.attached or not self.is_writer:
            return
        if layer is None:
            for name, value in named.items():
                self._buf["scalars"].append((int(step), name, rp.stage_value(value)))
            return
        for name, value in named.items():
            self._buf["layer_scalars"].append((int(step), int(layer), name, rp.stage_value(value)))

    def event(self, step: int, kind: str, layer: int | None = None, **detail: Any) -> None:
        """A free-form event row (checkpoint, fallback, ...)."""
        if self.attached and self.is_writer:
            self._event(int(step), kind, layer=layer, **detail)

    def checkpoint(self, step: int, path: str | Path) -> None:
        """Record a checkpoint and flush, so the run holds every row up to ``step`` before it is saved."""
        if self.attached and self.is_writer:
            self._event(
                int(step),
                "checkpoint",
                path=str(Path(path).relative_to(self.run_dir))
                if Path(path).is_relative_to(self.run_dir)
                else str(path),
            )
            self.flush(wait=True)

    def _event(self, step: int, kind: str, layer: int | None = None, **detail: Any) -> None:
        self._buf["events"].append((int(step), None if layer is None else int(layer), kind, detail))

    def _last_step_or_zero(self) -> int:
        if self._buf["steps"]:
            return self._buf["steps"][-1]
        if self.writer is not None and self.writer.last_step is not None:
            return int(self.writer.last_step)
        return 0

    # ------------------------------------------------------------------ reporting
    def routing_rows(self):
        """The last closed step as ``aah_viz.reporting.RoutingRows`` (None before the first step).

        Called at a logger's cadence, not every step: it waits for the step's host copies.
        """
        if self.last_step.step is None:
            return None
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)  # the staged windows are non-blocking copies
        # one torch call: each releases the GIL, and while the writer thread builds rows in Python
        # every re-acquisition can wait a switch interval (5 ms)
        return self.last_step.rows(torch.stack(self._last_win).numpy(), self._groups)

    @property
    def routing_update_steps(self) -> int:
        """Closed steps on which some layer (re)built its routing (the heatmap's cadence)."""
        return self.last_step.routing_update_steps

    # ------------------------------------------------------------------ flush: numpy row building
    def flush(self, wait: bool = False) -> None:
        """Write what is buffered as one atomic segment per table.

        With ``background=True`` (the default) the rows are built and written by one worker
        thread, in order, while training goes on; ``wait=True`` returns only once everything
        flushed so far is on disk (``checkpoint`` and ``detach`` wait).
        """
        if self.writer is None:
            return
        self._rows.raise_failed()
        self._rows.submit(self._write_payload, self.writer, self._snapshot())
        if wait:
            self._wait()

    def _wait(self) -> None:
        self._rows.wait()

    def update_manifest(self, **fields: Any) -> None:
        """Set manifest fields (after everything buffered so far is written)."""
        if self.writer is not None:
            self.flush(wait=True)
            self.writer.update_manifest(**fields)

    def _snapshot(self) -> dict:
        """Hand the buffers over (training thread) and start new ones; nothing is converted here."""
        self._since_flush = 0
        ready = None
        if self._needs_sync and torch.cuda.is_available():
            ready = torch.cuda.Event()
            ready.record()  # the worker waits for this, so the copies are complete; no sync here
        payload, self._buf = self._buf, _empty_buffers()
        payload["ready"] = ready
        self._needs_sync = False
        return payload

    def _write_payload(self, writer, p: dict) -> None:
        """On the writer thread: host copies of one snapshot become rows (``payload``)."""
        started = time.thread_time()
        try:
            if p["ready"] is not None:
                p["ready"].synchronize()
            settings = dict(
                detail=self.detail,
                max_depth=self.max_depth,
                w_min=self.w_min,
                flops_shape=self.flops_shape,
                sinks=self.sinks,
            )
            for table, cols in rp.payload_rows(p, sim_threshold=self.cfg.sim_threshold, **settings):
                writer.append(table, cols)
            writer.flush()
        finally:
            self.write_cpu_s += time.thread_time() - started


def _closing_status(exc_type) -> str:
    """finished; stopped when a signal ended training after a step (``StoppedBySignal``); else failed."""
    if exc_type is None:
        return STATUS_FINISHED
    return STATUS_STOPPED if getattr(exc_type, "closes_run_as", None) == STATUS_STOPPED else STATUS_FAILED
