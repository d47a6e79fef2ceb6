"""The model side of aah-viz (needs torch): the AAH-v3 model, its regimes, backends and recorder.

    from instrumentation import AAHConfig, AAHTransformer
    cfg = AAHConfig.from_preset("tiny", regime="shallow_freeze")
    model = AAHTransformer(cfg)

Names are imported on first use, so ``instrumentation.config`` (the config, presets and regimes)
can be read without torch, and a missing optional module never breaks the others.
"""

from __future__ import annotations

import importlib

# Public name -> "module" or "module:attribute" (where the public name differs from the module's).
# The CLI imports only these names (tests/test_light_side.py enforces it).
_EXPORTS = {
    "AAHConfig": "instrumentation.config",
    "PRESETS": "instrumentation.config",
    "REGIMES": "instrumentation.config",
    "regimes_table": "instrumentation.config",
    "AAHTransformer": "instrumentation.model",
    "ModelOutput": "instrumentation.model",
    "RoutingEvent": "instrumentation.events",
    "TreeLevel": "instrumentation.events",
    "ClusterFacts": "instrumentation.events",
    "RoutingRecorder": "instrumentation.recorder",
    "TrainConfig": "instrumentation.training.train",
    "train_model": "instrumentation.training.train:train",
    "check_device": "instrumentation.training.settings",
    "check_conformance_file": "instrumentation.conformance:check_file",
    "conformance_passed": "instrumentation.conformance:passed",
    "load_aah_checkpoint": "instrumentation.probe_extract",
    "AAHAttentionSource": "instrumentation.probe_extract",
    "load_hf_model": "instrumentation.probe_extract",
    "load_retrofit_adapter": "instrumentation.probe_extract",
    "probe_target": "instrumentation.probing",
    "ProbeSettings": "instrumentation.probing",
    "ProbeOutcome": "instrumentation.probing",
    "load_for_evaluation": "instrumentation.evaluation",
    "evaluate_loaded": "instrumentation.evaluation:evaluate",
    "write_inference": "instrumentation.evaluation",
    "inference_summary_json": "instrumentation.evaluation:summary_json",
    "profile_source": "instrumentation.evaluation",
    "record_lens": "instrumentation.lens",
    "write_lens": "instrumentation.lens",
    "measure_heads": "instrumentation.head_measures:measure",
    "RetrofitConfig": "instrumentation.retrofit.adapt",
    "retrofit_adapt": "instrumentation.retrofit.adapt:adapt",
    "import_gguf": "instrumentation.retrofit.gguf_import",
    "FrontierConfig": "instrumentation.frontier",
    "run_frontier": "instrumentation.frontier",
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
