"""Arguments and helpers shared by the subcommands that load a trace folder."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from lumos_core.progress import Progress, no_progress


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="folder of per-rank trace files (*.json, *.json.gz) or one trace file")
    p.add_argument("--strict", action="store_true", help="fail on the first bad file instead of skipping it")
    p.add_argument("--no-cache", action="store_true", help="parse every file again (ignore the cache)")
    p.add_argument(
        "--workers", type=int, default=None, help="parallel parsing processes (default: CPU count)"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")


def terminal_progress(enabled: bool = True) -> Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""
    if not enabled or not sys.stderr.isatty():
        return no_progress
    started = time.monotonic()

    def report(fraction: float, message: str) -> None:
        width = 30
        filled = int(width * min(max(fraction, 0.0), 1.0))
        elapsed = time.monotonic() - started
        eta = f" eta {elapsed / fraction - elapsed:4.0f}s" if 0.02 < fraction < 1 else ""
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%{eta} {message[:50]:<50}"
        )
        if fraction >= 1.0:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return report


def load_from_args(args: argparse.Namespace, load_job: Callable[..., Any]) -> Any:
    return load_job(
        args.path,
        progress=terminal_progress(not args.quiet),
        strict=args.strict,
        use_cache=not args.no_cache,
        workers=args.workers,
    )
