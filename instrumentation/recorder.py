"""``RoutingRecorder``: subscribes to an AAH model's routing events and writes the run directory.

    with RoutingRecorder(model, run_dir, detail="full") as rec:
        for step, batch in ...:
            model.set_step(step); loss = model(x, targets=y).loss; loss.backward(); opt.step()
            rec.step(step, loss=loss, lr=lr, tokens=n_tokens)

It records every routing update (events, not samples) and, per step, the executed window of
every head with its group at every level, the branch frequencies, ACR and causal-pair coverage
per layer, and the cheap training scalars. Detail levels: ``full`` (everything, feature rows
included), ``light`` (no feature rows and no logit vectors in ``tree``), ``minimal`` (``heads``,
``scalars`` and the lifecycle events only).

The hot path never forces a device sync: event tensors are cloned on the device or copied to
the host with ``non_blocking=True`` as they arrive, and everything becomes numpy only at flush
time (every ``flush_every`` steps and on detach), where rows are built column-wise with numpy.
PyTorch hooks are global state, so ``detach`` always runs (context manager exit, exceptions
included) and removes every subscription.
"""

from __future__ import annotations

import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from aah_viz.errors import ConfigError
from aah_viz.schema import STATUS_FAILED, STATUS_FINISHED, group_column
from instrumentation.validity_rows import validity_columns

DETAILS = ("full", "light", "minimal")
DEFAULT_FLUSH_EVERY = 50


# ---------------------------------------------------------------------------- staging
def _stage(value: torch.Tensor) -> torch.Tensor:
    """A private copy on the host (non-blocking from a GPU) or on the CPU (a clone)."""
    value = value.detach()
    if value.device.type == "cpu":
        return value.clone()
    return value.to("cpu", non_blocking=True)


def _keep(value: torch.Tensor) -> torch.Tensor:
    """Tree tensors are built fresh for each update: on the host they need no copy."""
    if value.device.type != "cpu":
        return _stage(value)
    return value.detach() if value.requires_grad else value


def _host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy() if value.device.type == "cpu" else value.cpu().numpy()
    return value


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.item()
    value = float(value)
    return value if math.isfinite(value) else None


def _int_col(values: np.ndarray, typ: pa.DataType, null_below: int | None = None) -> pa.Array:
    values = np.asarray(values)
    if null_below is None:
        return pa.array(values, type=typ)
    return pa.array(values, type=typ, mask=values < null_below)


# ---------------------------------------------------------------------------- coverage
def layer_coverage(windows: np.ndarray, seq_len: np.ndarray, w_min: int) -> tuple[np.ndarray, np.ndarray]:
    """(acr, acr_causal) per row of ``windows`` (S, L, H) at sequence lengths ``seq_len`` (S,).

    Vectorised forms of ``aah_viz.coverage.acr`` and ``causal_coverage`` (same formulas, applied
    per (step, layer) row): ACR = mean_h min(T, max(W_min, w)) / T; causal coverage = mean_h
    sum_t min(t+1, w) / (T (T+1) / 2).
    """
    from aah_viz import coverage

    acr = np.empty(windows.shape[:2], dtype=np.float64)
    causal = np.empty(windows.shape[:2], dtype=np.float64)
    for T in np.unique(seq_len):
        rows = seq_len == T
        w = windows[rows]
        acr[rows] = coverage.effective_windows(w, int(T), w_min).sum(axis=-1) / (w.shape[-1] * float(T))
        causal[rows] = coverage.band_pairs(int(T), w).sum(axis=-1) / (w.shape[-1] * (T * (T + 1) / 2.0))
    return acr, causal


