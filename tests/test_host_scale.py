"""The host-side knob (--cpu-scale) and the CPU-paced note, on the real nanoGPT trace (8x H100,
recorded under the profiler: its CPU thread sets the pace, so GPU what-ifs alone change nothing)."""

from __future__ import annotations

import pytest
from conftest import needs_shared, shared

from lumos_core.trace.loader import load_job
from lumos_core.whatif.config import JobConfig, problems
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.knobs import parse_changes


@pytest.fixture(scope="module")
def nanogpt():
    return load_job(shared("h100-nanogpt-8rank"))


@needs_shared
def test_gpu_what_if_on_a_cpu_paced_trace_says_so_and_by_how_much(nanogpt) -> None:
    r = estimate(nanogpt, {"gpu": "H200"})
    assert abs(r.predicted.iteration_us / r.replayed.iteration_us - 1) < 0.005
    paced = [n for n in r.notes if n.startswith("CPU-paced by")]
    assert paced and "--cpu-scale" in paced[0]


@needs_shared
def test_an_unchanged_estimate_on_a_cpu_paced_trace_says_how_paced_it_is(nanogpt) -> None:
    """DP 16 barely changes the GPU work here (the collectives stay hidden), so no busy-time note;
    the +0.0 % still comes with how much the host sets the pace, and none once the host is scaled."""
    r = estimate(nanogpt, {"dp": 16})
    assert abs(r.predicted.iteration_us / r.replayed.iteration_us - 1) < 0.005
    assert not [n for n in r.notes if n.startswith("GPU busy time")]
    assert [n for n in r.notes if n.startswith("CPU-paced by")]
    scaled = estimate(nanogpt, {"dp": 16, "cpu_scale": 0.0})
    assert not [n for n in scaled.notes if n.startswith("CPU-paced by")]


@needs_shared
def test_cpu_scale_lets_gpu_changes_show(nanogpt) -> None:
    fast_host = estimate(nanogpt, {"cpu_scale": 0.3}).predicted.iteration_us
    fast_host_h200 = estimate(nanogpt, {"cpu_scale": 0.3, "gpu": "H200"}).predicted.iteration_us
    replayed = estimate(nanogpt, {}).replayed.iteration_us
    assert fast_host < 0.95 * replayed  # the host side was pacing the job
    assert fast_host_h200 < 0.98 * fast_host  # H200's HBM now shortens the iteration
    slower = estimate(nanogpt, {"cpu_scale": 2.0}).predicted.iteration_us
    assert slower > 1.2 * replayed
    rules = [r.what for r in estimate(nanogpt, {"cpu_scale": 0.5}).retimed]
    assert "host (CPU) tasks" in rules


def test_cpu_scale_is_a_knob_with_checks() -> None:
    assert parse_changes("cpu_scale=0.3") == {"cpu_scale": 0.3}
    assert problems(JobConfig(cpu_scale=-1.0))
    assert problems(JobConfig(cpu_scale=0.0)) == []
    assert JobConfig(cpu_scale=0.5).label(JobConfig()) == "host time x 0.5"


@needs_shared
def test_overlap_slowdown_is_measured_from_the_trace(nanogpt) -> None:
    from lumos_core.trace.overlap_slowdown import measure_overlap_slowdown

    s = measure_overlap_slowdown(nanogpt)
    assert s.kernels >= 10 and s.samples >= 100
    assert s.factor > 1.0  # NCCL kernels take SMs and HBM bandwidth from the kernels beside them


def test_overlap_slowdown_of_a_job_without_interference_is_one(tmp_path) -> None:
    from lumos_core.synth import ModelSpec, SynthConfig, synthesize
    from lumos_core.trace.overlap_slowdown import measure_overlap_slowdown

    # lumos synth times every kernel alone (no interference model): the measurement must say 1.
    model = ModelSpec("custom", layers=4, hidden=1024, ffn=4096, heads=8, seq=1024, vocab=8000)
    synthesize(
        SynthConfig(model=model, tp=1, pp=1, dp=2, microbatches=2, iterations=3, seed=3), tmp_path / "j"
    )
    s = measure_overlap_slowdown(load_job(tmp_path / "j", use_cache=False))
    assert s.kernels > 0 and s.factor == pytest.approx(1.0, abs=0.02)
