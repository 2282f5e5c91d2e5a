"""Where ``lumos --demo`` gets its job: a synthetic job Lumos generates itself (never shipped)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

DEMO_UNAVAILABLE = (
    "The demo job is not available in this build of Lumos (lumos_core.synth.demo is missing). "
    "Open a trace folder instead (File ▸ Open Folder)."
)


def demo_generator() -> Callable[[Callable[[float, str], None]], Path] | None:
    """``demo_job_path(progress) -> folder`` from the engine, or None if this build has none."""
    try:
        from lumos_core.api.loading import demo_job_path
    except ImportError:
        return None
    return demo_job_path  # type: ignore[no-any-return]
