"""Interval arithmetic on numpy arrays (ns): unions, clipping, coverage per time bin.

Summed kernel time is not wall time: overlapping kernels on several streams would be counted
twice. Every breakdown in Lumos is therefore computed on *unions* of intervals, as in the paper.
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals [start, end) into disjoint, sorted intervals.

    >>> union(np.array([0, 5, 2, 20]), np.array([3, 8, 6, 25]))
    (array([ 0, 20]), array([ 8, 25]))
    """
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if len(s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = reach[np.r_[idx[1:] - 1, len(s) - 1]]
    return out_s.astype(np.int64), out_e.astype(np.int64)


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi); empty ones dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def coverage(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int, bin_ns: int) -> np.ndarray:
    """Fraction of each bin [lo + k·bin, lo + (k+1)·bin) covered by the union of the intervals.

    This is the paper's "GPU busy" timeline (Fig. 6): the share of each 1 ms during which at least
    one stream runs something — not SM occupancy.
    """
    n_bins = max(1, int(np.ceil((hi - lo) / bin_ns)))
    s, e = union(*clip(starts, ends, lo, hi))
    if len(s) == 0:
        return np.zeros(n_bins)
    edges = lo + bin_ns * np.arange(n_bins + 1, dtype=np.int64)
    # Covered time before each edge = cumulative covered length up to that point.
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        partial = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, full + np.maximum(partial, 0), 0)

    before = covered_before(edges)
    widths = np.diff(edges).astype(np.float64)
    widths[-1] = max(float(hi - edges[-2]), 1.0)
    return np.clip(np.diff(before) / widths, 0.0, 1.0)
