"""The fitted priors against published runs they were NOT fitted on (bench/bench_published.py's
hold-out part), beside the null model "constant 45 % of peak" (Narayanan Eq. 3 FLOPs)."""

from __future__ import annotations

import statistics
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
bench = pytest.importorskip("bench_published")

needs_gt = pytest.mark.skipif(not bench.GT.is_dir(), reason=f"{bench.GT} is absent (published measurements)")
# The targets for the hold-out part: <= 15 % mean |error| per table and better than the null.
PER_TABLE = 0.15


@needs_gt
def test_hold_out_tables_beat_the_constant_45_percent_null():
    rows = [r for r in bench.load_rows() if not r.fit]
    a100 = bench.get_gpu("A100")
    tables: dict[str, list] = {}
    for i, r in enumerate(rows):
        if r.table == "vtrain" and i % 8:  # every 8th vTrain hold-out row keeps the test short
            continue
        tables.setdefault(r.table, []).append(r)
    assert set(tables) == {"narayanan_t1", "narayanan_t2", "korthikanti_t3t5", "vtrain"}
    for table, rs in tables.items():
        lumos = statistics.fmean(abs(bench.predicted(r, a100) / r.measured - 1) for r in rs)
        null = statistics.fmean(abs(bench.null_45(r) / r.measured - 1) for r in rs)
        assert lumos < null, f"{table}: {lumos:.3f} vs null {null:.3f}"
        assert lumos <= PER_TABLE, f"{table}: {lumos:.3f}"


def test_layer_sync_makes_host_and_gpu_time_add_up_where_they_are_of_a_size():
    """A sync at each checkpointed layer boundary (vTrain's Megatron-DeepSpeed runs) costs time only
    where host and GPU time are comparable: per layer, neither hides the other any more. Where the
    GPU dominates, it changes little; it never makes a step faster."""
    from dataclasses import replace

    from lumos_core.synth.models import ModelSpec, SynthConfig
    from lumos_core.synth.predict import predict

    def cfg(hidden: int, mb: int, **kw) -> SynthConfig:  # vTrain's shapes: 12 layers, 16 heads, tp 2
        m = ModelSpec(f"h{hidden}", 12, hidden, 4 * hidden, 16, 1024)
        return SynthConfig(
            model=m,
            gpu="A100",
            attention="unfused",
            tp=2,
            micro_batch=mb,
            microbatches=4,
            recompute="full",
            **kw,
        )

    def host_gpu(c: SynthConfig) -> tuple[float, float]:
        p = predict(c)
        return p.iteration_s, p.breakdown["host_share_forward"]

    parity = cfg(2048, 2)  # vTrain's regime: a layer's host and GPU time of a size
    free, share = host_gpu(parity)
    synced, _ = host_gpu(replace(parity, layer_sync=True))
    assert 0.4 < share <= 1.0, share  # the config is in the regime the test is about
    assert synced > 1.05 * free, (synced, free)  # the per-layer overlap is gone (vTrain: 10-20 % slower)
    gpu_bound = cfg(8192, 16)
    free, share = host_gpu(gpu_bound)
    synced, _ = host_gpu(replace(gpu_bound, layer_sync=True))
    assert share < 0.3, share
    assert free <= synced < 1.05 * free, (synced, free)


def test_layer_sync_traces_replay_to_the_prediction(tmp_path):
    """The sync is one instruction of the stage program, so ``lumos synth`` traces carry it too and
    replay to the trace-free prediction (synthetic: a consistency check, not accuracy)."""
    from lumos_core.synth import SynthConfig, synthesize
    from lumos_core.synth.models import ModelSpec
    from lumos_core.synth.predict import predict
    from lumos_core.trace.loader import load_job
    from lumos_core.whatif.estimate import estimate

    m = ModelSpec("h2048", 4, 2048, 8192, 16, 1024)
    cfg = SynthConfig(
        model=m, iterations=3, gpu="A100", attention="unfused", tp=2, micro_batch=2, microbatches=4,
        recompute="full", layer_sync=True,
    )  # fmt: skip
    synthesize(cfg, tmp_path / "job")
    replayed = estimate(load_job(tmp_path / "job", use_cache=False), {}).replayed.iteration_us * 1e-6
    assert predict(cfg).iteration_s == pytest.approx(replayed, rel=0.06)  # the synth-vs-predict tolerance


@needs_gt
def test_vtrain_noise_floor_is_far_below_the_ratio_target():
    """The issue's ratio target (<= 10 % mean per knob) is a model target, not a noise limit: lines
    through each configuration's 12/16/20/24-layer runs leave ~0.1 % (run-to-run noise), so an exact
    model would show ~0.1 % mean ratio error. The knob test below therefore uses the target itself."""
    sigma, floor = bench.vtrain_noise_floor(bench.load_rows())
    assert 0.0 < sigma < 0.01, sigma
    assert floor < 0.1 * bench.TARGET_RATIO, floor


@needs_gt
def test_vtrain_one_knob_ratios_meet_the_target_on_hold_out_pairs():
    """Hidden 1024 -> 2048 and micro-batch x2 on vTrain's node (pairs not both in the fit part), at the
    issue's target and better than "no change". Runs at 12 and 20 layers only, to keep it short (the
    bench scores all four depths)."""
    rows = [r for r in bench.load_rows() if r.table == "vtrain" and r.cfg.model.layers in (12, 20)]
    a100 = bench.get_gpu("A100")
    pred = {i: bench.predicted(r, a100) for i, r in enumerate(rows)}
    ratios = bench._ratios(rows, pred)
    for knob in ("vtrain hidden 1024->2048", "vtrain micro-batch x2"):
        pairs = [(p, m) for p, m, in_sample in ratios[knob] if not in_sample]
        assert len(pairs) > 100, (knob, len(pairs))
        lumos = statistics.fmean(abs(p / m - 1) for p, m in pairs)
        null = statistics.fmean(abs(1 / m - 1) for _, m in pairs)
        assert lumos <= bench.TARGET_RATIO, f"{knob}: {lumos:.3f} (no change {null:.3f})"
        assert lumos < null, f"{knob}: {lumos:.3f} vs no change {null:.3f}"
