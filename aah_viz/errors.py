"""One exception family whose messages a user can act on: what was wrong, where, what to do."""

from __future__ import annotations


class AAHVizError(Exception):
    """Base of every error the toolkit raises on purpose.

    The CLI prints ``str(err)`` on one line and exits 2; the dashboard shows it in an error box.
    """


class ConfigError(AAHVizError, ValueError):
    """An invalid model or run configuration (names the key and the allowed values)."""


class RunLogError(AAHVizError):
    """A run directory that cannot be read: missing, corrupt, or of a newer schema."""


class RunLockedError(RunLogError):
    """A run directory that another live process is writing (one writer per run)."""


class SchemaVersionError(RunLogError):
    """A run written by a newer major schema version than this reader understands."""


class InputFormatError(AAHVizError, ValueError):
    """A user file (CoNLL-U, coreference JSONL, GAP TSV, CSV ...) that is malformed; names file and line."""


class MissingDependencyError(AAHVizError, ImportError):
    """An optional dependency (torch, kaleido, a browser ...) is missing; says how to install it."""


class UnsafePathError(AAHVizError):
    """A user-supplied path that would escape the folder it is meant for."""


class TrainingError(AAHVizError):
    """Training cannot go on (a non-finite loss); the run is closed as failed, its rows kept."""
