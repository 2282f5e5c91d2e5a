"""Loading for an interactive front end (the app, a notebook that shows progress).

``lumos_core.open`` does everything in one call; a front end that draws the timeline while the rest
is computed takes the steps one by one, each with a ``progress`` callback that raises
:class:`~lumos_core.errors.Cancelled` to stop:

* :func:`load_job`: the traces, with a per-file callback and the parse cache's settings
  (:class:`CacheConfig`: where, how big; :func:`cache_info` is what ``lumos cache info`` reports);
* :func:`warm_up`: compile (or load from numba's cache) the graph and replay kernels now, off the
  GUI thread, saying so (:func:`warm_up_message`: "" when there is nothing to do);
* :func:`build_graph`: the execution graph, the kernels warmed up first;
* :func:`demo_job_path`: the demo job (a synthetic 8-rank trace, generated on first use).
"""

from __future__ import annotations

from typing import Any

from lumos_core.graph import build as _build
from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import Progress, no_progress
from lumos_core.replay import warm_up as _warm_up
from lumos_core.replay.warm_up import COMPILING, LOADING
from lumos_core.synth.demo import demo_job_path
from lumos_core.trace import cache_evict
from lumos_core.trace.cache_config import CacheConfig, default_root, format_size, parse_size, volume_usage
from lumos_core.trace.loader import TRACE_SUFFIXES, load_job, rank_from_file_name
from lumos_core.trace.model import Job as TracedJob


def warm_up_message() -> str:
    """What :func:`warm_up` is about to do, in words for a status line: :data:`COMPILING` (the
    first run on this machine, ~15 s), :data:`LOADING`, or "" (nothing left to do)."""
    return _warm_up.warm_up_message()


def warm_up(progress: Progress = no_progress) -> None:
    """Compile or load every graph and replay kernel now (idempotent, thread-safe), reporting
    :func:`warm_up_message` at 0 when there is something to do."""
    if message := warm_up_message():
        progress(0.0, message)
    _warm_up.warm_up()


def build_graph(
    data: TracedJob, *, keep_stalls: bool = False, progress: Progress = no_progress
) -> ExecutionGraph:
    """The execution graph of loaded traces, its kernels warmed up first (so the warm-up is said
    as such). ``keep_stalls``: GPU delays no dependency explains become fixed waits
    (``--keep-stalls``)."""
    progress(0.0, warm_up_message() or "building the execution graph")
    _warm_up.warm_up()
    return _build.build_graph(data, progress=progress, absorb_unexplained=keep_stalls)


def cache_info(config: CacheConfig) -> dict[str, Any]:
    """What ``lumos cache info`` reports (also ``lumos --doctor`` and the app's cache dialog):
    location, bytes (by kind), entries, oldest/newest use, cap, stale entries, the volume's size."""
    units = cache_evict.scan(config.root)
    entries = [u for u in units if u.kind == "entry"]
    by_kind = {k: sum(u.nbytes for u in units if u.kind == k) for k in cache_evict.KINDS}
    stale = [u for u in units if cache_evict.stale_reason(u) is not None]
    usage = volume_usage(config.root)
    return {
        "location": str(config.root),
        "exists": config.root.is_dir(),
        "bytes": sum(by_kind.values()),
        "bytes_by_kind": by_kind,
        "entries": len(entries),
        "oldest_used": min((u.used for u in entries), default=None),
        "newest_used": max((u.used for u in entries), default=None),
        "cap_bytes": config.cap(),
        "cap": config.describe_cap(),
        "stale_entries": sum(u.kind == "entry" for u in stale),
        "stale_bytes": sum(u.nbytes for u in stale),
        "volume_total_bytes": usage[0] if usage else None,
        "volume_free_bytes": usage[1] if usage else None,
    }


__all__ = [
    "COMPILING",
    "LOADING",
    "TRACE_SUFFIXES",
    "CacheConfig",
    "build_graph",
    "cache_info",
    "default_root",
    "demo_job_path",
    "format_size",
    "load_job",
    "parse_size",
    "rank_from_file_name",
    "warm_up",
    "warm_up_message",
]