# ---------------------------------------------------------------------------- model adapter
class adapter:
    """What the recorder needs to know about a model, in one place (tolerant of wrapped models)."""

    FREEZE_MODES = ("freeze_learned_topology", "freeze_after_warmup")

    @staticmethod
    def unwrap(model):
        inner = getattr(model, "module", model)  # DistributedDataParallel and similar wrappers
        return getattr(inner, "aah_routing", inner)  # a patched Hugging Face model's handle (retrofit)

    @staticmethod
    def model_config(model):
        inner = adapter.unwrap(model)
        for name in ("cfg", "config"):
            cfg = getattr(inner, name, None)
            if cfg is not None:
                return cfg
        raise ConfigError("RoutingRecorder needs an AAHTransformer (a model with a .cfg AAHConfig)")

    @staticmethod
    def shape(model, cfg) -> tuple[int, int]:
        return int(cfg.n_layer), int(cfg.n_head)

    @staticmethod
    def max_depth(cfg) -> int:
        return int(getattr(cfg, "max_depth", 1) or 1)

    @staticmethod
    def w_min(cfg) -> int:
        return int(getattr(cfg, "w_min", 0) or 0)

    @staticmethod
    def candidate_windows(cfg) -> tuple[int, ...]:
        return tuple(int(w) for w in cfg.windows)

    @staticmethod
    def seq_len(cfg) -> int:
        return int(getattr(cfg, "seq_len", None) or cfg.block_size)

    @staticmethod
    def flops_shape(cfg) -> tuple[int, int] | None:
        n_embd, n_ff = getattr(cfg, "n_embd", None), getattr(cfg, "n_ff", None)
        return (int(n_embd), int(n_ff)) if n_embd and n_ff else None

    @staticmethod
    def regime(cfg) -> str:
        return str(getattr(cfg, "regime", "custom"))

    @staticmethod
    def config_dict(cfg) -> dict:
        return cfg.to_dict()

    @staticmethod
    def static_windows(model, cfg) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer (window_idx, window) before any event: the model's current windows."""
        windows = adapter.unwrap(model).current_windows().detach().to("cpu", torch.long)
        idx = adapter.candidate_index(windows, adapter.candidate_windows(cfg))
        return [idx[l].clone() for l in range(windows.shape[0])], [windows[l].clone() for l in range(windows.shape[0])]

    @staticmethod
    def candidate_index(windows: torch.Tensor, candidates: tuple[int, ...]) -> torch.Tensor:
        """Index of each window among the candidates; -1 (stored as null) where it is none of them."""
        cands = torch.tensor(candidates, dtype=torch.long)
        pos = torch.searchsorted(cands, windows).clamp(max=len(cands) - 1)
        return torch.where(cands[pos] == windows, pos, torch.full_like(pos, -1))

    @staticmethod
    def controller_parameters(model) -> list[torch.nn.Parameter]:
        inner = adapter.unwrap(model)
        fn = getattr(inner, "controller_parameters", None)
        return list(fn()) if fn is not None else []

    @staticmethod
    def controller_reference(model, params, given) -> list[torch.Tensor]:
        """Weights that drift is measured from: given ones, the model's own initial copies, or now."""
        if given is not None:
            return [t.detach().to(p.device, p.dtype).clone() for t, p in zip(given, params)]
        fn = getattr(adapter.unwrap(model), "controller_initial_parameters", None)
        if fn is not None:
            init = list(fn())
            if len(init) == len(params):
                return init
        return [p.detach().clone() for p in params]

    @staticmethod
    def subscribe(model, fn) -> list:
        inner = adapter.unwrap(model)
        handle = inner.subscribe(fn)
        return list(handle) if isinstance(handle, (list, tuple)) else [handle]

    @staticmethod
    def freezes_topology(cfg, ev) -> bool:
        """Does this applied update store the layer's frozen topology (the first one in a freeze mode)?"""
        if ev.froze_topology is not None:
            return bool(ev.froze_topology)
        return getattr(cfg, "hierarchy_ablation_mode", "adaptive") in adapter.FREEZE_MODES

    @staticmethod
    def device(model) -> torch.device:
        for p in adapter.unwrap(model).parameters():
            return p.device
        return torch.device("cpu")

    @staticmethod
    def peak_memory_mb(device: torch.device) -> float:
        if device.type == "cuda":
            return torch.cuda.max_memory_allocated(device) / 2**20  # a host-side counter: no sync
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux

    @staticmethod
    def dist_rank() -> int:
        dist = torch.distributed
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    @staticmethod
    def dist_world_size() -> int:
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# ---------------------------------------------------------------------------- the recorder
class RoutingRecorder:
    """Record an AAH model's routing into a run directory (see ``docs/training.md``)."""

    def __init__(
        self,
        model: torch.nn.Module,
        run_dir: str | Path,
        detail: str = "full",
        *,
        flush_every: int = DEFAULT_FLUSH_EVERY,
        manifest: dict | None = None,
        resume_from_step: int | None = None,
        run_id: str | None = None,
        seed: int | None = None,
        preset: str | None = None,
        steps: int | None = None,
        data: Any = None,
        overwrite: bool = False,
        rank: int | None = None,
        record_eval_forwards: bool = False,
        controller_init: list[torch.Tensor] | None = None,
        manifest_extra: dict | None = None,
        backend: Any = None,
        background: bool = True,
    ):
        if detail not in DETAILS:
            raise ConfigError(f"recorder detail {detail!r} is not one of {', '.join(DETAILS)}")
        if int(flush_every) < 1:
            raise ConfigError(f"recorder flush_every must be >= 1, got {flush_every}")
        self.model = model
        self.run_dir = Path(run_dir)
        self.detail = detail
        self.flush_every = int(flush_every)
        self.resume_from_step = resume_from_step
        self.record_eval_forwards = record_eval_forwards
        self.rank = adapter.dist_rank() if rank is None else int(rank)
        self.is_writer = self.rank == 0
        self.cfg = adapter.model_config(model)
        self.n_layer, self.n_head = adapter.shape(model, self.cfg)
        self.max_depth = adapter.max_depth(self.cfg)
        self.w_min = adapter.w_min(self.cfg)
        self.windows = adapter.candidate_windows(self.cfg)
        self.seq_len = adapter.seq_len(self.cfg)
        self.flops_shape = adapter.flops_shape(self.cfg)
        self._manifest = manifest
        self._manifest_args = dict(
            run_id=run_id, seed=seed, preset=preset, steps=steps, data=data, backend=backend, extra=manifest_extra or {}
        )
        self._overwrite = overwrite
        self._controller_init = controller_init
        self.writer = None
        self.background = bool(background)
        self.write_cpu_s = 0.0  # CPU time spent building rows and writing segments (any thread)
        self.hot_path_s = 0.0  # wall time spent in event callbacks and step() on the training thread
        self._pool = None
        self._futures: list = []
        self._handles: list[Any] = []
        self.attached = False
        self._reset_buffers()

    # ------------------------------------------------------------------ lifecycle
    def _reset_buffers(self) -> None:
        self._layer_now: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        self._raw_now: dict[int, torch.Tensor] = {}
        self._work_now: dict[int, Any] = {}
        self._steps: list[int] = []
        self._step_idx: list[list[torch.Tensor]] = []
        self._step_win: list[list[torch.Tensor]] = []
        self._step_T: list[int] = []
        self._step_groups: list[np.ndarray] = []
        self._step_raw: list[dict[int, torch.Tensor]] = []
        self._step_work: list[dict[int, Any]] = []
        self._step_scalars: list[tuple[int, str, Any]] = []
        self._updates: list[dict[str, Any]] = []
        self._events: list[tuple[int, int | None, str, dict]] = []
        self._layer_scalars: list[tuple[int, int, str, Any]] = []
        self._needs_sync = False

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
        self._static_idx, self._static_win = adapter.static_windows(self.model, self.cfg)
        self._last_idx = [self._static_idx[l] for l in range(self.n_layer)]
        self._last_win = [self._static_win[l] for l in range(self.n_layer)]
        self._groups = np.full((self.n_layer, max(self.max_depth, 0), self.n_head), -1, dtype=np.int16)
        self._controller_params = adapter.controller_parameters(self.model)
        self._device = adapter.device(self.model)
        self._last_drift = None
        self._controller_ref = adapter.controller_reference(self.model, self._controller_params, self._controller_init)
        if not self.is_writer:  # only rank 0 writes; other ranks record nothing
            self.attached = True
            return self
        from aah_viz.runlog import RunWriter

        if self.resume_from_step is not None:
            self.writer = RunWriter.resume(self.run_dir, keep_through_step=int(self.resume_from_step))
            self._restore_from_run()
        else:
            self.writer = RunWriter.create(self.run_dir, self._build_manifest(), overwrite=self._overwrite)
        if self.background:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aah-recorder")
        try:
            self._handles = adapter.subscribe(self.model, self._on_event)
        except BaseException:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
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
                if self._pool is not None:
                    self._pool.shutdown(wait=True)
                    self._pool = None
                writer.close(status or STATUS_FINISHED)

    def __enter__(self) -> RoutingRecorder:
        return self.attach()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self.writer is not None:
            try:
                self._event(self._last_step_or_zero(), "error", error=exc_type.__name__, message=str(exc)[:500])
            except Exception:  # noqa: BLE001 - detaching must still happen
                pass
        self.detach(STATUS_FAILED if exc_type is not None else STATUS_FINISHED)

    def controller_reference(self) -> list[torch.Tensor]:
        """The controller weights that weight drift is measured from (saved in checkpoints)."""
        return [t.detach().cpu().clone() for t in getattr(self, "_controller_ref", [])]

    # ------------------------------------------------------------------ manifest / resume
    def _build_manifest(self) -> dict:
        if self._manifest is not None:
            return self._manifest
        from aah_viz.runlog import make_manifest

        args = self._manifest_args
        return make_manifest(
            run_id=args["run_id"] or self.run_dir.name,
            regime=adapter.regime(self.cfg),
            seed=args["seed"],
            config=adapter.config_dict(self.cfg),
            windows=list(self.windows),
            seq_len=self.seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            max_depth=self.max_depth,
            preset=args["preset"],
            steps=args["steps"],
            data=args["data"],
            world_size=adapter.dist_world_size(),
            backend=args["backend"] or getattr(self.cfg, "attention_backend", None),
            recorder={"detail": self.detail, "flush_every": self.flush_every},
            **args["extra"],
        )

    def _restore_from_run(self) -> None:
        """After a resume: the current groups per head and which layers already froze."""
        from aah_viz.runlog import load_run

        run = load_run(self.run_dir)
        heads = run.table("heads")
        if heads is not None and len(heads):
            last = heads[heads["step"] == heads["step"].max()]
            for level in range(self.max_depth):
                col = group_column(level)
                if col in last.columns:
                    vals = last[col].fillna(-1).to_numpy(dtype=np.int64)
                    self._groups[
                        last["layer"].to_numpy(dtype=np.int64), level, last["head"].to_numpy(dtype=np.int64)
                    ] = vals
        events = run.table("events")
        if events is not None and len(events):
            kinds = events["kind"].astype(str)
            self._frozen_layers = {int(l) for l in events.loc[kinds == "freeze", "layer"].dropna()}
            self._warmup_end_done = bool((kinds == "warmup_end").any())

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
                staged = (_stage(ev.window_idx), _stage(ev.windows), int(ev.seq_len))
                self._event_src[layer] = (ev.window_idx, ev.windows, staged)
            self._layer_now[layer] = staged if staged[2] == int(ev.seq_len) else (staged[0], staged[1], int(ev.seq_len))
        elif int(ev.seq_len) == self.seq_len:  # a plain layer (baselines): its fixed window, known since attach
            self._layer_now[layer] = (self._static_idx[layer], self._static_win[layer], self.seq_len)
        else:  # rare: a plain layer at another length (a blocking copy is acceptable here)
            win = ev.windows.detach().cpu()
            self._layer_now[layer] = (adapter.candidate_index(win, self.windows), win, int(ev.seq_len))
        self._needs_sync = self._needs_sync or ev.window_idx.device.type != "cpu"
        if ev.realised_work is not None:
            self._work_now[layer] = (
                _stage(ev.realised_work) if isinstance(ev.realised_work, torch.Tensor) else ev.realised_work
            )
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
            self._raw_now[layer] = _stage(ev.raw_head_idx)
        tree = ev.tree or []
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
        if tree and ev.applied and layer not in self._frozen_layers and adapter.freezes_topology(self.cfg, ev):
            self._frozen_layers.add(layer)
            self._event(
                step,
                "freeze",
                layer=layer,
                path_mode=ev.path_mode,
                topology=[tl.groups for tl in tree],
                members=[tl.members for tl in tree],
            )
        if self.detail == "minimal" or not tree:
            return
        levels = []
        for tl in tree:
            entry = {
                "level": tl.level,
                "groups": tl.groups,
                "parent": tl.parent,
                "members": tl.members,
                "logits": _keep(tl.logits),
                "base_logits": _keep(tl.base_logits),
                "raw_idx": _keep(tl.raw_idx),
                "final_idx": _keep(tl.final_idx),
                "joint_paired": list(tl.joint_paired),
                "facts": tl.facts,
                "features": _stage(tl.features) if (self.detail == "full" and tl.features is not None) else None,
            }
            levels.append(entry)
        # the level-0 clustering input, for the partition's validity (fixed and frozen paths have none)
        level0_features = _stage(ev.head_features) if ev.head_features is not None else None
        self._updates.append(
            {"step": step, "layer": layer, "shadow": not ev.applied, "levels": levels, "features": level0_features}
        )

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
        self._steps.append(step)
        self._step_idx.append(idx_rows)  # stacked by the writer, once non-blocking copies are complete
        self._step_win.append(win_rows)
        self._step_T.append(seq_len)
        self._step_groups.append(self._groups)
        self._step_raw.append(self._raw_now)
        self._step_work.append(self._work_now)
        self._layer_now, self._raw_now, self._work_now = {}, {}, {}
        add = self._step_scalars.append
        if loss is not None:
            add((step, "loss", _stage(loss) if isinstance(loss, torch.Tensor) else loss))
        if lr is not None:
            add((step, "lr", lr))
        add((step, "step_time_s", step_time))
        if tokens is not None and step_time > 0:
            add((step, "tokens_per_s", float(tokens) / step_time))
        add((step, "peak_mem_mb", adapter.peak_memory_mb(self._device)))
        grad_norm, drift = self._controller_health()
        add((step, "controller_grad_norm", grad_norm))
        add((step, "controller_weight_drift", drift))
        for name, value in scalars.items():
            if value is not None:
                add((step, name, _stage(value) if isinstance(value, torch.Tensor) else value))
        self._since_flush += 1
        if self._since_flush >= self.flush_every:
            self.flush()

    def _controller_health(self) -> tuple[Any, Any]:
        """(gradient norm, weight drift) of the routing networks, as device tensors (no sync).

        Without any gradient the optimiser leaves the weights alone (AdamW skips parameters
        without a gradient, weight decay included), so the drift is the last value computed.
        """
        params = self._controller_params
        if not params:
            return 0.0, 0.0
        grads = [p.grad for p in params if p.grad is not None]
        if not grads and self._last_drift is not None:
            return 0.0, self._last_drift
        grad_norm = _stage(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))) if grads else 0.0
        with torch.no_grad():
            diffs = torch._foreach_sub([p.detach() for p in params], self._controller_ref)
            drift = _stage(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(diffs))))
        self._last_drift = drift
        return grad_norm, drift

    def eval(self, step: int, *, val_loss: float, n_batches: int | None = None, **scalars: Any) -> None:
        """Record one evaluation: ``val_loss``, ``val_ppl`` and an ``eval`` event."""
        if not self.attached or not self.is_writer:
            return
        val_loss = _float_or_none(val_loss)
        ppl = math.exp(val_loss) if val_loss is not None and val_loss < 700 else None
        self._step_scalars.append((int(step), "val_loss", val_loss))
        self._step_scalars.append((int(step), "val_ppl", ppl))
        extra = {k: _float_or_none(v) for k, v in scalars.items()}
        for name, value in extra.items():
            self._step_scalars.append((int(step), name, value))
        self._event(int(step), "eval", val_loss=val_loss, val_ppl=ppl, n_batches=n_batches, **extra)

    def scalars(self, step: int, layer: int | None = None, **named: Any) -> None:
        """Extra named scalars of an already recorded ``step`` (model-wide unless ``layer``)."""
        if not self.attached or not self.is_writer:
            return
        if layer is None:
            for name, value in named.items():
                self._step_scalars.append(
                    (int(step), name, _stage(value) if isinstance(value, torch.Tensor) else value)
                )
            return
        for name, value in named.items():
            self._layer_scalars.append(
                (int(step), int(layer), name, _stage(value) if isinstance(value, torch.Tensor) else value)
            )

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
        self._events.append((int(step), None if layer is None else int(layer), kind, detail))

    def _write_events(self, writer, events) -> None:
        from aah_viz.runlog.manifest import to_jsonable

        writer.append(
            "events",
            {
                "step": np.asarray([e[0] for e in events], dtype=np.int64),
                "layer": pa.array([e[1] for e in events], type=pa.int16()),
                "kind": [e[2] for e in events],
                "detail": [json.dumps(to_jsonable(e[3]), sort_keys=True) for e in events],
            },
        )

    def _last_step_or_zero(self) -> int:
        if self._steps:
            return self._steps[-1]
        if self.writer is not None and self.writer.last_step is not None:
            return int(self.writer.last_step)
        return 0

    # ------------------------------------------------------------------ flush: numpy row building
    def flush(self, wait: bool = False) -> None:
        """Write what is buffered as one atomic segment per table.

        With ``background=True`` (the default) the rows are built and written by one worker
        thread, in order, while training goes on; ``wait=True`` returns only once everything
        flushed so far is on disk (``checkpoint`` and ``detach`` wait).
        """
        if self.writer is None:
            return
        self._raise_failed()
        payload = self._snapshot()
        if self._pool is None:
            self._write_payload(self.writer, payload)
            return
        self._futures.append(self._pool.submit(self._write_payload, self.writer, payload))
        if wait:
            self._wait()

    def _raise_failed(self) -> None:
        """Re-raise, in the training thread, an error a background flush met."""
        done = [f for f in self._futures if f.done()]
        self._futures = [f for f in self._futures if not f.done()]
        for f in done:
            f.result()

    def _wait(self) -> None:
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()

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
        payload = {
            "steps": self._steps,
            "idx": self._step_idx,
            "win": self._step_win,
            "groups": self._step_groups,
            "raw": self._step_raw,
            "work": self._step_work,
            "T": self._step_T,
            "scalars": self._step_scalars,
            "layer_scalars": self._layer_scalars,
            "updates": self._updates,
            "events": self._events,
            "ready": ready,
        }
        self._steps, self._step_idx, self._step_win, self._step_groups = [], [], [], []
        self._step_raw, self._step_work, self._step_T, self._step_scalars, self._updates = [], [], [], [], []
        self._events, self._layer_scalars = [], []
        self._needs_sync = False
        return payload

    def _write_payload(self, writer, p: dict) -> None:
        started = time.thread_time()
        try:
            self._write_payload_rows(writer, p)
        finally:
            self.write_cpu_s += time.thread_time() - started

    def _write_payload_rows(self, writer, p: dict) -> None:
        if p["ready"] is not None:
            p["ready"].synchronize()
        if p["steps"]:
            idx = torch.stack([torch.stack(rows) for rows in p["idx"]]).numpy()
            win = torch.stack([torch.stack(rows) for rows in p["win"]]).numpy()
            self._write_steps(
                writer,
                np.asarray(p["steps"], dtype=np.int64),
                idx,
                win,
                np.asarray(p["T"], dtype=np.int64),
                p["groups"],
                p["raw"],
                p["work"],
                p["scalars"],
            )
        elif p["scalars"]:
            self._write_scalars(writer, p["scalars"], [])
        if p["layer_scalars"]:
            rows = p["layer_scalars"]
            writer.append(
                "scalars",
                {
                    "step": np.asarray([r[0] for r in rows], dtype=np.int64),
                    "layer": np.asarray([r[1] for r in rows], dtype=np.int16),
                    "name": [r[2] for r in rows],
                    "value": pa.array([_float_or_none(_host(r[3])) for r in rows], type=pa.float64()),
                },
            )
        if p["updates"] and self.detail != "minimal":
            self._write_tree(writer, p["updates"])
            validity = validity_columns(p["updates"], self.cfg.sim_threshold)
            if validity:
                writer.append("cluster_validity", validity)
        if p["events"]:
            self._write_events(writer, p["events"])
        writer.flush()

    def _write_steps(self, writer, steps, idx, win, T, groups_list, raw_list, work_list, scalars) -> None:
        S, L, H = win.shape
        n = S * L * H
        raw = np.full((S, L, H), -1, dtype=np.int64)
        for s, per_layer in enumerate(raw_list):
            for layer, t in per_layer.items():
                raw[s, layer] = t.numpy()
        heads = {
            "step": np.repeat(steps, L * H),
            "layer": np.tile(np.repeat(np.arange(L, dtype=np.int16), H), S),
            "head": np.tile(np.arange(H, dtype=np.int16), S * L),
            "window_idx": _int_col(idx.reshape(n), pa.int8(), null_below=0),
            "window": pa.array(win.reshape(n), type=pa.int32()),
            "raw_idx": _int_col(raw.reshape(n), pa.int8(), null_below=0),
        }
        if self.max_depth:
            groups = np.stack(groups_list)  # (S, L, depth, H)
            for level in range(self.max_depth):
                heads[group_column(level)] = _int_col(groups[:, :, level, :].reshape(n), pa.int16(), null_below=0)
        writer.append("heads", heads)
        acr, causal = layer_coverage(win, T, self.w_min)  # (S, L)
        model_acr, model_causal = acr.mean(axis=1), causal.mean(axis=1)
        per_layer = [("acr", acr), ("acr_causal", causal)]
        work_rows = [
            (steps[s], layer, _float_or_none(_host(v))) for s, d in enumerate(work_list) for layer, v in d.items()
        ]
        layer_cols = {
            "step": np.concatenate([np.repeat(steps, L)] * len(per_layer)),
            "layer": np.concatenate([np.tile(np.arange(L), S)] * len(per_layer)),
            "name": np.repeat([name for name, _ in per_layer], S * L),
            "value": np.concatenate([vals.reshape(S * L) for _, vals in per_layer]),
        }
        model_rows = [(steps, "acr", model_acr), (steps, "acr_causal", model_causal)]
        if self.flops_shape is not None:
            from aah_viz.coverage import flops_ratio_est

            n_embd, n_ff = self.flops_shape
            model_rows.append(
                (
                    steps,
                    "flops_ratio_est",
                    np.asarray(
                        [flops_ratio_est(a, seq_len=int(t), n_embd=n_embd, n_ff=n_ff) for a, t in zip(model_acr, T)]
                    ),
                )
            )
        if work_rows:
            by_step: dict[int, list[float]] = {}
            for st, _, v in work_rows:
                if v is not None:
                    by_step.setdefault(int(st), []).append(v)
            model_rows.append(
                (
                    np.asarray(list(by_step), dtype=np.int64),
                    "realised_work",
                    np.asarray([np.mean(v) for v in by_step.values()], dtype=np.float64),
                )
            )
            layer_cols["step"] = np.concatenate([layer_cols["step"], [r[0] for r in work_rows]])
            layer_cols["layer"] = np.concatenate([layer_cols["layer"], [r[1] for r in work_rows]])
            layer_cols["name"] = np.concatenate([layer_cols["name"], ["realised_work"] * len(work_rows)])
            layer_cols["value"] = np.concatenate(
                [layer_cols["value"], [np.nan if r[2] is None else r[2] for r in work_rows]]
            )
        writer.append("scalars", layer_cols)
        self._write_scalars(writer, scalars, model_rows)
        if self.detail != "minimal":
            self._write_branch(writer, steps, win)

    def _write_scalars(self, writer, scalars, model_rows) -> None:
        steps = [s for s, _, _ in scalars]
        names = [n for _, n, _ in scalars]
        values = [_float_or_none(_host(v)) for _, _, v in scalars]
        for st, name, vals in model_rows:
            steps.extend(np.asarray(st).tolist())
            names.extend([name] * len(vals))
            values.extend(np.asarray(vals, dtype=np.float64).tolist())
        if not steps:
            return
        writer.append(
            "scalars",
            {
                "step": np.asarray(steps, dtype=np.int64),
                "layer": pa.nulls(len(steps), type=pa.int16()),
                "name": names,
                "value": pa.array(values, type=pa.float64()),
            },
        )

    def _write_branch(self, writer, steps, win) -> None:
        S, L, H = win.shape
        values = np.unique(win)
        frac = (win[..., None] == values).mean(axis=2)  # (S, L, V)
        s_i, l_i, v_i = np.nonzero(frac)
        writer.append(
            "branch",
            {
                "step": steps[s_i],
                "layer": l_i.astype(np.int16),
                "window": values[v_i].astype(np.int32),
                "fraction": frac[s_i, l_i, v_i].astype(np.float32),
            },
        )

    def _write_tree(self, writer, updates) -> None:
        cols: dict[str, list] = {
            k: []
            for k in (
                "step",
                "layer",
                "level",
                "node",
                "parent",
                "members",
                "children",
                "logits",
                "base_logits",
                "margin",
                "raw_idx",
                "final_idx",
                "joint_paired",
                "joint_delta",
                "shadow",
                "origin",
                "forced_split",
                "merged",
                "sim_mean",
                "sim_std",
                "sim_min",
                "sim_max",
                "features",
            )
        }
        keep_vectors = self.detail == "full"
        for upd in updates:
            for lv in upd["levels"]:
                logits = lv["logits"].float().numpy()
                base = lv["base_logits"].float().numpy()
                n = logits.shape[0]
                if n == 0:
                    continue
                if logits.shape[1] >= 2:
                    top2 = np.sort(logits, axis=1)[:, -2:]
                    margin = top2[:, 1] - top2[:, 0]
                else:
                    margin = np.zeros(n)
                delta = np.linalg.norm(logits - base, axis=1)
                paired = np.asarray(lv["joint_paired"], dtype=bool) if lv["joint_paired"] else np.zeros(n, bool)
                delta = np.where(paired, delta, 0.0)
                facts = lv["facts"]
                feats = lv["features"].float().numpy() if lv["features"] is not None else None
                cols["step"] += [upd["step"]] * n
                cols["layer"] += [upd["layer"]] * n
                cols["level"] += [lv["level"]] * n
                cols["node"] += list(range(n))
                cols["parent"] += list(lv["parent"]) if lv["parent"] is not None else [None] * n
                cols["members"] += [list(m) for m in lv["members"]]
                cols["children"] += [list(g) for g in lv["groups"]]
                cols["logits"] += logits.tolist() if keep_vectors else [[] for _ in range(n)]
                cols["base_logits"] += base.tolist() if keep_vectors else [[] for _ in range(n)]
                cols["margin"] += margin.tolist()
                cols["raw_idx"] += lv["raw_idx"].numpy().tolist()
                cols["final_idx"] += lv["final_idx"].numpy().tolist()
                cols["joint_paired"] += paired.tolist()
                cols["joint_delta"] += delta.tolist()
                cols["shadow"] += [upd["shadow"]] * n
                cols["origin"] += [facts.origin] * n
                cols["forced_split"] += [bool(facts.forced_split)] * n
                cols["merged"] += [int(facts.merged)] * n
                for key in ("sim_mean", "sim_std", "sim_min", "sim_max"):
                    cols[key] += [_float_or_none(getattr(facts, key))] * n
                cols["features"] += feats.tolist() if feats is not None else [[] for _ in range(n)]
        if cols["step"]:
            writer.append("tree", cols)
