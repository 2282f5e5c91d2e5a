"""Per-rank work on two threads, results in rank order.

Building a rank's graph and its predicted timeline are a few hundred numpy calls on the rank's arrays
and a few compiled kernels: numpy releases the GIL inside calls on arrays over a few hundred elements,
and the kernels release it for their whole run (``nogil``). One thread leaves the second core idle
meanwhile; a second thread works on the next rank then. The Python between the calls still runs one
thread at a time, so the gain is modest (measured on 2 cores: 7 % off a 256-rank replay's wall time,
for 12 % more CPU time; bench/README.md), and more threads would mostly wait for the GIL: at most
:data:`MAX_THREADS`.

Results come back in the order of the items, so whatever is assembled from them (edge lists, node
ids, timelines) is the same, bit for bit, as one thread would make. The item function must only write
what belongs to its own item.

Called from a thread Python did not start (the desktop app's Qt workers), the items run in the caller,
one after another: the app's GUI thread needs its share of the GIL to paint while the engine works, and
starting threads from a foreign thread would register it with :mod:`threading` for good (as a "dummy"
thread that outlives it).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 2  # more would mostly wait for the GIL (see above); LUMOS_THREADS overrides it

# This process's share of the cores when it is one of several working side by side (set by
# :func:`share_cores`; None: the process has the machine to itself).
_share: int | None = None


def thread_count() -> int:
    """Threads for per-rank work: ``LUMOS_THREADS`` when set (the user's override; 1 turns threading
    off), else the CPU count up to :data:`MAX_THREADS`; never more than this process's share of the
    cores (:func:`share_cores`)."""
    n = max(1, min(os.cpu_count() or 1, MAX_THREADS))
    env = os.environ.get("LUMOS_THREADS", "").strip()
    if env:
        try:
            n = max(1, int(env))
        except ValueError:
            pass  # a typo must not stop a replay: the default
    return n if _share is None else min(n, _share)


def share_cores(processes: int) -> int:
    """This process is one of ``processes`` working side by side (a sweep's worker pool, a Ray task
    with one CPU): use only this process's share of the cores, so that workers times threads does not
    exceed them (threads beyond the cores only add the GIL's switching). A setting of this process
    (no environment variable is written); returns the share."""
    global _share
    _share = max(1, (os.cpu_count() or 1) // max(1, processes))
    return _share


def map_in_order(fn: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> Iterator[R]:
    """``fn(item)`` for every item, yielded in the items' order, computed on ``threads`` threads with
    at most two items per thread in flight (bounded memory: results wait only for the slowest item
    before them).

    If the caller stops early (an exception, e.g. a cancelled progress callback, or closing the
    generator), items not started are dropped and the running ones are waited for: no thread
    outlives the call. An exception in ``fn`` is raised in the caller, at that item's turn."""
    n = thread_count() if threads is None else max(1, threads)
    if n == 1 or not _started_by_python():
        for item in items:
            yield fn(item)
        return
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="lumos-rank")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * n:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)


def _started_by_python() -> bool:
    """Whether the calling thread is one :mod:`threading` knows (the main thread or one it started);
    asked without ``threading.current_thread()``, which would register a foreign thread."""
    me = threading.get_ident()
    return any(t.ident == me for t in threading.enumerate())
