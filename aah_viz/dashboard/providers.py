"""The dashboard's calls into the exporters (``aah_viz.export``), in one place.

Each function calls the export package's API; where a piece is missing (an older install, or a
build without the export extra) it falls back to a plain local version, so the Compare and Export
pages keep working. Switching any of them is a one-line change here.
"""

from __future__ import annotations

import pandas as pd

from aah_viz.analysis.compare import regime_summary as _local_regime_summary
from aah_viz.errors import AAHVizError, MissingDependencyError


def table_names() -> tuple[str, ...]:
    from aah_viz.export.tables import TABLE_NAMES

    return tuple(TABLE_NAMES)


def build_table(name: str, runs, **opts):
    from aah_viz.export.tables import build_table as _build_table

    return _build_table(name, runs, **opts)


def formats() -> tuple[str, ...]:
    from aah_viz.export.formats import FORMATS

    return tuple(FORMATS)


def extension(fmt: str) -> str:
    from aah_viz.export.formats import EXTENSIONS

    return EXTENSIONS.get(fmt, fmt)


def render_table(table, fmt: str) -> str:
    from aah_viz.export.formats import render

    return render(table, fmt)


def figure_bytes(fig, fmt: str, **opts) -> bytes:
    """PNG, SVG or PDF bytes of a Plotly figure (Kaleido with the system Chromium)."""
    try:
        from aah_viz.export.static import figure_bytes as _figure_bytes
    except ImportError:
        _figure_bytes = None
    if _figure_bytes is not None:
        return _figure_bytes(fig, fmt, **opts)
    try:
        return fig.to_image(format=fmt, **opts)
    except Exception as err:  # noqa: BLE001 - kaleido missing or its browser failed
        raise MissingDependencyError(
            f"cannot export the figure as {fmt}: {err}; install the export extra (pip install 'aah-viz[export]') "
            "and a Chromium (the dev script installs Debian's chromium)"
        ) from None


def regime_summary(per_run: pd.DataFrame, value_columns: list[str]) -> pd.DataFrame:
    """Mean, standard deviation and n over seeds per regime (the export package's statistics)."""
    try:
        from aah_viz.export.stats import group_summaries
    except ImportError:
        return _local_regime_summary(per_run, value_columns)
    return group_summaries(per_run, value_columns, by="regime")


def import_reference(src_dir, out_dir) -> list:
    from aah_viz.export.reference import import_reference as _import_reference

    try:
        return list(_import_reference(src_dir, out_dir, overwrite=True))
    except AAHVizError:
        raise
