"""Generated runs for tests, benchmarks and trying things out: written through the real writer, no model.

``make_synthetic_run`` a training run, ``make_synthetic_frontier_run`` a frontier run, ``add_synthetic_lens``
a token lens added to a run."""

from aah_viz.samples.frontier import make_synthetic_frontier_run
from aah_viz.samples.lens import add_synthetic_lens
from aah_viz.samples.synthetic import make_synthetic_run

__all__ = ["add_synthetic_lens", "make_synthetic_frontier_run", "make_synthetic_run"]
