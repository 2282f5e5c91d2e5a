"""Compiled hot loops: numba when it is installed and allowed, the very same functions as plain Python
otherwise.

The graph and replay kernels (``lumos_core/graph/kernels.py``, ``lumos_core/replay/kernels.py``) are
per-node loops that no numpy expression replaces (a topological pass reads what it just wrote). numba
compiles them once per machine; the machine code is cached in the user cache directory (never next to
the installed package, which may be read-only or inside an app bundle), so later processes load it in
milliseconds. ``NUMBA_CACHE_DIR`` must be set before numba is imported, hence this module imports it,
on the first call of a kernel (see :class:`LazyKernel`): importing the kernels costs nothing.

Compilation happens on the first call of a kernel (a few seconds, once per machine) or in
:func:`lumos_core.replay.warm_up.warm_up`, which the app runs on a worker thread so the GUI thread
never pays it. ``LUMOS_JIT=0`` turns the compiled path off: the kernels then run as the plain Python
they are written in (much slower, identical results; the tests run both). Each algorithm has this one
copy in the product; the tests keep independent references to compare with
(tests/kernel_references.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
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


def _wanted() -> bool:
    if os.environ.get("LUMOS_JIT", "1") == "0":
        return False
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


# numba itself (~1 s of imports) is imported by the first call of a kernel or by the warm-up,
# not by importing this module: a process that never replays (the app before a job is open, the
# CLI's light commands) never pays it, and the app pays it on the worker that warms the kernels.
ENABLED = _wanted()
if ENABLED:
    os.environ.setdefault("NUMBA_CACHE_DIR", str(_cache_root() / "numba"))
numba: Any = None
_LAZY: list[LazyKernel] = []
_KERNELS: list[Any] = []  # the dispatchers made
_compile_lock = threading.RLock()


class LazyKernel:
    """A kernel until its first call: then numba is imported and every kernel defined so far gets
    its dispatcher (``numba.njit``, which compiles per signature on its first call, or loads the
    cached machine code). The dispatchers also replace the kernels' names in their modules, so a
    kernel that calls another one is compiled against the other's dispatcher."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.dispatcher: Any = None

    def __call__(self, *args: Any) -> Any:
        d = self.dispatcher
        if d is None:
            load_kernels()
            d = self.dispatcher
        return d(*args)

    @property
    def signatures(self) -> list[Any]:
        return list(self.dispatcher.signatures) if self.dispatcher is not None else []


def _dispatcher(fn: Callable[..., Any]) -> Any:
    if numba is None:  # numba found but it would not import: the plain function, as without numba
        fn.py_func = fn  # type: ignore[attr-defined]
        return fn
    try:
        compiled = numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # no cache locator (e.g. a frozen app without sources): compile per process
        compiled = numba.njit(cache=False, nogil=True)(fn)
    _KERNELS.append(compiled)
    return compiled


def load_kernels() -> None:
    """Import numba and give every kernel defined so far its dispatcher (idempotent, thread-safe;
    called by the first kernel call or by the warm-up, off the GUI thread)."""
    global numba
    with _compile_lock:
        if numba is None and ENABLED:
            try:
                import numba as nb
            except ImportError:  # found but broken: the plain-Python kernels run
                nb = None
            numba = nb
        for lazy in _LAZY:
            lazy.dispatcher = _dispatcher(lazy.py_func)
            module = sys.modules.get(lazy.py_func.__module__)
            if module is not None and getattr(module, lazy.py_func.__name__, None) is lazy:
                setattr(module, lazy.py_func.__name__, lazy.dispatcher)
        _LAZY.clear()


def read_only(a: Any) -> Any:
    """A read-only view of the array ``a`` (no copy). numba compiles a kernel once per combination of
    argument types, and a read-only array is a type of its own. The trace cache's columns are
    read-only, a freshly parsed rank's are not: a kernel that may receive either takes its inputs
    through this, so it has one compiled version (and the warm-up compiles the one used)."""
    view = a.view()
    view.flags.writeable = False
    return view


def kernel(fn: F) -> F:
    """``fn`` compiled with numba (cached on disk) when available, else ``fn`` itself.

    The plain function stays reachable as ``kernel.py_func`` (numba's attribute; set here too when
    numba is absent), which the tests use as the reference. Until numba is loaded (see
    :class:`LazyKernel`) the kernel is a :class:`LazyKernel`."""
    if not ENABLED:
        fn.py_func = fn  # type: ignore[attr-defined]
        return fn
    with _compile_lock:
        if numba is not None:
            return _dispatcher(fn)  # type: ignore[no-any-return]
        lazy = LazyKernel(fn)
        _LAZY.append(lazy)
        return lazy  # type: ignore[return-value]
