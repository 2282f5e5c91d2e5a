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
