"""Pure analysis on run tables: DataFrames in, numbers or DataFrames out (no Streamlit, no plotting).

``queries`` is the one module that reads a :class:`~aah_viz.runlog.Run` (projected, filtered
Parquet reads); everything else works on the frames it returns.
"""
