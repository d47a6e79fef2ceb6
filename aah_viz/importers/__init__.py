"""Producers of runs from outside data: ``reference`` turns the reference's published CSVs into run
directories (``aah-viz import-reference``). A GGUF model file becomes a model folder, not a run:
``instrumentation.retrofit.gguf_import``."""

from aah_viz.importers.reference import import_reference

__all__ = ["import_reference"]
