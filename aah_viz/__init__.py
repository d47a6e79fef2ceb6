"""aah-viz: routing diagnostics for Transformers with Asymmetric Attention Heads (AAH-v3).

The light side: it reads run directories, analyses them and draws them. It never imports torch.
"""

from aah_viz._version import __version__
from aah_viz.errors import (
    AAHVizError,
    ConfigError,
    InputFormatError,
    MissingDependencyError,
    RunLogError,
    SchemaVersionError,
    UnsafePathError,
)


def load_run(path, **kwargs):
    """Open a run directory (see ``docs/log-format.md``); returns an :class:`aah_viz.runlog.Run`."""
    # imported on first use: ``import aah_viz`` (and every ``aah_viz.errors`` import) stays free of pandas and pyarrow
    from aah_viz.runlog.reader import load_run as _load_run

    return _load_run(path, **kwargs)


__all__ = [
    "AAHVizError",
    "ConfigError",
    "InputFormatError",
    "MissingDependencyError",
    "RunLogError",
    "SchemaVersionError",
    "UnsafePathError",
    "load_run",
    "__version__",
]
