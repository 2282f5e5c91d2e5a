"""Old import path, kept for users' scripts: loading moved to :mod:`lumos_core.trace.loader`."""

from lumos_core.trace.loader import (
    TRACE_SUFFIXES,
    describe,
    discover_trace_files,
    load_job,
    rank_from_file_name,
)

__all__ = ["TRACE_SUFFIXES", "describe", "discover_trace_files", "load_job", "rank_from_file_name"]
