"""Load a folder of per-rank Kineto traces (or one file) into a :class:`~lumos_core.trace.model.Job`.

Steps: find the trace files; parse the ones not in the cache in parallel worker processes (one
rank's dict tree per worker at a time, so memory stays bounded); number the ranks
(``distributedInfo.rank``, else ``rank<N>``/``worker<N>`` in the file name, else file order);
refuse folders that are ambiguous (duplicate ranks, mixed jobs); put all ranks on one time base;
match collectives across ranks and align the clocks on them.

A file that cannot be loaded is reported and skipped (unless ``strict``), so one bad rank never
loses the others. Nothing is ever written into the input folder.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import multiprocessing
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lumos_core.errors import FolderError, LumosError, TraceError
from lumos_core.progress import Progress, no_progress
from lumos_core.trace import cache, cache_evict
from lumos_core.trace.cache_config import CacheConfig
from lumos_core.trace.clocks import ClockAlignment, estimate_offsets
from lumos_core.trace.collectives import CollectiveMatch, match_collectives
from lumos_core.trace.kineto_reader import available_memory, parse_trace_file, text_bytes
from lumos_core.trace.model import MAX_RANKS, Job, RankTrace, SkippedFile

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_ ]?(\d+)(?!\d)", re.IGNORECASE)
# Parsing a rank in batches takes 2-4x its JSON text (2.0x resident for a 1 GiB H100 rank in
# bench/bench_big_folder.py; under 4x address space for small dense events in
# tests/test_large_traces.py; the whole-document fallback, ~10x, checks memory itself). Used to
# bound parallelism and to refuse files the machine cannot hold (instead of the OOM killer).
_TREE_FACTOR = 5
# Ranks whose raw timestamps lie further apart than this (~36 years) are not one job.
_MAX_SPREAD_NS = 2**60
# Below this much data, starting worker processes costs more than it saves.
_IN_PROCESS_BYTES = 3 * 1024 * 1024

# (files, use_cache) -> (file, RankTrace | reason why it cannot be used), as files finish
Parser = Callable[[list[Path], bool], Iterator[tuple[Path, "RankTrace | str"]]]
FileCallback = Callable[[str, str, str], None]  # (file, state, detail); states: loading/cached/loaded/failed


def discover_trace_files(path: str | Path) -> list[Path]:
    """Trace files of a folder (not recursive, hidden files ignored) or the file itself."""
    p = Path(path)
    if not p.exists():
        raise FolderError(f"{p}: no such file or folder")
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FolderError(f"{p}: neither a file nor a folder")
    try:
        entries = sorted(p.iterdir(), key=lambda q: q.name)
    except OSError as exc:
        raise FolderError(f"{p}: cannot list folder ({exc.strerror or exc})") from None
    files = [
        q
        for q in entries
        if q.name.lower().endswith(TRACE_SUFFIXES) and not q.name.startswith(".") and q.is_file()
    ]
    if not files:
        raise FolderError(f"{p}: no trace files (*.json, *.json.gz) in this folder")
    return files


def rank_from_file_name(name: str) -> int | None:
    """``rank3``, ``rank-3``, ``rank_3``, ``worker3`` in a file name -> 3."""
    m = _RANK_IN_NAME.search(name)
    if m is None or len(m.group(1)) > 8:  # "rank123456789012": an id, not a rank (MAX_RANKS)
        return None
    r = int(m.group(1))
    return r if r < MAX_RANKS else None


_RANK_IN_HEAD = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*(\d+)')


def rank_hint(path: Path) -> str:
    """`` (rank 3, from its distributedInfo)`` for a file that failed to load: the profiler writes
    that header first, so a truncated or corrupt file often still says whose it was; else the rank
    in its name; else nothing. Never raises (the file is already known to be bad)."""
    head = b""
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 20)
        if head[:2] == b"\x1f\x8b":  # what a decompressor yields before the damage (gzip.read drops it)
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
    except (OSError, zlib.error):
        pass
    m = _RANK_IN_HEAD.search(head)
    if m is not None and len(m.group(1)) <= 8:
        return f" (rank {int(m.group(1))}, from its distributedInfo)"
    r = rank_from_file_name(path.name)
    return f" (rank {r}, from its file name)" if r is not None else ""


def load_job(
    path: str | Path,
    *,
    progress: Progress = no_progress,
    strict: bool = False,
    use_cache: bool = True,
    workers: int | None = None,
    align_clocks: bool = True,
    on_file: FileCallback | None = None,
    parser: Parser | None = None,
    cache_config: CacheConfig | None = None,
) -> Job:
    """Load every rank of a trace folder (or one trace file).

    Parameters
    ----------
    progress
        ``progress(fraction, message)``; raise :class:`~lumos_core.errors.Cancelled` in it to stop.
    strict
        Fail on the first bad file instead of skipping it.
    use_cache
        Read and write parsed ranks in the user cache directory.
    workers
        Parallel parsing processes (default: CPU count, bounded by memory).
    on_file
        Optional per-file status callback ``(file, state, detail)`` for UIs.
    parser
        Parses the files the cache does not have, ``parser(files, use_cache)`` yielding
        ``(file, RankTrace | reason)``; default: this machine's worker processes (e.g.
        :class:`lumos_core.sweep.ray_load.RayParser` parses them on a Ray cluster instead).
    cache_config
        The cache's folder and size cap (default: :meth:`CacheConfig.resolve`, the user's).
    """
    config = cache_config or CacheConfig.resolve()
    root = config.root
    files = discover_trace_files(path)
    notify = on_file or (lambda f, s, d: None)
    counts = LoadCounts(files_total=len(files), bytes_total=sum(_size(f) for f in files))
    progress(0.0, f"found {len(files)} trace file(s), {counts.sizes(0).split(' of ')[1]}")
    parsed: dict[Path, RankTrace] = {}
    skipped: list[SkippedFile] = []

    todo: list[Path] = []
    for f in files:
        cached = cache.load(f, root) if use_cache else None
        if cached is not None:
            cached.file = str(f)
            parsed[f] = cached
            counts.add(f)
            notify(str(f), "cached", "")
        else:
            todo.append(f)
    if parsed:
        progress(0.05, f"{len(parsed)} rank(s) from cache · {counts.text()}")

    def record_failure(f: Path, reason: str) -> None:
        reason += rank_hint(f)
        if strict:
            raise TraceError(reason, str(f))
        skipped.append(SkippedFile(str(f), reason))
        notify(str(f), "failed", reason)

    done = len(parsed)
    parse = parser or (lambda files, use: _parse_all(files, workers, use, root))
    for f, outcome in parse(todo, use_cache):
        if isinstance(outcome, RankTrace):
            parsed[f] = outcome
            notify(str(f), "loaded", "")
        else:
            record_failure(f, outcome)
        done += 1
        counts.add(f)
        # by bytes, not files: rank files differ in size, and the fraction drives the ETA
        progress(0.05 + 0.85 * counts.fraction(done), f"parsing {counts.text()} · {f.name}")
    # evict down to the cap now that this job's entries are written; say once if some were not
    cache_note = (
        cache_evict.after_load(config, {f: parsed[f] for f in todo if f in parsed}) if use_cache else None
    )

    if not parsed and len(skipped) == 1:
        raise FolderError(f"{skipped[0].file}: {skipped[0].reason}")
    if not parsed:
        reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise FolderError(f"{path}: no rank could be loaded - {reasons}{more}")

    ranks, rule = _number_ranks([f for f in files if f in parsed], parsed)
    job = Job(path=str(path), ranks=ranks, rank_rule=rule, origin_ns=0, skipped=skipped)
    _check_same_job(job)
    progress(0.92, "matching collectives across ranks")
    match = match_collectives(job)
    _put_on_common_time_base(job)
    alignment = estimate_offsets(job, match)
    if align_clocks and alignment.applied:
        for t in job.ranks:
            t.clock_offset_ns = alignment.offsets_ns.get(t.rank, 0)
            t.shift(t.clock_offset_ns, in_place=True)
        _rebase(job)
    if job.pages_worth_releasing():  # the cache's time columns shift replaced: nothing reads them
        for t in job.ranks:
            t.release_replaced_pages()
    job.alignment = {**alignment.as_dict(), "applied": bool(align_clocks and alignment.applied)}
    job.collective_match = match
    _collect_warnings(job, match, alignment)
    if cache_note:
        job.warnings.append(cache_note)
    progress(1.0, f"loaded {len(job.ranks)} rank(s)")
    return job


@dataclass
class LoadCounts:
    """How far a load is: files and bytes (on disk, compressed as stored) done of the total. Its
    :meth:`text` is what the progress messages say ("12 of 256 files, 1.2 of 9.8 GB")."""

    files_total: int
    bytes_total: int
    files_done: int = 0
    bytes_done: int = 0

    def add(self, f: Path) -> None:
        self.files_done += 1
        self.bytes_done += _size(f)

    def fraction(self, files_done: int) -> float:
        """Done, by bytes (by files when the sizes are unknown)."""
        if self.bytes_total > 0:
            return min(self.bytes_done / self.bytes_total, 1.0)
        return files_done / self.files_total if self.files_total else 1.0

    def sizes(self, n: int) -> str:
        """``n`` of the total, in GB (MB for a job under 1 GB)."""
        unit, div = ("GB", 1e9) if self.bytes_total >= 1e9 else ("MB", 1e6)
        return f"{n / div:.1f} of {self.bytes_total / div:.1f} {unit}"

    def text(self) -> str:
        return f"{self.files_done} of {self.files_total} files, {self.sizes(self.bytes_done)}"


def _size(f: Path) -> int:
    try:
        return f.stat().st_size
    except OSError:
        return 0


# ---------------------------------------------------------------- parsing (parallel, bounded memory)


def parse_one_file(path_str: str, use_cache: bool, root: Path | None = None) -> RankTrace | str:
    """Worker entry point: a RankTrace, or the reason the file cannot be used (never raises)."""
    path = Path(path_str)
    try:
        rank = parse_trace_file(path)
    except LumosError as exc:
        return getattr(exc, "reason", str(exc))
    except MemoryError:
        return "ran out of memory while parsing this file"
    except RecursionError:
        return "JSON nested too deeply to be a trace"
    except Exception as exc:
        return f"could not be parsed ({type(exc).__name__}: {exc}) - this looks like a Lumos bug, please report it"
    if use_cache:
        cache.save(rank, path, root)
    return rank


def parse_into_cache(
    path_str: str, use_cache: bool = True, root: Path | None = None
) -> RankTrace | str | None:
    """Worker entry point that leaves the columns in the cache: None once they are there (the
    parent maps them from the cache instead of receiving a pickled copy: half the memory of a cold
    load of many ranks, and no copy through the pipe), else the RankTrace or why it failed."""
    outcome = parse_one_file(path_str, use_cache, root)
    if isinstance(outcome, RankTrace) and cache.entry_exists(Path(path_str), root):
        return None
    return outcome


def _estimated_tree_bytes(path: Path) -> int:
    """Rough memory to parse ``path`` with the batch parser (gzip: its recorded uncompressed size)."""
    return text_bytes(path) * _TREE_FACTOR


def _available_memory() -> int:
    return available_memory()


def _single_threaded() -> bool:
    """True when forking is safe: no other Python thread runs. threading does not list threads it
    did not start, so the caller must also be the main thread: the app loads on a QThread (its GUI
    thread runs on meanwhile) and used to fork there. (OpenBLAS's own threads are fork-safe.)"""
    return threading.active_count() == 1 and threading.current_thread() is threading.main_thread()


def _parse_all(todo: list[Path], workers: int | None, use_cache: bool, root: Path):  # type: ignore[no-untyped-def]
    """Yield (file, RankTrace | reason) as files finish, using worker processes when it pays off."""
    if not todo:
        return
    available = _available_memory()
    need = {f: _estimated_tree_bytes(f) for f in todo}
    too_big = {f for f, n in need.items() if n > available}
    for f in too_big:
        yield (
            f,
            (
                f"needs about {need[f] / 2**30:.1f} GiB of memory to parse but only "
                f"{available / 2**30:.1f} GiB is available; split the trace or use a bigger machine"
            ),
        )
    todo = [f for f in todo if f not in too_big]
    if not todo:
        return
    largest = max(need[f] for f in todo) or 1
    n_workers = workers or os.cpu_count() or 1
    n_workers = max(1, min(n_workers, len(todo), int(available // largest) or 1))
    total_bytes = sum(f.stat().st_size for f in todo)
    if n_workers == 1 or total_bytes < _IN_PROCESS_BYTES:
        for f in todo:
            yield f, parse_one_file(str(f), use_cache, root)
        return
    # fork is fastest and safe while this process has one thread (the CLI); a GUI calls us from a
    # worker thread, and forking a multi-threaded process can deadlock, so use forkserver there.
    method = (
        "fork"
        if _single_threaded() and "fork" in multiprocessing.get_all_start_methods()
        else ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    )
    ctx = multiprocessing.get_context(method)
    pool = cf.ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx)
    interrupted = False
    try:
        # Largest first: the slowest file starts early and the pool finishes evenly.
        order = sorted(todo, key=lambda f: -need[f])
        work = parse_into_cache if use_cache else parse_one_file
        futures = {pool.submit(work, str(f), use_cache, root): f for f in order}
        for fut in cf.as_completed(futures):
            f = futures[fut]
            try:
                result = fut.result()
            except cf.process.BrokenProcessPool:
                result = (
                    "the parsing process died (most likely out of memory: the file needs about "
                    f"{need[f] / 2**30:.1f} GiB)"
                )
            if result is None:  # in the cache: open it memory-mapped rather than hold a copy
                result = cache.load(f, root)
                if result is None:  # the entry went away meanwhile: parse here
                    result = parse_one_file(str(f), use_cache, root)
                else:
                    result.file = str(f)
            yield f, result
    except BaseException:
        interrupted = True  # cancelled or failed: don't wait for files still being parsed
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)


# ---------------------------------------------------------------- job assembly


def _distributed_rank(t: RankTrace) -> int | None:
    info = t.metadata.get("distributedInfo")
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_RANKS:
            return r
    return None


def _number_ranks(files: list[Path], parsed: dict[Path, RankTrace]) -> tuple[list[RankTrace], str]:
    """Give every loaded file a rank and say which rule did it."""
    assigned: dict[Path, tuple[int, str]] = {}
    for f in files:
        r = _distributed_rank(parsed[f])
        if r is not None:
            assigned[f] = (r, "distributedInfo")
            continue
        r = rank_from_file_name(f.name)
        if r is not None:
            assigned[f] = (r, "file name")
    taken = {r for r, _ in assigned.values()}
    free = (r for r in range(len(files) + len(taken) + 1) if r not in taken)
    for f in files:  # files are in name order
        if f not in assigned:
            assigned[f] = (next(free), "file order")
    by_rank: dict[int, Path] = {}
    for f in files:
        r, _ = assigned[f]
        if r in by_rank:
            raise FolderError(
                f"duplicate rank {r}: both {by_rank[r].name} and {f.name} claim it "
                f"({assigned[by_rank[r]][1]} / {assigned[f][1]}); move one of them out of the folder"
            )
        by_rank[r] = f
    ranks = []
    for r in sorted(by_rank):
        f = by_rank[r]
        t = parsed[f]
        t.rank = r
        t.rank_source = assigned[f][1]
        ranks.append(t)
    counts: dict[str, int] = {}
    for _, src in assigned.values():
        counts[src] = counts.get(src, 0) + 1
    labels = {
        "distributedInfo": "distributedInfo.rank",
        "file name": "rank<N>/worker<N> in the file name",
        "file order": "file order (no rank recorded)",
    }
    if len(counts) == 1:
        rule = f"ranks from {labels[next(iter(counts))]}"
    else:
        rule = "ranks from " + ", ".join(f"{labels[k]} ({v} file{'s' * (v > 1)})" for k, v in counts.items())
    return ranks, rule


def _check_same_job(job: Job) -> None:
    """Refuse folders that mix traces of different jobs: they would make a plausible, wrong timeline."""
    sizes = {t.world_size: t for t in job.ranks if t.world_size}
    if len(sizes) > 1:
        (wa, ta), (wb, tb) = list(sizes.items())[:2]
        raise FolderError(
            f"the folder mixes traces of different jobs: {Path(ta.file).name} has world size {wa} "
            f"but {Path(tb.file).name} has {wb}"
        )
    ws = next(iter(sizes), None)
    if ws is not None:
        beyond = [t for t in job.ranks if t.rank >= ws]
        if beyond:
            raise FolderError(
                f"{Path(beyond[0].file).name} is rank {beyond[0].rank} but the job's world size is {ws}"
            )
    epoch = [t for t in job.ranks if isinstance(t.metadata.get("baseTimeNanoseconds"), int)]
    if len(epoch) >= 2:
        starts = sorted((t.first_start + t.raw_shift_ns, t) for t in epoch)
        mid = starts[len(starts) // 2][0]
        for s, t in starts:
            if abs(s - mid) > 3600 * 10**9:
                raise FolderError(
                    f"the folder mixes traces of different jobs: {Path(t.file).name} was recorded "
                    f"{abs(s - mid) / 3.6e12:.1f} hours apart from the others"
                )


def _put_on_common_time_base(job: Job) -> None:
    """Shift every rank so times are ns from the job's earliest raw timestamp."""
    starts = sorted((t.first_start + t.raw_shift_ns, t.rank) for t in job.ranks)
    (origin, first), (last_start, last) = starts[0], starts[-1]
    if last_start - origin > _MAX_SPREAD_NS:
        # Raw time bases decades apart cannot be one job, and the shifts would overflow int64 ns.
        raise FolderError(
            f"the folder mixes traces of different jobs: {Path(job.rank(last).file).name} was recorded "
            f"{(last_start - origin) // 31_557_600_000_000_000:,} years after "  # int: may exceed float
            f"{Path(job.rank(first).file).name}"
        )
    job.origin_ns = origin
    for t in job.ranks:
        t.shift(t.raw_shift_ns - origin, in_place=True)


def _rebase(job: Job) -> None:
    """After alignment, move the time zero to the earliest event again (nothing before 0)."""
    first = min(t.first_start for t in job.ranks if len(t))
    if first != 0:
        for t in job.ranks:
            t.shift(-first, in_place=True)
        job.origin_ns += first


def _collect_warnings(job: Job, match: CollectiveMatch, alignment: ClockAlignment) -> None:
    for t in job.ranks:
        job.warnings.extend(f"rank {t.rank} ({Path(t.file).name}): {w}" for w in t.warnings)
    for s in job.skipped:
        job.warnings.append(f"skipped {Path(s.file).name}: {s.reason}")
    ws = job.world_size
    if ws > len(job.ranks):
        present = {t.rank for t in job.ranks}
        # Only the first few missing ranks are shown; never build the whole range (world sizes
        # come from the files and may be large).
        missing = list(itertools.islice((r for r in range(ws) if r not in present), 17))
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        job.warnings.append(
            f"the job has {ws} ranks but {len(job.ranks)} were loaded (missing: {shown}); "
            "collectives with missing ranks cannot be matched"
        )
    summary = match.summary()
    if summary["partial"]:
        job.warnings.append(
            f"{summary['partial']} of {summary['instances']} collective instances lack some of "
            "their ranks (at the edges of the profiling windows, or ranks not in the folder)"
        )
    job.warnings.extend(match.notes)
    job.warnings.extend(alignment.notes)


def describe(job: Job) -> dict[str, Any]:
    """Small, JSON-friendly description of a job (used by ``lumos inspect --json``)."""
    from lumos_core.trace.inspect_report import (
        inspect_job,  # local import: report formatting is not needed to load
    )

    return inspect_job(job)
