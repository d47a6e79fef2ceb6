"""Our own loops' reporting (``aah-viz train``, ``aah-viz retrofit``): what is sent, and when.

The ``aah/`` scalars of the step (with the training loss and learning rate, ``train/loss`` and
``train/lr``) every ``every`` steps and at the last step, each evaluation's ``eval/val_loss``, and the
layer x head window heatmap (``aah/windows``) every ``images`` routing updates (0: never).
"""

from __future__ import annotations

from dataclasses import dataclass

from aah_viz.errors import ConfigError
from aah_viz.reporting.heatmap import window_heatmap
from aah_viz.reporting.scalars import RoutingRows, step_scalars
from aah_viz.reporting.sinks import close_sinks

HEATMAP_TAG = "aah/windows"


@dataclass(frozen=True)
class ReportSettings:
    targets: tuple[str, ...] = ()  # tensorboard, wandb, mlflow
    every: int = 10  # steps between scalar reports
    images: int = 0  # routing updates between heatmaps; 0: none
    layers: bool = False  # per-layer mean windows too

    def __post_init__(self):
        if int(self.every) < 1:
            raise ConfigError(f"--report-every must be an integer >= 1, got {self.every}")
        if int(self.images) < 0:
            raise ConfigError(f"--report-images must be an integer >= 0, got {self.images}")


class Reporter:
    """Sends one run's routing to its open sinks on the settings' cadences."""

    def __init__(self, settings: ReportSettings, sinks: list):
        self.settings = settings
        self.sinks = sinks
        self._images_sent = 0  # heatmaps sent, one per ``images`` routing updates

    def due(self, step: int, last: bool) -> bool:
        return (int(step) + 1) % self.settings.every == 0 or last

    def image_due(self, routing_updates: int) -> bool:
        n = self.settings.images
        return n > 0 and routing_updates // n > self._images_sent

    def scalars(self, step: int, rows: RoutingRows | None, **extra: float | None) -> dict[str, float]:
        values = {k: float(v) for k, v in extra.items() if v is not None}
        if rows is not None:
            values.update(step_scalars(rows, per_layer=self.settings.layers))
        for sink in self.sinks:
            sink.scalars(step, values)
        return values

    def image(self, step: int, rows: RoutingRows, routing_updates: int) -> None:
        rgb = window_heatmap(rows.windows[-1], rows.candidates)
        for sink in self.sinks:
            sink.image(step, HEATMAP_TAG, rgb)
        self._images_sent = routing_updates // max(self.settings.images, 1)

    def close(self) -> None:
        sinks, self.sinks = self.sinks, []
        close_sinks(sinks)
