"""The array groupings the what-if re-timing uses against the plain Python loops they replace."""

from __future__ import annotations

import numpy as np
import pytest

from lumos_core.whatif.row_groups import group_ids, seen_before


def _loop(cols: list[np.ndarray]) -> tuple[list[int], list[int], list[int]]:
    ids: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    per_row, before = [], []
    counts: dict[int, int] = {}
    for i, key in enumerate(zip(*(c.tolist() for c in cols))):
        if key not in ids:
            ids[key] = len(ids)
            first.append(i)
        g = ids[key]
        per_row.append(g)
        before.append(counts.get(g, 0))
        counts[g] = counts.get(g, 0) + 1
    return per_row, first, before


@pytest.mark.parametrize("seed", range(20))
def test_group_ids_number_groups_in_order_of_first_appearance(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    cols = [
        rng.integers(-2, 3, n),
        rng.integers(0, 2, n).astype(np.int8),
        rng.choice([-1, 0, 7, 2**40, 2**40 + 1], n),
    ][: int(rng.integers(1, 4))]
    ids, first = group_ids(*cols)
    want_ids, want_first, want_before = _loop(cols)
    assert ids.tolist() == want_ids
    assert first.tolist() == want_first
    assert seen_before(ids, len(first)).tolist() == want_before


def test_group_ids_of_no_rows() -> None:
    ids, first = group_ids(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(ids) == 0 and len(first) == 0


@pytest.mark.parametrize("seed", range(10))
def test_nodes_by_rank_is_each_ranks_nodes_ascending(seed: int) -> None:
    from types import SimpleNamespace

    from lumos_core.whatif.retime.rank_nodes import nodes_by_rank

    rng = np.random.default_rng(seed)
    rank = rng.integers(-1 if seed % 2 else 0, 6, int(rng.integers(1, 300))).astype(np.int32)
    graph = SimpleNamespace(rank=rank, n_nodes=len(rank))
    got = nodes_by_rank(graph)  # type: ignore[arg-type]
    assert sorted(got) == sorted(set(rank.tolist()))
    for r, nodes in got.items():
        assert nodes.tolist() == np.flatnonzero(rank == r).tolist()
