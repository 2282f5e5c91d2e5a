"""Event times to integer ns: exact for integer µs, float64 rounding otherwise, whatever the mix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from lumos_core.trace.kineto_reader import parse_trace_file


def _rank(tmp_path: Path, times: list[tuple[float | int, float | int]]):  # type: ignore[no-untyped-def]
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for i, (ts, dur) in enumerate(times)
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return parse_trace_file(path)


def test_numpy_converts_ints_to_float64_as_float_does() -> None:
    """The parser converts ts/dur lists with numpy once instead of float() per value: the same
    numbers, also for ints beyond 2**53 and up to the 64-bit limits."""
    values = [2**53 + 1, 2**53 + 3, 2**63 - 1, 2**63 + 1, 2**64 - 1, -(2**63) - 1, -(2**64) + 1, 7, 1.5]
    for mix in (values, [v for v in values if type(v) is int], [v for v in values if abs(v) < 2**63]):
        assert np.array_equal(np.asarray(mix, np.float64), np.asarray([float(v) for v in mix]))


def test_integer_times_stay_exact(tmp_path: Path) -> None:
    big = 2**53 + 1  # not a float64
    rank = _rank(tmp_path, [(big + 2, 3), (big, 5)])
    assert sorted(rank.start.tolist()) == [0, 2000]
    assert sorted(rank.dur.tolist()) == [3000, 5000]
    assert rank.raw_shift_ns == big * 1000


def test_mixed_int_and_float_times(tmp_path: Path) -> None:
    """One float makes the rank's times float64; the base stays the exact minimum (an int here)."""
    big = 2**53 + 1
    rank = _rank(tmp_path, [(big, 1), (float(2**53 + 4), 2.5)])
    # the differences are taken in float64, where big and the base both read 2**53
    assert sorted(rank.start.tolist()) == [0, 4000]
    assert sorted(rank.dur.tolist()) == [1000, 2500]
    assert rank.raw_shift_ns == big * 1000


def test_float_times_keep_their_ns_fractions(tmp_path: Path) -> None:
    rank = _rank(tmp_path, [(1000.25, 0.5), (999.999, 1.0)])
    assert sorted(rank.start.tolist()) == [999, 1250]
    assert sorted(rank.dur.tolist()) == [500, 1000]
    assert rank.raw_shift_ns == 999_000


def test_shifting_a_rank_never_moves_one_that_shares_its_columns(tmp_path: Path) -> None:
    """A predicted timeline is the measured rank with new start/dur (``dataclasses.replace``): it
    shares the flow, instant and memory times and the iteration windows. Moving one of the two must
    leave the other where it is; only the loader, on ranks it just made, moves columns in place."""
    import dataclasses

    from lumos_core.trace.memory import MemoryRecords

    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 30,
        },
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    ]
    (tmp_path / "rank0.json").write_bytes(orjson.dumps({"traceEvents": events}))
    rank = parse_trace_file(tmp_path / "rank0.json")
    assert rank.iterations
    mem = MemoryRecords.empty()
    rank.memory = dataclasses.replace(mem, ts=np.array([12_000, 22_000], np.int64))
    rank.instant_ts = np.array([15_000], np.int64)
    predicted = dataclasses.replace(rank, start=rank.start.copy(), dur=rank.dur.copy())
    assert predicted.memory is rank.memory and predicted.instant_ts is rank.instant_ts
    before = {
        k: np.array(v)
        for k, v in (("start", rank.start), ("instant", rank.instant_ts), ("memory", rank.memory.ts))
    }
    windows = [(it.cpu_start, it.cpu_end) for it in rank.iterations]

    predicted.shift(1_000)
    assert np.array_equal(predicted.start, before["start"] + 1_000)
    assert np.array_equal(predicted.instant_ts, before["instant"] + 1_000)
    assert np.array_equal(predicted.memory.ts, before["memory"] + 1_000)
    assert np.array_equal(rank.start, before["start"]) and np.array_equal(rank.instant_ts, before["instant"])
    assert np.array_equal(rank.memory.ts, before["memory"])
    assert [(it.cpu_start, it.cpu_end) for it in rank.iterations] == windows

    # in place (the loader's way): the same arrays, moved; a read-only column is copied instead
    own = rank.instant_ts
    rank.start = rank.start.copy()
    rank.start.flags.writeable = False
    rank.shift(-7, in_place=True)
    assert rank.instant_ts is own and np.array_equal(own, before["instant"] - 7)
    assert rank.start.flags.writeable and np.array_equal(rank.start, before["start"] - 7)
