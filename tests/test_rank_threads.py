"""Per-rank work on threads (lumos_core.rank_threads): results in order, errors and cancellation at the
right item, no thread left behind, and the graph and replay identical to one thread's."""

from __future__ import annotations

import random
import threading
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from tracegen import TraceBuilder, nccl_args

from lumos_core.errors import Cancelled
from lumos_core.graph.build import build_graph
from lumos_core.rank_threads import MAX_THREADS, map_in_order, thread_count
from lumos_core.replay.run import replay
from lumos_core.trace.loader import load_job


def _rank_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lumos-rank")]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_results_come_in_the_order_of_the_items(threads: int) -> None:
    rng = random.Random(7)
    delays = [rng.random() * 0.004 for _ in range(40)]  # later items often finish first

    def work(i: int) -> int:
        time.sleep(delays[i])
        return i * i

    assert list(map_in_order(work, range(40), threads)) == [i * i for i in range(40)]
    assert not _rank_threads()


def test_an_error_is_raised_at_its_item_and_stops_the_rest() -> None:
    started: list[int] = []

    def work(i: int) -> int:
        started.append(i)
        if i == 5:
            raise ValueError("rank 5 is bad")
        time.sleep(0.002)
        return i

    got: list[int] = []
    with pytest.raises(ValueError, match="rank 5"):
        for r in map_in_order(work, range(100), 2):
            got.append(r)
    assert got == [0, 1, 2, 3, 4]
    assert len(started) < 100, "items after the error must not all run"
    assert not _rank_threads()


def test_a_caller_that_stops_early_leaves_no_thread_running() -> None:
    ran: list[int] = []

    def work(i: int) -> int:
        time.sleep(0.005)
        ran.append(i)
        return i

    with pytest.raises(Cancelled), closing(map_in_order(work, range(100), 2)) as results:
        for r in results:
            if r == 3:
                raise Cancelled("cancelled")
    assert not _rank_threads(), "closing must wait for the running items"
    settled = len(ran)
    time.sleep(0.03)
    assert len(ran) == settled < 100, "no item may start after the caller stopped"


def test_thread_count_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUMOS_THREADS", "1")
    assert thread_count() == 1
    monkeypatch.setenv("LUMOS_THREADS", "3")
    assert thread_count() == 3
    monkeypatch.setenv("LUMOS_THREADS", "zero")  # a typo falls back to the default
    assert 1 <= thread_count() <= MAX_THREADS
    monkeypatch.delenv("LUMOS_THREADS")
    assert 1 <= thread_count() <= MAX_THREADS


def _job(folder: Path, ranks: int = 6) -> Path:
    """Ranks with different amounts of work (so threads finish out of order), joined by an
    all-reduce, each with a CPU thread and two streams."""
    folder.mkdir()
    for r in range(ranks):
        b = TraceBuilder(rank=r, world=ranks)
        b.step(1, 1000, 9000)
        for k in range(40 + 30 * r):
            b.launch(f"gemm_{k % 4}", 1010 + 40 * k, 5, 1020 + 40 * k, 25 + r, stream=7 + k % 2)
        b.launch(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            8000,
            3,
            8010,
            200,
            stream=13,
            kargs=nccl_args(size=ranks),
        )
        b.write(folder / f"rank{r}.json")
    return folder


def test_graph_and_replay_are_the_same_on_one_or_two_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _job(tmp_path / "job")
    out = {}
    for n in ("1", "2"):
        monkeypatch.setenv("LUMOS_THREADS", n)
        job = load_job(folder)
        g = build_graph(job)
        r = replay(job, graph=g).as_dict()
        for k in ("seconds", "simulate_seconds", "tasks_per_second"):
            r.pop(k, None)
        cols = {
            k: np.asarray(getattr(g, k)).copy()
            for k in ("rank", "event", "node_type", "proc", "dur", "anchor", "sp_ptr", "sp_src", "sp_lag")
        }
        out[n] = (cols, g.procs, g.notes, r)
    (c1, p1, n1, r1), (c2, p2, n2, r2) = out["1"], out["2"]
    for k in c1:
        assert np.array_equal(c1[k], c2[k]), k
    assert p1 == p2 and n1 == n2 and r1 == r2
    assert len(p1) > 6 * 2  # every rank's CPU thread and streams are processors
    # each task's processor is its own rank's lane (the ranks' processor ids joined correctly)
    tasks = c2["proc"] >= 0
    owner = np.asarray([p2[i][0] for i in c2["proc"][tasks]])
    assert np.array_equal(owner, c2["rank"][tasks])
    job = load_job(tmp_path / "job")
    lanes = np.asarray([p2[i][1] for i in c2["proc"][tasks]])
    want = np.asarray([job.rank(int(r)).lane[e] for r, e in zip(c2["rank"][tasks], c2["event"][tasks])])
    assert np.array_equal(lanes, want)


def test_a_cancelled_build_stops_its_threads(tmp_path: Path) -> None:
    job = load_job(_job(tmp_path / "job"))
    calls = 0

    def progress(fraction: float, message: str) -> None:
        nonlocal calls
        calls += 1
        if message.startswith("graph of rank") and calls > 2:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        build_graph(job, progress=progress)
    assert not _rank_threads()


def test_a_thread_python_did_not_start_runs_the_items_itself() -> None:
    """From a foreign thread (the app's Qt workers) no thread is started: it would register the
    caller with threading for good, and the GUI thread needs its share of the GIL."""
    import _thread

    done = threading.Event()
    seen: dict[str, object] = {}

    def foreign() -> None:
        try:
            names = []
            seen["result"] = list(
                map_in_order(lambda i: (names.append(threading.get_ident()), i)[1], range(6), 2)
            )
            seen["threads"] = set(names)
            seen["me"] = threading.get_ident()
            seen["registered"] = any(t.ident == threading.get_ident() for t in threading.enumerate())
        finally:
            done.set()

    _thread.start_new_thread(foreign, ())  # a thread threading knows nothing of, as a QThread is
    assert done.wait(10)
    assert seen["result"] == list(range(6))
    assert seen["threads"] == {seen["me"]}
    assert seen["registered"] is False


@pytest.mark.parametrize(
    ("cores", "processes", "want"), [(2, 2, 1), (2, 1, 2), (16, 16, 1), (16, 4, 2), (1, 8, 1)]
)
def test_processes_sharing_the_cores_use_their_share(
    monkeypatch: pytest.MonkeyPatch, cores: int, processes: int, want: int
) -> None:
    """A sweep's workers (one per core) run their ranks on one thread each: workers times threads
    stays within the cores."""
    import os

    from lumos_core import rank_threads

    monkeypatch.setattr(rank_threads, "_share", None)  # restored after the test
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setenv("LUMOS_THREADS", "")
    rank_threads.share_cores(processes)
    assert thread_count() == want
    assert os.environ["LUMOS_THREADS"] == "", "the share is a setting of the process, not the environment"
    monkeypatch.setenv("LUMOS_THREADS", "1")  # the user's override still applies under the share
    assert thread_count() == 1
