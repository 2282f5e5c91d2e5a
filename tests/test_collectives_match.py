"""Matching collectives across ranks: the per-rank grouping of rows and the shift search that aligns
ranks without sequence numbers, against their plain forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, shared
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.collectives import best_shift, group_key, group_rows, shift_search
from lumos_core.trace.loader import load_job


def group_rows_per_row(t) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """The reference: every row's key computed on its own."""
    c = t.collectives
    if len(c) == 0:
        return {}
    order = np.argsort(t.start[c.event], kind="stable")
    keys = [group_key(t, int(r)) for r in order]
    return {
        key: np.asarray([int(r) for r, k in zip(order, keys) if k == key], np.int64)
        for key in dict.fromkeys(keys)
    }


def _assert_same_groups(job) -> None:  # type: ignore[no-untyped-def]
    for t in job.ranks:
        got, want = group_rows(t), group_rows_per_row(t)
        assert list(got) == list(want)  # the same groups in the same order
        for key in want:
            assert got[key].dtype == np.int64 and np.array_equal(got[key], want[key]), key


def test_rows_by_group_on_a_pipelined_synthetic_job(tmp_path: Path) -> None:
    tiny = ModelSpec("tiny", layers=4, hidden=256, ffn=1024, heads=4, seq=128, vocab=1024)
    synthesize(
        SynthConfig(model=tiny, tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=3), tmp_path / "j"
    )
    job = load_job(tmp_path / "j")
    assert any("|p2p:" in k for t in job.ranks for k in group_rows(t))
    _assert_same_groups(job)


@needs_shared
@pytest.mark.parametrize("path", ["h100-nanogpt-8rank", "dlrm-v100-8rank", "a100-ddp-2rank"])
def test_rows_by_group_on_real_ranks(path: str) -> None:
    _assert_same_groups(load_job(shared(path)))


def _shifts(n_ref: int, n: int) -> np.ndarray:
    return np.arange(-(n - 1), n_ref)  # every shift (short sequences: best_shift tries them all)


def _tol(ref_end: np.ndarray) -> float:
    gaps = np.diff(ref_end)
    return max(2_000.0, min(100_000.0, 0.25 * (float(np.median(gaps)) if len(gaps) else 1e12)))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 80),
    st.integers(0, 3),
    st.sampled_from([0.0, 500.0, 30_000.0, 3e6]),
    st.booleans(),
)
def test_best_shift_equals_the_full_search(
    seed: int, n: int, extra: int, jitter: float, repeat: bool
) -> None:
    """Same-length sequences that agree (the shortcut), ones with a stray row, scattered timing or a
    repeating pattern (where other shifts score well too): always the full search's shift."""
    rng = np.random.default_rng(seed)
    period = 2 if repeat else 10**6
    sig = (np.arange(n + extra) % period if repeat else rng.integers(0, 4, n + extra)).astype(np.int64)
    ref_end = np.cumsum(rng.integers(20_000, 200_000, n + extra)).astype(np.float64)
    ref_sig = sig
    cut = rng.integers(0, extra + 1)
    rows = slice(cut, cut + n)
    mine_sig = sig[rows].copy()
    mine_end = ref_end[rows] - 7_777 + rng.normal(0, jitter, n) if jitter else ref_end[rows] - 7_777
    if rng.random() < 0.2 and n > 1:
        mine_sig[rng.integers(0, n)] += 1  # one row disagrees
    got = best_shift(ref_sig, ref_end, mine_sig, mine_end)
    want = shift_search(ref_sig, ref_end, mine_sig, mine_end, _shifts(len(ref_sig), n), _tol(ref_end))
    assert got == want
