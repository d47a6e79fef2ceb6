"""Run a model on text and write what it measures: evaluation and inference, the attention profile,
the quality-against-compute frontier, head measures, the probes' attention sources and head groups,
and the lens. These stand on the model, the recorder, training and retrofit, never the other way
(docs/internals.md, the floors of ``instrumentation``)."""
