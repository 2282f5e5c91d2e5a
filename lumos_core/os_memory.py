"""Give memory the process no longer needs back to the operating system (large jobs on laptops).

Three cases matter at hundreds of ranks: sparse reads of a memory-mapped cache column (a few args
out of every page of a rank's args blob keep the whole blob resident), a rank's mapped cache columns
staying resident after the graph has copied what it needs from them (a quarter of the replay's peak
at 512 ranks), and the C heap keeping freed blocks of the many mid-sized numpy temporaries of graph
building. All are only resident-set hygiene: nothing is lost, a page handed back is read again from
the cache file if used again.
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
    """Let the kernel drop the resident pages of a memory-mapped, unmodified column."""
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
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21) if sys.platform.startswith("linux") else None


# Handing mapped pages back pays where a job's columns are big: at 512 ranks it takes a quarter off
# the replay's peak. Below this the pages are a few hundred MB at most, and faulting the ones read
# again back in costs more (~8 % of a 64-rank replay's CPU time) than holding them.
PAGE_OUT_ABOVE = 1 << 30  # bytes of a job's mapped cache columns


def mapping_of(column: np.ndarray) -> mmap.mmap | None:
    """The memory mapping a numpy array is a view of, or None (an ordinary in-memory array)."""
    a: object = column
    while isinstance(a, np.ndarray):
        m = getattr(a, "_mmap", None)  # np.memmap keeps its mapping here
        if m is not None:
            return m  # type: ignore[no-any-return]
        a = a.base
    return a if isinstance(a, mmap.mmap) else None


def page_out(mapping: mmap.mmap | None) -> None:
    """Hand a mapping's resident pages back to the operating system without losing anything (a
    no-op where the system cannot: not Linux, a kernel older than 5.4, a closed mapping)."""
    if mapping is None or _MADV_PAGEOUT is None:
        return
    try:
        mapping.madvise(_MADV_PAGEOUT)
    except (OSError, ValueError):  # EINVAL on old kernels; ValueError once closed
        pass


def page_out_except(column: np.ndarray, keep: list[np.ndarray]) -> None:
    """:func:`page_out` the mapping ``column`` is a view of, except the pages under the ``keep``
    arrays that are views of it too (they are about to be read again: paging them out would only
    make the next step read them back from the file)."""
    mapping = mapping_of(column)
    if mapping is None or _MADV_PAGEOUT is None:
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
                mapping.madvise(_MADV_PAGEOUT, at, lo - at)
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
