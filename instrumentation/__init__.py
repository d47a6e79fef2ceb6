"""The model side of aah-viz (needs torch): the AAH-v3 model, its regimes, backends and recorder.

    from instrumentation import AAHConfig, AAHTransformer
    cfg = AAHConfig.from_preset("tiny", regime="shallow_freeze")
    model = AAHTransformer(cfg)

Names are imported on first use, so ``instrumentation.config`` (the config and its size presets)
can be read without torch, and a missing optional module never breaks the others.
"""

from __future__ import annotations

import importlib

# Public name -> "module" or "module:attribute" (where the public name differs from the module's).
# The CLI imports only these names (tests/test_light_side.py enforces it).
_EXPORTS = {
    "AAHConfig": "instrumentation.config",
    "PRESETS": "instrumentation.config",
    "AAHTransformer": "instrumentation.model",
    "ModelOutput": "instrumentation.model",
    "RoutingEvent": "instrumentation.events",
    "TreeLevel": "instrumentation.events",
    "ClusterFacts": "instrumentation.events",
    "Recording": "instrumentation.recorder",
    "RoutingRecorder": "instrumentation.recorder",
    "TrainConfig": "instrumentation.training.train",
    "train_model": "instrumentation.training.train:train",
    "check_device": "instrumentation.training.settings",
    "check_conformance_file": "instrumentation.routing.conformance:check_file",
    "conformance_passed": "instrumentation.routing.conformance:passed",
    "load_aah_checkpoint": "instrumentation.measure.probe_extract",
    "AAHAttentionSource": "instrumentation.measure.probe_extract",
    "load_hf_model": "instrumentation.measure.probe_extract",
    "load_retrofit_adapter": "instrumentation.measure.probe_extract",
    "probe_target": "instrumentation.measure.probing",
    "ProbeSettings": "instrumentation.measure.probing",
    "ProbeOutcome": "instrumentation.measure.probing",
    "load_for_evaluation": "instrumentation.measure.evaluation",
    "evaluate_loaded": "instrumentation.measure.evaluation:evaluate",
    "write_inference": "instrumentation.measure.evaluation",
    "inference_summary": "instrumentation.measure.evaluation:summary_fields",
    "profile_source": "instrumentation.measure.evaluation",
    "record_lens": "instrumentation.measure.lens",
    "lens_progress": "instrumentation.measure.lens",
    "write_lens": "instrumentation.measure.lens",
    "longest_lens_document": "instrumentation.measure.lens:longest_document",
    "measure_heads": "instrumentation.measure.head_measures:measure",
    "RetrofitConfig": "instrumentation.retrofit.adapt",
    "retrofit_adapt": "instrumentation.retrofit.adapt:adapt",
    "import_gguf": "instrumentation.retrofit.gguf_import",
    "FrontierConfig": "instrumentation.measure.frontier.plan",
    "run_frontier": "instrumentation.measure.frontier.run",
    "bench_retrofit": "instrumentation.bench.retrofit",
    "bench_attention": "instrumentation.bench",
    "bench_generate": "instrumentation.bench",
    "bench_hooks": "instrumentation.bench",
    "bench_probe": "instrumentation.bench",
    "bench_routing": "instrumentation.bench",
    "bench_step": "instrumentation.bench",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'instrumentation' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
