"""Where the configurations of a sweep are estimated: a local process pool, or a Ray cluster (and,
for a few points, :class:`InProcessEngine`: one after another in the calling thread).

Both engines run the same task, :func:`lumos_core.sweep.point.estimate_point`, on the same data: the
loaded job, its execution graph and the baseline (:class:`SweepContext`). That context is sent to
each worker once, never per configuration: the pool's initializer receives it pickled once in this
process; Ray keeps one copy in its object store (``ray.put``) that each worker process fetches the
first time and then keeps.

``engine.run(context, points, tick_s)`` yields ``(index, GridRow)`` as configurations finish (in any
order), and ``None`` when ``tick_s`` seconds passed without one (so a caller can refresh its ETA or
notice a cancel while a long estimate runs). Closing the generator early (an error, a cancel,
Ctrl-C) stops the work still queued or running.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from lumos_core.errors import LumosError
from lumos_core.graph.model import ExecutionGraph
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.rank_threads import share_cores
from lumos_core.sweep.point import GridRow, estimate_point
from lumos_core.trace.model import Job
from lumos_core.whatif.config import Baseline
from lumos_core.whatif.estimate import Estimator

ENGINES = ("local", "ray")
RAY_MISSING = 'the Ray engine needs Ray: pip install "lumos[ray]" (or pip install "ray>=2.9")'


@dataclass
class SweepContext:
    """What every task needs besides its changes (picklable: numpy arrays and plain data), and the
    :class:`~lumos_core.whatif.estimate.Estimator` each process keeps for them (made on first use:
    a worker replays the traced configuration once, not once per configuration)."""

    job: Job
    graph: ExecutionGraph
    baseline: Baseline
    profile: HardwareProfile | None = None  # fitted by lumos calibrate
    kept: Estimator | None = field(default=None, repr=False, compare=False)

    def estimator(self) -> Estimator:
        if self.kept is None:
            self.kept = Estimator(self.job, baseline=self.baseline, graph=self.graph, profile=self.profile)
        return self.kept

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "kept": None}  # each process makes its own

    def estimate(self, changes: dict[str, Any], progress: Progress = no_progress) -> GridRow:
        """One point of the sweep, with this process's estimator."""
        return estimate_point(
            self.job, self.graph, self.baseline, changes, progress=progress, profile=self.profile,
            estimator=self.estimator(),
        )  # fmt: skip


class Engine(Protocol):
    name: str

    @property
    def workers(self) -> int: ...

    def run(
        self, context: SweepContext, points: list[dict[str, Any]], tick_s: float | None = None
    ) -> Iterator[tuple[int, GridRow] | None]: ...

    def close(self) -> None: ...


def make_engine(name: str, jobs: int | None = None, address: str | None = None) -> Engine:
    """The engine called ``name`` ("local" or "ray"); ``jobs``: parallel workers (default: cores)."""
    check_engine(name, jobs, address)
    return LocalEngine(jobs) if name == "local" else RayEngine(address, jobs)


def check_engine(name: str, jobs: int | None = None, address: str | None = None) -> None:
    """The errors :func:`make_engine` would raise for these arguments (before anything is loaded)."""
    if jobs is not None and jobs < 1:
        raise LumosError(f"--jobs must be at least 1 (got {jobs})")
    if name == "local" and address:
        raise LumosError("--address is for --engine ray (the local engine runs on this machine)")
    if name not in ENGINES:
        raise LumosError(f"unknown engine {name!r}: use {' or '.join(ENGINES)}")


def process_start_method() -> str:
    """fork while this process has one thread (the CLI: fastest, nothing to re-import); forkserver
    or spawn once threads exist (the GUI, Ray's client), where forking can deadlock (as the loader)."""
    methods = multiprocessing.get_all_start_methods()
    if threading.active_count() == 1 and "fork" in methods:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


# ---------------------------------------------------------------------------------- in process


class InProcessEngine:
    """The configurations one after another in the calling thread: no worker to start, for a few
    points (the app's one-knob sweep runs it on its own background thread). ``progress`` goes into
    each estimate, so a cancel (it raising) stops inside a long one, not after it."""

    name = "in-process"
    workers = 1

    def __init__(self, progress: Progress = no_progress) -> None:
        self.progress = progress

    def run(
        self, context: SweepContext, points: list[dict[str, Any]], tick_s: float | None = None
    ) -> Iterator[tuple[int, GridRow] | None]:
        n = max(len(points), 1)
        for i, changes in enumerate(points):
            sub = scaled(self.progress, i / n, (i + 1) / n)
            yield i, context.estimate(changes, progress=sub)

    def close(self) -> None:
        """Nothing to release."""


# ---------------------------------------------------------------------------------- process pool

_WORKER_CONTEXT: SweepContext | None = None


def _init_worker(payload: bytes, workers: int) -> None:
    global _WORKER_CONTEXT
    # Ctrl-C reaches the whole process group: the parent decides what stops (and keeps the rows).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    share_cores(workers)  # a worker per core already: no per-rank threads on top
    _WORKER_CONTEXT = pickle.loads(payload)


def _estimate_in_worker(index: int, changes: dict[str, Any]) -> tuple[int, GridRow]:
    ctx = _WORKER_CONTEXT
    assert ctx is not None, "sweep worker started without its context"
    return index, ctx.estimate(changes)


