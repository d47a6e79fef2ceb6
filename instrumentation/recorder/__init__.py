"""The recorder: ``RoutingRecorder`` subscribes to a model's routing events and hands their rows to
the run writer (``routing_recorder``) of the run a ``Recording`` describes (``recording``), through one
worker thread (``row_worker``); what it reads from the model (``model_state``), how a snapshot becomes
rows (``payload``, ``validity_rows``). What a trainer's logger reads of the last closed step is
``aah_viz.reporting.last_step``."""

from instrumentation.recorder.recording import Recording
from instrumentation.recorder.routing_recorder import RoutingRecorder

__all__ = ["Recording", "RoutingRecorder"]
