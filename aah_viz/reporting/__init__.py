"""Routing where researchers already look: scalars and window heatmaps for TensorBoard, W&B and MLflow.

- ``scalars``: the ``aah/`` scalars from routing rows (one pure function, live and on finished runs);
- ``heatmap``: the layer x head window heatmap as an RGB image (and PNG bytes), numpy only;
- ``sinks``: TensorBoard (its own event writer, no torch), Weights & Biases and MLflow writers, each
  imported only when named;
- ``from_run``: a finished run's tables as routing rows; ``tensorboard_export``: runs as event files.

No torch anywhere here; the optional packages are imported inside the sink that needs them.
"""

from aah_viz.reporting.scalars import PREFIX, RoutingRows, routing_scalars, scalars_at, step_scalars

__all__ = ["PREFIX", "RoutingRows", "routing_scalars", "scalars_at", "step_scalars"]
