"""Give memory the process no longer needs back to the operating system (large jobs on laptops).

Two cases matter at hundreds of ranks: sparse reads of a memory-mapped cache column (a few args out
of every page of a rank's args blob keep the whole blob resident), and the C heap keeping freed
blocks of the many mid-sized numpy temporaries of graph building. Both are only resident-set
hygiene: nothing is lost, a dropped page is read again from the cache file if used again.
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


def release_free_heap() -> None:
    """Return the C heap's free blocks to the operating system (glibc only; a no-op elsewhere)."""
    if _libc is not None:
        _libc.malloc_trim(0)
