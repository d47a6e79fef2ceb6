"""The benchmark bodies behind ``aah-viz bench``: each runs variants side by side in one process
(interleaved repeats, medians) and returns a JSON-ready dict with the ratios.
"""

from instrumentation.bench.attention import bench_attention
from instrumentation.bench.generate import bench_generate
from instrumentation.bench.hooks import bench_hooks
from instrumentation.bench.probe import bench_probe
from instrumentation.bench.routing import bench_routing
from instrumentation.bench.step import bench_step

__all__ = ["bench_attention", "bench_generate", "bench_hooks", "bench_probe", "bench_routing", "bench_step"]
