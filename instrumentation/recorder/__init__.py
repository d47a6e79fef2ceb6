"""The recorder: ``RoutingRecorder`` subscribes to a model's routing events and hands their rows to
the run writer (``routing_recorder``); what it reads from the model (``model_state``), how a
snapshot becomes rows (``payload``, ``validity_rows``)."""

from instrumentation.recorder.routing_recorder import RoutingRecorder

__all__ = ["RoutingRecorder"]
