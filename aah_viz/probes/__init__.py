"""Syntactic and coreference probes on attention (numpy), their input readers and converters,
window sufficiency, and comparisons of AAH head groups with probe-derived head clusters.

No torch here: attention comes from a duck-typed source (``aah_viz.probes.predict``), which
``instrumentation.measure.probe_extract`` provides for AAH checkpoints and Hugging Face models.
"""
