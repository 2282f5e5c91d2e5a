"""Progress reporting and cancellation for long work (load, replay, estimate).

Long functions take ``progress: Progress`` and call it with a fraction in [0, 1] and a short message.
The callback cancels the work by raising :class:`~lumos_core.errors.Cancelled` (the Orange3 pattern):
the core never needs to know about threads or Qt.
"""

from __future__ import annotations

from collections.abc import Callable

from lumos_core.errors import Cancelled

Progress = Callable[[float, str], None]

__all__ = ["Cancelled", "Progress", "no_progress", "scaled"]


def no_progress(fraction: float, message: str) -> None:
    """A progress callback that ignores everything."""


def scaled(progress: Progress, start: float, stop: float) -> Progress:
    """Map a sub-task's [0, 1] progress onto [start, stop] of the parent's."""

    def report(fraction: float, message: str) -> None:
        progress(start + (stop - start) * min(max(fraction, 0.0), 1.0), message)

    return report
