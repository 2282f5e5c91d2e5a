"""Microbatch and pipeline rewrites on SYNTHETIC jobs (``lumos synth``): they check the rewrite
logic, not accuracy (the synthetic job uses Lumos's own cost models).

* Data parallelism traded against microbatches at a fixed global batch: doubling DP and halving
  each GPU's microbatches should take about half the time (the issue's reproduction; on real A100s
  the same change measured 0.53x) -- and the inverse about twice. The band allows the fixed
  per-iteration costs (optimizer, gradient synchronisation) that do not scale with microbatches.
* 1F1B with fewer microbatches than stages (Megatron runs it: warm-up = min(P - s - 1, m)).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos_core.perf.schedules import format_schedule, schedule
from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.loader import load_job
from lumos_core.whatif.estimate import estimate


def _synth(out: Path, model: ModelSpec, **kw) -> Path:
    synthesize(SynthConfig(model=model, iterations=3, seed=5, gpu="A100", **kw), out)
    return out


@pytest.fixture(scope="module")
def dp4_job(tmp_path_factory):
    model = ModelSpec("custom", layers=8, hidden=2048, ffn=8192, heads=16, seq=1024, vocab=32000)
    out = _synth(
        tmp_path_factory.mktemp("dp4") / "job", model, tp=1, pp=1, dp=4, micro_batch=2, microbatches=4
    )
    return load_job(out, use_cache=False)


def test_more_data_parallelism_fewer_microbatches_takes_about_half(dp4_job) -> None:
    r = estimate(dp4_job, {"dp": 8, "microbatches": 2})
    ratio = r.predicted.iteration_us / r.replayed.iteration_us
    assert 0.45 <= ratio <= 0.6, ratio


def test_less_data_parallelism_more_microbatches_takes_about_twice(dp4_job) -> None:
    r = estimate(dp4_job, {"dp": 2, "microbatches": 8})
    ratio = r.predicted.iteration_us / r.replayed.iteration_us
    assert 1.8 <= ratio <= 2.2, ratio


def test_microbatches_alone_scale_the_iteration(dp4_job) -> None:
    half = estimate(dp4_job, {"microbatches": 2})
    double = estimate(dp4_job, {"microbatches": 8})
    base = half.replayed.iteration_us
    assert 0.45 <= half.predicted.iteration_us / base <= 0.6
    assert 1.8 <= double.predicted.iteration_us / base <= 2.2


def test_one_f_one_b_with_fewer_microbatches_than_stages(tmp_path: Path) -> None:
    assert format_schedule(schedule("1f1b", 0, 4, 2)) == "F1 F2 B1 B2"
    model = ModelSpec("custom", layers=8, hidden=1024, ffn=4096, heads=8, seq=1024, vocab=32000)
    job = load_job(
        _synth(tmp_path / "pp4", model, tp=1, pp=4, dp=1, micro_batch=1, microbatches=8), use_cache=False
    )
    times = {m: estimate(job, {"microbatches": m}).predicted.iteration_us for m in (1, 2, 3, 4)}
    assert times[1] < times[2] < times[3] < times[4]
    # The pipeline bubble is paid once: one more microbatch costs less than the first one did.
    assert times[2] - times[1] < times[1]
    r = estimate(job, {"microbatches": 2})
    assert any("2 microbatches" in n for n in r.notes)
