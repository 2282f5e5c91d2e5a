"""Compiled hot loops: numba when it is installed and allowed, the very same functions as plain Python
otherwise.

The graph and replay kernels (``lumos_core/graph/kernels.py``, ``lumos_core/replay/kernels.py``) are
per-node loops that no numpy expression replaces (a topological pass reads what it just wrote). numba
compiles them once per machine; the machine code is cached in the user cache directory (never next to
the installed package, which may be read-only or inside an app bundle), so later processes load it in
milliseconds. ``NUMBA_CACHE_DIR`` must be set before numba is imported, hence this module imports it.

Compilation happens on the first call of a kernel (a few seconds, once per machine) or in
:func:`warm_up`, which the app runs on a worker thread at start-up so the GUI thread never pays it.
``LUMOS_JIT=0`` turns the compiled path off (the plain-Python functions then run: slower, identical
results); the tests compare both.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _cache_root() -> Path:
    env = os.environ.get("LUMOS_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("lumos", appauthor=False))


def _load_numba() -> Any:
    if os.environ.get("LUMOS_JIT", "1") == "0":
        return None
    os.environ.setdefault("NUMBA_CACHE_DIR", str(_cache_root() / "numba"))
    try:
        import numba
    except ImportError:  # an install without numba: the plain-Python kernels run
        return None
    return numba


numba = _load_numba()
ENABLED = numba is not None
_KERNELS: list[Any] = []


def kernel(fn: F) -> F:
    """``fn`` compiled with numba (cached on disk) when available, else ``fn`` itself.

    The plain function stays reachable as ``kernel.py_func`` (numba's attribute; set here too when
    numba is absent), which the tests use as the reference."""
    if numba is None:
        fn.py_func = fn  # type: ignore[attr-defined]
        return fn
    try:
        compiled = numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # no cache locator (e.g. a frozen app without sources): compile per process
        compiled = numba.njit(cache=False, nogil=True)(fn)
    _KERNELS.append(compiled)
    return compiled  # type: ignore[no-any-return]


_warm_lock = threading.Lock()
_warmed = False


def warm_up() -> None:
    """Compile (or load from the cache) every kernel by running each on a tiny graph. Call it off the
    GUI thread; it is idempotent and thread-safe."""
    global _warmed
    with _warm_lock:
        if _warmed or not ENABLED:
            _warmed = True
            return
        from lumos_core.graph.kernels import warm_up as warm_graph
        from lumos_core.replay.kernels import warm_up as warm_replay

        warm_graph()
        warm_replay()
        _warmed = True
