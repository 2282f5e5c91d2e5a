"""Start the desktop app (placeholder until the GUI lands)."""

from __future__ import annotations

import sys


def run_app(args: list[str]) -> int:
    print("the Lumos desktop app is not built yet; use `lumos inspect PATH`", file=sys.stderr)
    return 2
