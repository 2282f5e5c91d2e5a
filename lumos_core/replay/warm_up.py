"""Compile (or load from numba's cache) every graph and replay kernel before it is needed.

The app calls :func:`warm_up` on a worker thread before its first graph build, so the GUI thread
never waits for numba; the CLI needs no warm-up (a kernel compiles on its first call). It sits here,
above both kernel modules it exercises, rather than in :mod:`lumos_core.jit`, which the kernels
themselves import.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lumos_core import jit
from lumos_core.graph import kernels as graph_kernels
from lumos_core.replay import kernels as replay_kernels

_lock = threading.Lock()
_warmed = False

COMPILING = "compiling kernels (first run only; cached for later runs)"
LOADING = "loading the compiled kernels"


def warm_up_message() -> str:
    """What :func:`warm_up` is about to do, in words for a status line ("" when nothing): compile
    (numba's cache holds no kernel yet: the first run on this machine, ~15 s) or load them."""
    if _warmed or not jit.ENABLED:
        return ""
    folder = os.environ.get("NUMBA_CACHE_DIR", "")
    try:
        cached = bool(folder) and any(Path(folder).rglob("*.nbi"))
    except OSError:
        cached = False
    return LOADING if cached else COMPILING


def warm_up() -> None:
    """Run every kernel once on tiny inputs, with each argument type a build and a replay use (so
    nothing compiles later). Idempotent and thread-safe; a no-op with the compiled path off."""
    global _warmed
    with _lock:
        if not _warmed and jit.ENABLED:
            graph_kernels.warm_up()
            replay_kernels.warm_up()
        _warmed = True
