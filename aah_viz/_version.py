"""The package version: one source for ``aah_viz.__version__``, the wheel's metadata and ``aah-viz --version``."""

__version__ = "0.1.0"
