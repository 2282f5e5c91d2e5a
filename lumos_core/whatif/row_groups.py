"""Rows of a few integer columns grouped by their values, groups numbered in order of first
appearance: what a Python loop building a dict keyed by the row's values sees, in array ops."""

from __future__ import annotations

import numpy as np


def group_ids(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group id per row, the first row of each group): rows equal in every column share an id;
    ids count up in the order their first row appears."""
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(cols[::-1])  # stable: each run of equal rows in row order
    new_run = np.zeros(n, bool)
    new_run[0] = True
    for c in cols:
        s = np.asarray(c)[order]
        new_run[1:] |= s[1:] != s[:-1]
    run = np.cumsum(new_run) - 1
    first_of_run = order[new_run]
    by_first = np.argsort(first_of_run, kind="stable")
    renumber = np.empty(len(first_of_run), np.int64)
    renumber[by_first] = np.arange(len(first_of_run))
    ids = np.empty(n, np.int64)
    ids[order] = renumber[run]
    return ids, first_of_run[by_first]


def seen_before(ids: np.ndarray, n_groups: int) -> np.ndarray:
    """Per row, how many earlier rows have its group id."""
    order = np.argsort(ids, kind="stable")
    starts = np.concatenate(([0], np.cumsum(np.bincount(ids, minlength=n_groups))))
    out = np.empty(len(ids), np.int64)
    out[order] = np.arange(len(ids)) - starts[ids[order]]
    return out
