"""Paper exports: tables (CSV, Markdown, LaTeX), seed statistics, reference import, static figures.

``build_table(name, runs, **opts) -> Table`` and ``render(table, fmt)`` make the tables;
``aah_viz.export.stats`` holds the statistics (bootstrap, Welch, permutation, factorial view);
``import_reference`` turns the reference's published CSVs into run directories;
``write_figure`` exports a Plotly figure to PNG, SVG or PDF. ``docs/export.md`` documents them.
"""

from aah_viz.export.formats import render
from aah_viz.export.reference import import_reference
from aah_viz.export.static import figure_bytes, write_figure
from aah_viz.export.tables import (
    MixedConfigError,
    Table,
    build_table,
    build_tables,
    collect_runs,
    comparison_table,
    difference_curve_table,
    factorial_table,
)

__all__ = [
    "MixedConfigError",
    "Table",
    "build_table",
    "build_tables",
    "collect_runs",
    "comparison_table",
    "difference_curve_table",
    "factorial_table",
    "figure_bytes",
    "import_reference",
    "render",
    "write_figure",
]
