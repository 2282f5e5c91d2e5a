"""The scale benchmark's targets table marks each engine target met or not from the figures it
measured: a target it cannot fail would hide a regression, so both verdicts are checked here on
made-up rows (no job is run)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_scale.py"


def _bench(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The benchmark's script (loaded as ``python bench/bench_scale.py`` would import it) and the
    names of its parts (bench/scale/), in one namespace."""
    monkeypatch.syspath_prepend(str(BENCH.parent))  # the benchmarks import their helpers as scripts do
    spec = importlib.util.spec_from_file_location("bench_scale_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    parts = [importlib.import_module(f"scale.{m}") for m in ("jobs", "probe", "verdicts", "report")]
    names = {k: v for m in (module, *parts) for k, v in vars(m).items() if not k.startswith("__")}
    return SimpleNamespace(**names)


def _row(b, tasks: int, wall: float, pipeline: float, rss: int, sim: float, est_wall: float = 1.0) -> dict:  # type: ignore[no-untyped-def]
    cached = b.Run(
        wall=wall, rss=rss, out={"simulate_seconds": sim, "timings": {"pipeline": {"wall_s": pipeline}}}
    )
    return {
        "tasks": tasks,
        "cached": cached,
        "estimate": b.Run(wall=est_wall),
        "cached_walls": [wall, wall + 0.1],
    }


def test_targets_mark_met_and_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    m = 1_000_000
    rows = {
        # 64 ranks: the whole command just under 1 M tasks/s, the pipeline over it; 400 B/task
        "64": _row(b, m, wall=1.1, pipeline=0.9, rss=400 * m, sim=0.05),
        # 512 ranks: everything within the targets but the estimate (31 s > 30 s)
        "512": _row(b, 15 * m, wall=10.0, pipeline=9.0, rss=200 * 15 * m, sim=0.5, est_wall=31.0),
    }
    sizes = [("64", m, 400 * m), ("512", 15 * m, 200 * 15 * m)]
    text = b.targets(rows, sizes)
    line64 = next(line for line in text.splitlines() if line.strip().startswith("64 "))
    line512 = next(line for line in text.splitlines() if line.strip().startswith("512 "))
    assert "whole command 0.91 M tasks/s NOT met" in line64
    assert "in-process 1.11 met" in line64
    assert "peak/tasks 400 B NOT met" in line64
    assert "simulation 20.0 met" in line64
    # (15 M x 200 - 1 M x 400) / 14 M extra tasks = 186 B per extra task
    assert "per extra task 186 B met" in line512
    assert "wall 10.0 s met" in line512
    assert "peak 3.00 GB met" in line512
    assert "estimate --dp 16 31.0 s NOT met" in line512
    assert "cached walls 10.00-10.10 s over 2 runs" in line512


def test_targets_report_a_failed_job(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    text = b.targets({"256": {"error": "killed at 8.1 GiB after 90 s"}}, [])
    assert "256  killed at 8.1 GiB" in text


def test_targets_set_the_runtime_floor_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    m = 1_000_000
    rows = {"64": _row(b, m, wall=1.1, pipeline=0.9, rss=400 * m, sim=0.05)}
    rows["64"]["graph_bytes"] = 100 * m
    floor = b.Run(wall=0.5, rss=150 * m, out={"tasks": 4_000})
    text = b.targets(rows, [], floor)
    # 1 M tasks in 1.1 - 0.5 s; (400 - 150) MB / 1 M tasks; the floor is 0.5 s of the 1 s and
    # 150 of the 250 MB that 1 M tasks may take
    assert "above the runtime floor 1.67 M tasks/s, 250 B/task" in text
    assert "the floor alone: 50% of the time and 60% of the memory" in text
    # the floor and the graph: 250 of the 250 MB
    assert "the graph's own arrays 95.4 MiB (100 B/task): with the floor 238 MiB, 100% of the 238 MiB" in text
    assert "0.50 s wall" in b.floor_line(floor) and "4,000 tasks" in b.floor_line(floor)


def test_the_median_run_stands_for_repeats_with_the_largest_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    runs = [b.Run(wall=3.0, rss=10), b.Run(wall=1.0, rss=30), b.Run(wall=2.0, rss=20)]
    median = b.median_run(runs)
    assert median.wall == 2.0 and median.rss == 30


def test_a_machine_that_charges_for_fresh_memory_is_named_in_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = _bench(monkeypatch)
    from machine_state import MachineState  # bench/ is on the path now

    m = 1_000_000
    rows = {"512": _row(b, 15 * m, wall=20.0, pipeline=19.0, rss=3 * 10**9, sim=0.5)}
    rows["512"]["cached"].cpu, rows["512"]["cached"].sys_cpu = 22.0, 9.0
    # a VM host that takes freed memory back: 50 us a fresh page, 0.4 us touched again
    charged = MachineState(first_touch_us=50.4, touched_again_us=0.4, python_loop_s=0.4)
    assert charged.charges_fresh_memory
    assert "system time 9.00 of its 22.00 CPU s (where the machine's charge" in b.targets(
        rows, [], None, charged
    )
    assert "charges extra for fresh memory" in charged.line("at the start")
    # an ordinary machine: both a few tenths of a microsecond; nothing is added
    ordinary = MachineState(first_touch_us=0.5, touched_again_us=0.3, python_loop_s=0.4)
    assert not ordinary.charges_fresh_memory
    assert "system time" not in b.targets(rows, [], None, ordinary)
    # the verdict names the machine when it missed a time there, and not on an ordinary machine
    assert (
        "NOT met: speed (in-process), memory above the floor (timed on a machine that charges"
        in b.targets(rows, [], None, charged)
    )
    assert "timed on a machine" not in b.targets(rows, [], None, ordinary)
    assert "charges extra" not in ordinary.line("at the start")
    # slow everywhere (a slow first touch that is no slower than a second one) is not this case
    assert not MachineState(first_touch_us=3.0, touched_again_us=1.0, python_loop_s=0.4).charges_fresh_memory


def test_the_machine_probe_measures_in_a_fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    _bench(monkeypatch)
    from machine_state import MachineState, probe

    state = probe(mib=4, additions=1_000)  # small: the figures' size is not the point here
    assert isinstance(state, MachineState), state
    assert state.first_touch_us > 0 and state.touched_again_us > 0 and state.python_loop_s > 0
    # a probe that cannot run says so (the benchmark prints it and goes on without the state)
    assert "machine probe failed" in str(probe(python=sys.executable + "-missing", mib=4, additions=10))
    # one whose script fails names the error, not a list or an exit code alone
    failed = str(probe(mib=-1, additions=10))  # a negative size: numpy refuses it
    assert failed.startswith("machine probe failed: ValueError"), failed


def test_the_issue_reading_gives_one_verdict_per_job(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    m = 1_000_000
    floor = b.Run(wall=0.5, rss=150 * m, out={"tasks": 4_000})
    # 64 ranks: the whole command is slow and heavy (the floor), the stages it names are not
    ok64 = _row(b, m, wall=1.1, pipeline=0.9, rss=400 * m, sim=0.05)
    assert b.issue_reading_misses("64", ok64, None, floor) == []
    # the same job with 260 B/task above the floor, or a pipeline under 1 M tasks/s, misses
    heavy = _row(b, m, wall=1.1, pipeline=0.9, rss=410 * m, sim=0.05)
    assert b.issue_reading_misses("64", heavy, None, floor) == ["memory above the floor"]
    slow = _row(b, m, wall=1.1, pipeline=1.1, rss=400 * m, sim=0.05)
    assert b.issue_reading_misses("64", slow, None, floor) == ["speed (in-process)"]
    # no floor, no pipeline timer: not judged, so missed
    no_timer = _row(b, m, wall=1.1, pipeline=0.9, rss=400 * m, sim=0.05)
    no_timer["cached"].out = {"simulate_seconds": 0.05}
    assert b.issue_reading_misses("64", no_timer, None, None) == [
        "speed (in-process)",
        "memory above the floor",
    ]
    # 512 ranks: a steep extra-task cost and a slow estimate are named
    big = _row(b, 15 * m, wall=10.0, pipeline=9.0, rss=200 * 15 * m, sim=0.5, est_wall=31.0)
    assert b.issue_reading_misses("512", big, 260.0, floor) == ["memory per extra task", "estimate --dp 16"]
    text = b.targets({"64": ok64, "512": big}, [("64", m, 400 * m), ("512", 15 * m, 200 * 15 * m)], floor)
    verdicts = [line for line in text.splitlines() if "the issue's reading" in line]
    assert verdicts[0].endswith("all met") and verdicts[1].endswith("NOT met: estimate --dp 16")
