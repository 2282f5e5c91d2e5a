"""Real GPU one-knob pairs (``../shared/tools/record_gpu_pairs.sh``): each estimate from the base run
against its measured variant, mean <= 5 %, none over 10 % (the issue's targets). No GPU has been
available to record them, so the test skips with that reason until ``tests/data/gpu-gpt/`` exists."""

from __future__ import annotations

import pytest
from conftest import REPO

GPU_GPT = REPO / "tests" / "data" / "gpu-gpt"


@pytest.mark.skipif(
    not (GPU_GPT / "base").is_dir(),
    reason="no real GPU pairs recorded: no GPU was available (record with ../shared/tools/record_gpu_pairs.sh "
    "into tests/data/gpu-gpt/)",
)
def test_gpu_ground_truth_pairs() -> None:
    import numpy as np

    from lumos_core.replay.breakdown import iteration_windows
    from lumos_core.trace.loader import load_job
    from lumos_core.whatif.baseline import infer_baseline
    from lumos_core.whatif.estimate import estimate

    def steady_ms(job) -> float:
        lengths = np.asarray([w.length for t in job.ranks for w in iteration_windows(t)[:-1]]) / 1e6
        return float(np.median(lengths))

    base = load_job(GPU_GPT / "base", use_cache=False)
    base_ms = steady_ms(base)
    errors = {}
    for run in sorted(p for p in GPU_GPT.iterdir() if p.is_dir() and p.name not in ("base", "base_repeat")):
        other = load_job(run, use_cache=False)
        want = infer_baseline(other).config
        have = infer_baseline(base).config
        changes = {
            k: getattr(want, k)
            for k in ("layers", "hidden", "ffn", "seq", "micro_batch", "microbatches")
            if getattr(want, k) != getattr(have, k)
        }
        r = estimate(base, changes)
        pred = r.predicted.iteration_us / r.replayed.iteration_us * base_ms
        errors[run.name] = abs(pred / steady_ms(other) - 1)
    assert errors and sum(errors.values()) / len(errors) <= 0.05, errors
    assert max(errors.values()) <= 0.10, errors
