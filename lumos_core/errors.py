"""Exceptions that Lumos raises. Every message names what a user can act on (file, rank, problem)."""

from __future__ import annotations


class LumosError(Exception):
    """Base class of every error Lumos raises on purpose. The CLI prints its message and exits 2."""


class TraceError(LumosError):
    """A trace file cannot be used: unreadable, not JSON, not a Kineto trace, or inconsistent.

    ``path`` is the file at fault (may be None when the error is about a folder).
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)
        self.reason = message


class FolderError(LumosError):
    """A trace folder as a whole cannot be used (empty, duplicate ranks, mixed jobs)."""


class GraphError(LumosError):
    """The execution graph cannot be built or replayed (cycle, unmatched collective, no work)."""


class ConfigError(LumosError):
    """A what-if configuration is invalid (e.g. layers not divisible by pipeline stages)."""


class Cancelled(LumosError):
    """Raised by a progress callback to stop a long-running job."""
