"""The dashboard's calls into the exporters (``aah_viz.export``), in one place.

The export package is part of the base install (only Kaleido, behind ``figure_bytes``, is an
extra, and it says itself how to install it), so each call goes straight to it.
"""

from __future__ import annotations

import pandas as pd


def table_names() -> tuple[str, ...]:
    from aah_viz.export.kinds import TABLE_NAMES

    return tuple(TABLE_NAMES)


def build_table(name: str, runs, **opts):
    from aah_viz.export.tables import build_table as _build_table

    return _build_table(name, runs, **opts)


def config_groups(runs) -> list[tuple[str, list]]:
    """The runs split into the groups that can share one table (sequence length, candidate windows),
    largest first, each with its label (``T128_w16-32-64-128``); baselines join every group of their T."""
    from aah_viz.export.runs import config_label, split_by_config

    groups = split_by_config(runs)
    return sorted(((config_label(cfg), members) for cfg, members in groups.items()), key=lambda g: -len(g[1]))


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
    from aah_viz.export.static import figure_bytes as _figure_bytes

    return _figure_bytes(fig, fmt, **opts)


def regime_summary(per_run: pd.DataFrame, value_columns: list[str]) -> pd.DataFrame:
    """Mean, standard deviation and n over seeds per regime (the export package's statistics)."""
    from aah_viz.export.stats import group_summaries

    return group_summaries(per_run, value_columns, by="regime")


def import_reference(src_dir, out_dir) -> list:
    from aah_viz.importers.reference import import_reference as _import_reference

    return list(_import_reference(src_dir, out_dir, overwrite=True))
