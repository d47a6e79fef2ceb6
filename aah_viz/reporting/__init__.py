"""Routing where researchers already look: scalars and window heatmaps for TensorBoard, W&B and MLflow.

- ``scalars``: the ``aah/`` scalars from routing rows (one pure function, live and on finished runs);
- ``heatmap``: the layer x head window heatmap as an RGB image (and PNG bytes), numpy only;
- ``sinks``: TensorBoard (its own event writer, no torch), Weights & Biases and MLflow writers, each
  imported only when named;
- ``reporter``, ``options``: our loops' cadence and flags; ``from_run``: a finished run's tables as
  routing rows; ``tensorboard_export``: runs as event files.

No torch anywhere here; the optional packages are imported inside the sink that needs them. This
package imports nothing itself, so the command line's ``--report-to`` flags (``options``) load fast.
"""
