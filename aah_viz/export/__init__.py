"""Paper exports: tables (CSV, Markdown, LaTeX), seed statistics, static figures.

``collect_runs(paths)`` opens the runs; ``build_table(name, runs, **opts) -> Table`` and
``render(table, fmt)`` make the tables (the kinds are ``aah_viz.export.kinds.TABLE_KINDS``);
``aah_viz.export.stats`` applies the statistics (``aah_viz.stats``) to runs: summaries, factorial view; and
``aah_viz.export.comparisons`` the tables built from them; ``write_figure`` exports a Plotly figure to PNG,
SVG or PDF. ``docs/export.md`` documents them.
"""

from aah_viz.export.comparisons import (
    comparison_table,
    difference_curve_table,
    difference_curves_table,
    factorial_table,
)
from aah_viz.export.formats import render
from aah_viz.export.runs import MixedConfigError, collect_runs
from aah_viz.export.static import figure_bytes, write_figure
from aah_viz.export.table import Table
from aah_viz.export.tables import build_table, build_tables

__all__ = [
    "MixedConfigError",
    "Table",
    "build_table",
    "build_tables",
    "collect_runs",
    "comparison_table",
    "difference_curve_table",
    "difference_curves_table",
    "factorial_table",
    "figure_bytes",
    "render",
    "write_figure",
]
