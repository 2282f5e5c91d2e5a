"""Other accelerators (issue 27) and the HTA-definition cross-check.

Device activities come from any Kineto accelerator category (MTIA's ``mtia_ccp_events``, ROCm,
XPU); ``lumos inspect`` names the device type; the idle share is computed by HTA's temporal
breakdown definition. The fixture ``tests/data/mtia-toy`` is our own trace in MTIA's format
(``make_fixture.py`` writes it). Then one test per HTA 0.5.0 bug that Lumos must keep right.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, run_lumos, shared
from tracegen import TraceBuilder

from lumos_core.graph.build import build_graph
from lumos_core.replay.breakdown import iteration_windows, rank_breakdowns
from lumos_core.replay.hta_terms import temporal_breakdown
from lumos_core.replay.idle import idle_attribution
from lumos_core.trace.kineto_schema import rank_accelerator
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Kind

MTIA = Path(__file__).parent / "data" / "mtia-toy" / "mtia_rank_0.json"


def _hta_idle_pct(path: Path) -> float:
    """HTA's temporal-breakdown idle share, computed here from the raw events, independently of
    Lumos: device events (by category) in the steps but the last, idle = span - union."""
    ev = json.loads(path.read_text())["traceEvents"]
    steps = sorted(e["ts"] for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    lo, hi = steps[0], steps[-1]
    dev = sorted(
        (max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in ev if e.get("cat") == "mtia_ccp_events"
    )
    dev = [(a, b) for a, b in dev if b > a]
    busy, cur_a, cur_b = 0.0, None, None
    for a, b in dev:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    busy += cur_b - cur_a
    span = max(b for _a, b in dev) - min(a for a, _b in dev)
    return 100 * (span - busy) / span


def test_mtia_trace_has_device_activities_and_the_hta_idle_share() -> None:
    job = load_job(MTIA, workers=1)
    t = job.ranks[0]
    assert rank_accelerator(t) == "MTIA"
    assert t.count(Kind.KERNEL) == 32  # every mtia_ccp_events activity is device work
    assert t.count(Kind.RUNTIME) == 32
    assert np.all(t.launch[t.kind == Kind.KERNEL] >= 0)  # linked to their runtime call
    b = temporal_breakdown(t)
    assert b is not None and b["activities"] > 0
    assert b["idle_pct"] == pytest.approx(_hta_idle_pct(MTIA), abs=0.05)
    # the breakdown and the idle table run over device activities, not CPU ops
    (_w, first), *_ = rank_breakdowns(t)
    assert first.exposed_compute_ns > 0
    rep = idle_attribution(build_graph(job))
    assert {r.stream for r in rep.rows} == {1, 102}


def test_inspect_names_the_device_type(tmp_path) -> None:
    out = run_lumos("inspect", str(MTIA), "--json", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)["ranks"][0]
    assert r["device_type"] == "MTIA" and r["kernels"] == 32
    assert r["device_temporal_breakdown"]["idle_pct"] == pytest.approx(_hta_idle_pct(MTIA), abs=0.05)
    text = run_lumos("inspect", str(MTIA), tmp_path=tmp_path).stdout
    assert "MTIA" in text and "HTA's temporal breakdown" in text


@needs_shared
def test_rocm_trace_keeps_working_and_is_named() -> None:
    job = load_job(shared("edge-cases", "rocm_mi250_minitoy.json.gz"), workers=1)
    t = job.ranks[0]
    assert rank_accelerator(t) == "ROCm"
    assert t.count(Kind.KERNEL) == 14 and t.count(Kind.MEMCPY) == 2
    assert temporal_breakdown(t)["activities"] > 0
    build_graph(job)  # replayable


def test_xpu_categories_are_device_work(tmp_path) -> None:
    tb = TraceBuilder(rank=0, world=1)
    for s in range(2):
        tb.step(s, 100.0 * s, 90.0)
        corr = tb.runtime("urEnqueueKernelLaunch", 100.0 * s + 5, 4)
        tb.events[-1]["cat"] = "xpu_runtime"
        tb.events.append(
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 3, "ts": 100.0 * s + 12, "dur": 30.0,
             "args": {"device": 0, "stream": 3, "correlation": corr}}
        )
    tb.write(tmp_path / "xpu.json")
    t = load_job(tmp_path / "xpu.json", workers=1).ranks[0]
    assert rank_accelerator(t) == "XPU"
    assert t.count(Kind.KERNEL) == 2 and np.all(t.launch[t.kind == Kind.KERNEL] >= 0)


# ---------------------------------------------------------------- HTA 0.5.0's bugs, kept right


def test_triton_cpu_ops_with_a_stream_argument_are_not_device_work(tmp_path) -> None:
    tb = TraceBuilder(rank=0, world=1)
    tb.step(0, 0.0, 200.0)
    tb.step(1, 200.0, 200.0)
    for s in (0, 1):
        tb.cpu("triton_poi_fused_add_0", 200.0 * s + 10, 50.0, args={"stream": 7, "device": 0})
        tb.launch("triton_poi_fused_add_0", 200.0 * s + 20, 5, 200.0 * s + 30, 20.0)
    tb.write(tmp_path / "triton.json")
    t = load_job(tmp_path / "triton.json", workers=1).ranks[0]
    assert t.count(Kind.KERNEL) == 2  # the cpu_ops carrying args.stream stay CPU work
    assert t.count(Kind.CPU_OP) == 2
    b = temporal_breakdown(t)
    assert b["activities"] == 1  # one kernel in the steps but the last; HTA would count 2 more


def test_last_step_is_not_cut_at_the_gpu_annotation(tmp_path) -> None:
    tb = TraceBuilder(rank=0, world=1)
    tb.step(0, 0.0, 100.0)
    tb.step(1, 100.0, 100.0)
    tb.launch("k0", 10, 5, 20, 50.0)
    tb.launch("k_last", 150, 5, 160, 400.0)  # runs far past its step's CPU and GPU-side annotation
    tb.events.append(
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 100.0,
         "dur": 150.0, "args": {"device": 0, "stream": 7}}
    )
    tb.write(tmp_path / "last.json")
    t = load_job(tmp_path / "last.json", workers=1).ranks[0]
    last = iteration_windows(t)[-1]
    assert last.end == 560_000  # the end of k_last, not the annotation's 250 µs


def test_timestamps_keep_their_nanoseconds(tmp_path) -> None:
    tb = TraceBuilder(rank=0, world=1)
    tb.step(0, 0.0, 100.0)
    tb.step(1, 100.0, 100.0)
    for i in range(40):  # short kernels: 0.4 µs each, at fractional µs
        tb.launch("tiny", 1.0 + i * 2, 0.5, 1.7 + i * 2, 0.4)
    tb.write(tmp_path / "ns.json")
    t = load_job(tmp_path / "ns.json", workers=1).ranks[0]
    k = t.kind == Kind.KERNEL
    assert int(t.dur[k].sum()) == 40 * 400  # whole-µs rounding would lose or double it
    assert set((t.start[k] % 1000).tolist()) == {700}


def test_kernels_launched_before_the_window_are_busy_inside_it(tmp_path) -> None:
    """A kernel launched in step 0 that runs during step 1 keeps step 1's device busy: it is not
    idle time of step 1 (HTA drops it by its launch time and counts the time as idle)."""
    tb = TraceBuilder(rank=0, world=1)
    tb.step(0, 0.0, 100.0)
    tb.step(1, 100.0, 100.0)
    tb.step(2, 200.0, 100.0)
    tb.launch("early", 90, 5, 100, 80.0)  # launched in step 0, runs 100-180 µs (step 1)
    tb.launch("k1", 185, 5, 190, 5.0)
    tb.launch("k2", 210, 5, 215, 50.0)
    tb.write(tmp_path / "early.json")
    job = load_job(tmp_path / "early.json", workers=1)
    t = job.ranks[0]
    step1 = {w.name: b for w, b in rank_breakdowns(t)}["ProfilerStep#1"]
    assert step1.other_ns == 100_000 - 80_000 - 5_000  # only the true gaps are idle
    rows = [r for r in idle_attribution(build_graph(job)).rows if r.iteration == "ProfilerStep#1"]
    assert sum(r.idle_ns for r in rows) == 15_000
    # HTA's temporal breakdown figure, by its definition but over every device activity
    act = np.isin(t.kind, GPU_ACTIVITY_KINDS)
    assert temporal_breakdown(t)["activities"] == int(act.sum()) - 1  # k2 is in the last step


def test_memory_copies_and_sets_are_their_own_slice(tmp_path) -> None:
    tb = TraceBuilder(rank=0, world=1)
    tb.step(0, 0.0, 200.0)
    tb.step(1, 200.0, 200.0)
    tb.launch("gemm", 10, 5, 20, 50.0)  # 20-70
    tb.launch("Memcpy HtoD (Pageable -> Device)", 30, 5, 60, 30.0, cat="gpu_memcpy", stream=8)  # 60-90
    tb.launch("Memset (Device)", 100, 5, 110, 7.5, cat="gpu_memset")  # 110-117.5
    tb.launch("gemm", 210, 5, 220, 50.0)
    tb.write(tmp_path / "mem.json")
    job = load_job(tmp_path / "mem.json", workers=1)
    from lumos_core.replay.run import replay

    it = replay(job, critical_paths=False).ranks[0].iterations[0].as_dict()
    b = it["breakdown"]["measured"]
    assert b["memory_only_us"] == pytest.approx(20.0 + 7.5)  # the copy's part past the gemm, the set
    assert b["exposed_compute_us"] == pytest.approx(50.0 + 20.0 + 7.5)  # existing keys unchanged
    assert set(b) >= {"exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us"}
