"""Helpers shared by the benchmarks."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO.parent / "shared" / "traces").resolve()


def shared_or_exit(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        print(f"skipped: {path} is not available (../shared/traces is absent)")
        sys.exit(0)
    return path


def rss_peak_mb() -> tuple[float, float]:
    """Peak resident memory of this process and of its largest finished child (MiB)."""
    import resource

    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return self_kb / 1024, child_kb / 1024
