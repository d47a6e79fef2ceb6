"""aah-viz: routing diagnostics for Transformers with Asymmetric Attention Heads (AAH-v3).

The light side: it reads run directories, analyses them and draws them. It never imports torch.
"""

from aah_viz.errors import (
    AAHVizError,
    ConfigError,
    InputFormatError,
    MissingDependencyError,
    RunLogError,
    SchemaVersionError,
    UnsafePathError,
)

__version__ = "0.1.0"


def load_run(path, **kwargs):
    """Open a run directory (see ``docs/log-format.md``); returns an :class:`aah_viz.runlog.Run`."""
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