class LocalEngine:
    """A process pool over this machine's cores (see the module docstring)."""

    name = "local"

    def __init__(self, jobs: int | None = None, start_method: str | None = None) -> None:
        self.jobs = jobs
        self.start_method = start_method

    @property
    def workers(self) -> int:
        return self.jobs or os.cpu_count() or 1

    def run(
        self, context: SweepContext, points: list[dict[str, Any]], tick_s: float | None = None
    ) -> Iterator[tuple[int, GridRow] | None]:
        if not points:
            return
        payload = pickle.dumps(context, protocol=pickle.HIGHEST_PROTOCOL)  # once, whatever the workers
        ctx = multiprocessing.get_context(self.start_method or process_start_method())
        workers = min(self.workers, len(points))
        pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(payload, workers),
        )
        finished = False
        try:
            pending = {pool.submit(_estimate_in_worker, i, changes) for i, changes in enumerate(points)}
            while pending:
                done, pending = cf.wait(pending, timeout=tick_s, return_when=cf.FIRST_COMPLETED)
                if not done:
                    yield None
                for fut in done:
                    try:
                        yield fut.result()
                    except cf.process.BrokenProcessPool:
                        raise LumosError(
                            "a sweep worker process died (most likely out of memory: try fewer --jobs); "
                            "finished configurations are kept"
                        ) from None
            finished = True
        finally:
            _stop_pool(pool, wait=finished)

    def close(self) -> None:
        """Nothing to release: each run owns its pool."""


def _stop_pool(pool: cf.ProcessPoolExecutor, wait: bool) -> None:
    if wait:
        pool.shutdown(wait=True)
        return
    # Interrupted: drop what is queued and end what runs now, rather than waiting for estimates
    # nobody wants (ProcessPoolExecutor has no public terminate before Python 3.14).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # shutdown() forgets the executor's manager thread: hold it to wait for it below
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
    # The manager thread sees its workers gone and closes its wake-up pipe; wait for that here.
    # Left racing with interpreter exit, Python's exit hook for process pools wakes it through
    # the pipe as it closes (unlocked in CPython 3.11): "OSError: [Errno 9] Bad file descriptor"
    # on stderr after an interrupted sweep, seen under load.
    if manager is not None:
        manager.join(timeout=5)


# ---------------------------------------------------------------------------------- Ray

_RAY_CACHE: dict[str, SweepContext] = {}  # in each Ray worker process: object id -> context


def _estimate_on_ray(ref_box: list[Any], index: int, changes: dict[str, Any]) -> tuple[int, GridRow]:
    """A Ray task. The context's reference comes boxed in a list so Ray does not fetch and unpickle
    it for every task; each worker process fetches it once and keeps it (the newest sweep's only)."""
    import ray

    share_cores(os.cpu_count() or 1)  # a task per CPU (num_cpus=1): no per-rank threads on top
    ref = ref_box[0]
    key = ref.hex()
    ctx = _RAY_CACHE.get(key)
    if ctx is None:
        _RAY_CACHE.clear()
        ctx = _RAY_CACHE[key] = ray.get(ref)
    return index, ctx.estimate(changes)


def import_ray() -> Any:
    """The ``ray`` module, or a LumosError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise LumosError(RAY_MISSING) from None
    return ray


class RayEngine:
    """Tasks on a Ray cluster: ``address`` (``ray://host:10001``, ``host:6379``, ``auto``; default:
    ``$RAY_ADDRESS``), or else a new local Ray instance with ``jobs`` CPUs, stopped by :meth:`close`.

    The machines of a cluster need the same Lumos installed (``pip install "lumos[ray]"``)."""

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None) -> None:
        self.address = address
        self.jobs = jobs
        self._started = False

    @property
    def workers(self) -> int:
        if self.jobs:
            return self.jobs
        ray = import_ray()
        if ray.is_initialized():
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        return os.cpu_count() or 1

    def connect(self) -> Any:
        """Connect to the cluster (or start the local instance) unless already connected."""
        ray = import_ray()
        if not ray.is_initialized():
            import logging

            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
            }
            address = self.address or os.environ.get("RAY_ADDRESS")  # Ray's own convention
            if address:
                kwargs["address"] = address
            else:  # a new instance of our own, never some other session's local cluster
                kwargs.update(address="local", num_cpus=self.workers)
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray instance"
                raise LumosError(f"cannot start or reach {where}: {exc}") from None
            self._started = True
        return ray

    def run(
        self, context: SweepContext, points: list[dict[str, Any]], tick_s: float | None = None
    ) -> Iterator[tuple[int, GridRow] | None]:
        if not points:
            return
        ray = self.connect()
        task = ray.remote(num_cpus=1, max_retries=1)(_estimate_on_ray)
        box = [ray.put(context)]
        limit = self.jobs or len(points)  # --jobs bounds the tasks in flight on a shared cluster
        waiting = list(enumerate(points))[::-1]
        pending: list[Any] = []
        try:
            while waiting or pending:
                while waiting and len(pending) < limit:
                    i, changes = waiting.pop()
                    pending.append(task.remote(box, i, changes))
                done, pending = ray.wait(pending, num_returns=1, timeout=tick_s)
                if not done:
                    yield None
                for ref in done:
                    try:
                        yield ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:
                        cause = exc.as_instanceof_cause()
                        if isinstance(cause, LumosError):
                            raise LumosError(str(cause)) from None
                        raise
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            del box

    def close(self) -> None:
        """Stop the local Ray instance this engine started (a cluster it joined keeps running)."""
        if self._started:
            import_ray().shutdown()
            self._started = False
