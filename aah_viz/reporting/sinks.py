"""Where our own loops (and ``aah-viz export tensorboard``) send routing: TensorBoard, Weights & Biases, MLflow.

Each sink takes ``scalars(step, {name: value})``, ``image(step, tag, rgb)`` and ``close()``, opens from a
``SinkOpening`` (``Sink.open``), and imports its package only when it is opened, so a missing one is one
line naming the extra to install. ``SINKS`` lists them by the name ``--report-to`` takes.

- ``tensorboard``: event files in a folder, through TensorBoard's own event writer (no torch);
- ``wandb``: a W&B run; project, mode and folder from W&B's own settings (``WANDB_PROJECT``, default
  ``aah-viz``; ``WANDB_MODE``; ``WANDB_DIR``);
- ``mlflow``: an MLflow run; tracking store and experiment from MLflow's own settings
  (``MLFLOW_TRACKING_URI``; ``MLFLOW_EXPERIMENT_NAME``, default ``aah-viz``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aah_viz.errors import ConfigError
from aah_viz.reporting.heatmap import png_bytes
from aah_viz.torch_import import EXTRAS


@dataclass(frozen=True)
class SinkOpening:
    """What a sink may use when it opens: the run's TensorBoard folder, its name and config, and for a
    resumed run the step it continues at (None: a new run)."""

    tensorboard_dir: Path
    run_name: str
    config: dict[str, Any] | None = None
    first_step: int | None = None


def parse_targets(text: str | None) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` -> the named targets, in order, each once; an unknown name is refused."""
    if not text:
        return ()
    names = [n.strip().lower() for n in str(text).split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise ConfigError(f"--report-to {', '.join(unknown)}: not one of {', '.join(TARGETS)} (comma-separated)")
    return tuple(dict.fromkeys(names))


def _missing(target: str, err: ModuleNotFoundError) -> ConfigError:
    return ConfigError(
        f"--report-to {target} needs the {err.name or target} package: pip install 'aah-viz[{EXTRAS[target]}]'"
    )


EVENT_FILE_PREFIX = "events.out.tfevents."


def _wait_to_sort_last(logdir: Path, limit_s: float = 2.0) -> None:
    """TensorBoard reads a folder's event files in name order, and a name starts with the second it was
    created in: wait (a second at most, in practice) until a new file's name sorts after every one there,
    so a resumed session's points come after the ones it replaces."""
    stamps = []
    for path in logdir.glob(EVENT_FILE_PREFIX + "*"):
        stamp = path.name[len(EVENT_FILE_PREFIX) :].split(".")[0]
        if stamp.isdigit():
            stamps.append(int(stamp))
    deadline = time.monotonic() + limit_s  # a file stamped in the future (clock skew) is not waited for long
    while stamps and int(time.time()) <= max(stamps) and time.monotonic() < deadline:
        time.sleep(0.05)


class TensorBoardSink:
    """Event files under ``logdir`` (TensorBoard shows each folder of event files as one run).

    ``fresh=True`` first deletes the event files already there (a run started again in the same
    folder); ``purge_step`` S starts a session there, so TensorBoard drops what earlier files hold
    from step S on (a resumed run that rewrites its steps after the checkpoint it went back to).
    """

    name = "tensorboard"

    @classmethod
    def open(cls, at: SinkOpening) -> TensorBoardSink:
        return cls(at.tensorboard_dir, fresh=at.first_step is None, purge_step=at.first_step)

    def __init__(self, logdir: str | Path, *, fresh: bool = False, purge_step: int | None = None):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ModuleNotFoundError as err:
            raise _missing("tensorboard", err) from None
        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self.logdir = Path(logdir)
        if fresh and self.logdir.is_dir():
            for old in self.logdir.glob(EVENT_FILE_PREFIX + "*"):
                old.unlink()
        if purge_step is not None:
            _wait_to_sort_last(self.logdir)
        self._writer = EventFileWriter(str(self.logdir))
        if purge_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._writer.add_event(self._event(wall_time=time.time(), step=int(purge_step), session_log=start))

    def _add(self, step: int, values: list, wall_time: float | None) -> None:
        summary = self._summary(value=values)
        self._writer.add_event(self._event(wall_time=wall_time or time.time(), step=int(step), summary=summary))

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        if values:
            items = [self._summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]
            self._add(step, items, wall_time)

    def image(self, step: int, tag: str, rgb: np.ndarray, wall_time: float | None = None) -> None:
        h, w, _ = rgb.shape
        img = self._summary.Image(height=h, width=w, colorspace=3, encoded_image_string=png_bytes(rgb))
        self._add(step, [self._summary.Value(tag=tag, image=img)], wall_time)

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """One W&B run (``wandb.init``), closed with ``finish``."""

    name = "wandb"

    @classmethod
    def open(cls, at: SinkOpening) -> WandbSink:
        return cls(at.run_name, at.config)

    def __init__(self, run_name: str, config: dict[str, Any] | None = None):
        try:
            import wandb
        except ModuleNotFoundError as err:
            raise _missing("wandb", err) from None
        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "aah-viz",
            name=run_name,
            config=config or {},
            dir=os.environ.get("WANDB_DIR") or None,
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if values:
            self._run.log(dict(values), step=int(step))

    def image(self, step: int, tag: str, rgb: np.ndarray) -> None:
        self._run.log({tag: self._wandb.Image(rgb)}, step=int(step))

    def close(self) -> None:
        self._run.finish()


class MLflowSink:
    """One MLflow run through ``MlflowClient`` (no global active run is touched)."""

    name = "mlflow"

    @classmethod
    def open(cls, at: SinkOpening) -> MLflowSink:
        return cls(at.run_name, at.config)

    def __init__(self, run_name: str, params: dict[str, Any] | None = None):
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ModuleNotFoundError as err:
            raise _missing("mlflow", err) from None
        self._metric = Metric
        self._client = client = MlflowClient()
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "aah-viz"
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        self.run_id = client.create_run(experiment_id, run_name=run_name).info.run_id
        if params:
            client.log_batch(self.run_id, params=[Param(k, str(v)[:500]) for k, v in params.items()])

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if values:
            now = int(time.time() * 1000)
            metrics = [self._metric(k, float(v), now, int(step)) for k, v in values.items()]
            self._client.log_batch(self.run_id, metrics=metrics)

    def image(self, step: int, tag: str, rgb: np.ndarray) -> None:
        self._client.log_image(self.run_id, rgb, key=tag, step=int(step))

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


SINKS = {sink.name: sink for sink in (TensorBoardSink, WandbSink, MLflowSink)}  # each name its package's
TARGETS = tuple(SINKS)


def open_sinks(
    targets,
    *,
    tensorboard_dir: str | Path,
    run_name: str,
    config: dict | None = None,
    first_step: int | None = None,
) -> list:
    """The named sinks, opened; if one fails, the ones already open are closed and the error raised.

    ``first_step`` None: a new run (TensorBoard's earlier files in ``tensorboard_dir`` are removed);
    else a resumed run continuing at that step (TensorBoard drops earlier files' points from there).
    """
    at = SinkOpening(Path(tensorboard_dir), run_name, config, first_step)
    sinks: list = []
    try:
        for target in targets:
            if target not in SINKS:
                raise ConfigError(f"--report-to {target}: not one of {', '.join(TARGETS)}")
            sinks.append(SINKS[target].open(at))
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks


def close_sinks(sinks) -> None:
    """Close every sink; the first error is raised after all were tried."""
    first = None
    for sink in sinks:
        try:
            sink.close()
        except Exception as err:  # noqa: BLE001 - the others must still close
            first = first or err
    if first is not None:
        raise first
