"""Give memory the process no longer needs back to the operating system (large jobs on laptops).

Three cases matter at hundreds of ranks: sparse reads of a memory-mapped cache column (a few args
out of every page of a rank's args blob keep the whole blob resident), a rank's mapped cache columns
staying resident after the graph has copied what it needs from them (a quarter of the replay's peak
at 512 ranks), and the C heap keeping freed blocks of the many mid-sized numpy temporaries of graph
building. All are only resident-set hygiene: nothing is lost, a page handed back is read again from
the cache file if used again.

The cache's mappings are read-only (``trace/cache.py``): their pages are the file's own, clean and
shared with the page cache, so handing them back only unmaps them (``MADV_DONTNEED``). They stay in
the page cache, and a page read again costs a minor fault, not a disk read. A writable mapping gets
``MADV_PAGEOUT`` instead, which never discards an edit (and evicts clean pages from the page cache).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys

import numpy as np

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        _libc = None


def drop_pages(column: np.ndarray) -> None:
    """Let the kernel drop the resident pages of a column with a read-only mapping of its own (the
    cache's args blob, after sparse reads): they stay in the page cache for the next read."""
    m = getattr(column, "_mmap", None)
    if m is None or not hasattr(m, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    try:
        m.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError):
        pass


# MADV_PAGEOUT (Linux 5.4+): reclaim these pages now. Unlike MADV_DONTNEED it never discards data:
# a clean file page is read again from the file, a modified copy-on-write page stays (or goes to
# swap). Python's mmap module does not name it; the value is Linux's (asm-generic/mman-common.h).
# It also evicts the clean pages from the page cache, so the next read (this process's or the next
# run's) goes to the disk: for a read-only mapping MADV_DONTNEED does the job without that (measured
# at 256 ranks: 0.6 s less system time a replay, see bench/README.md).
_LINUX = sys.platform.startswith("linux")
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21) if _LINUX else None
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None) if _LINUX else None


# Handing mapped pages back takes a quarter off the replay's peak at 512 ranks and a fifth at 64
# (418 -> 331 MiB) at no measurable cost, since the pages read again come from the page cache.
# (When it evicted them, MADV_PAGEOUT on the read-only mapping, reading them back cost ~8 % of a
# 64-rank replay, and this threshold was 1 GiB.) Below it, a job's mapped columns are a few tens of
# MB: not worth a system call per rank and step.
PAGE_OUT_ABOVE = 64 << 20  # bytes of a job's mapped cache columns


def mapping_of(column: np.ndarray) -> mmap.mmap | None:
    """The memory mapping a numpy array is a view of, or None (an ordinary in-memory array)."""
    a: object = column
    while isinstance(a, np.ndarray):
        m = getattr(a, "_mmap", None)  # np.memmap keeps its mapping here
        if m is not None:
            return m  # type: ignore[no-any-return]
        a = a.base
    return a if isinstance(a, mmap.mmap) else None


def _advice(mapping: mmap.mmap) -> int | None:
    """How to hand ``mapping``'s pages back without losing anything: unmap them where the mapping is
    read-only (nothing in it can differ from the file), reclaim them otherwise; None outside Linux
    or once the mapping is closed."""
    try:
        with memoryview(mapping) as view:  # the mapping's own access: ACCESS_READ is read-only
            read_only = view.readonly
    except ValueError:  # closed
        return None
    return _MADV_DONTNEED if read_only else _MADV_PAGEOUT


def page_out(mapping: mmap.mmap | None) -> None:
    """Hand a mapping's resident pages back to the operating system without losing anything (a
    no-op where the system cannot: not Linux, a kernel older than 5.4, a closed mapping)."""
    advice = _advice(mapping) if mapping is not None else None
    if advice is None:
        return
    try:
        mapping.madvise(advice)  # type: ignore[union-attr]
    except (OSError, ValueError):  # EINVAL on old kernels; ValueError once closed
        pass


def page_out_except(column: np.ndarray, keep: list[np.ndarray]) -> None:
    """:func:`page_out` the mapping ``column`` is a view of, except the pages under the ``keep``
    arrays that are views of it too (they are about to be read again: paging them out would only
    make the next step read them back from the file)."""
    mapping = mapping_of(column)
    advice = _advice(mapping) if mapping is not None else None
    if mapping is None or advice is None:
        return
    if not keep:
        page_out(mapping)
        return
    first = _mapping_address(column, mapping)
    page = mmap.PAGESIZE
    kept: list[tuple[int, int]] = []
    for a in keep:
        if a.nbytes and mapping_of(a) is mapping:
            lo = a.__array_interface__["data"][0] - first
            kept.append((lo // page * page, -(-(lo + a.nbytes) // page) * page))
    at = 0
    try:
        for lo, hi in [*sorted(kept), (len(mapping), len(mapping))]:
            if lo > at:
                mapping.madvise(advice, at, lo - at)
            at = max(at, hi)
    except (OSError, ValueError):
        pass


def _mapping_address(column: np.ndarray, mapping: mmap.mmap) -> int:
    """Address of the first byte of ``mapping``, from the np.memmap that owns it (a memmap made
    at an offset maps from the allocation boundary below it and starts its data past that)."""
    a: object = column
    while isinstance(a, np.ndarray) and getattr(a, "_mmap", None) is not mapping:
        a = a.base
    assert isinstance(a, np.memmap)
    return int(a.__array_interface__["data"][0]) - int(a.offset) % mmap.ALLOCATIONGRANULARITY


def release_free_heap() -> None:
    """Return the C heap's free blocks to the operating system (glibc only; a no-op elsewhere)."""
    if _libc is not None:
        _libc.malloc_trim(0)
