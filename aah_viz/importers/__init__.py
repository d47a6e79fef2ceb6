"""Producers of runs from outside data: ``reference`` turns the reference's published CSVs into run
directories (``aah-viz import-reference``)."""
