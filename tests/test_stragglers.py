"""Straggler detection (lumos_core.replay.stragglers) on hand-built jobs where one rank computes
longer before every all-reduce: it is flagged, by how much and at which collectives; the others,
and a job without a late rank, are not."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import needs_shared, shared
from straggler_job import write_straggler_job

from lumos_core.replay.stragglers import MIN_LATE_NS, find_stragglers
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import CollectiveKind


def _job(tmp_path: Path, delay_us: float, n: int = 8, late: int = 5):  # type: ignore[no-untyped-def]
    return load_job(write_straggler_job(tmp_path / f"d{delay_us:g}", n, late, delay_us), use_cache=False)


def test_the_delayed_rank_is_flagged_with_its_lateness_and_collectives(tmp_path: Path) -> None:
    rep = find_stragglers(_job(tmp_path, 400.0))
    assert [r.rank for r in rep.flagged] == [5]
    r = rep.flagged[0]
    assert r.n_collectives == 3 and r.n_late == 3
    # it arrives 400 µs after the others (the median arrival): exact on these hand-built times
    assert r.mean_late_ns == pytest.approx(400_000, abs=1_000)
    assert r.max_late_ns == pytest.approx(400_000, abs=1_000)
    assert len(r.worst) == 3 and {c.kind for c in r.worst} == {CollectiveKind.ALL_REDUCE.label}
    assert "late at 3 of 3 collectives" in r.why and r.reason == r.why
    for other in rep.ranks:
        if other.rank != 5:
            assert not other.flagged and other.n_late == 0 and other.max_late_ns <= 1_000


def test_no_straggler_in_a_balanced_job_or_below_the_threshold(tmp_path: Path) -> None:
    assert find_stragglers(_job(tmp_path, 0.0)).flagged == []
    small = find_stragglers(_job(tmp_path, 30.0))
    assert small.threshold_ns >= MIN_LATE_NS > 30_000
    assert small.flagged == []
    assert small.ranks[5].max_late_ns == pytest.approx(30_000, abs=1_000)  # measured, just not flagged


def test_threshold_follows_the_iteration_time(tmp_path: Path) -> None:
    rep = find_stragglers(_job(tmp_path, 400.0))
    # iterations are 2 ms: 1 % is 20 µs, under the 50 µs floor
    assert rep.median_iteration_ns == pytest.approx(2_000_000, rel=0.02)
    assert rep.threshold_ns == MIN_LATE_NS


def test_a_longer_stage_is_not_a_straggler_but_a_late_rank_in_it_is(tmp_path: Path) -> None:
    """Two groups with their own all-reduces (like two pipeline stages); the second group's
    iterations are 500 µs longer for every member: iterations are compared among peers only."""
    folder = write_straggler_job(tmp_path / "stages", 8, 6, 400.0, groups=2, last_group_extra_us=500.0)
    rep = find_stragglers(load_job(folder, use_cache=False))
    assert [r.rank for r in rep.flagged] == [6]
    assert rep.ranks[6].n_late == 3 and rep.ranks[6].n_collectives == 3
    assert all(r.iteration_late_ns == 0 for r in rep.ranks)


# ---------------------------------------------------------------- synthetic slowed ranks (ground truth)
# A small GPU-bound Megatron-style job (TP2 x PP2 x DP2, 4 layers of hidden 4096): the synthetic
# GPUs differ by +-1 % in speed and every kernel by +-3 % (synth's own jitter), so the natural spread
# is there; the slowed ranks' kernels run 5 % longer. Synthetic data checks the detection logic, never
# its accuracy on real clusters.
SLOWED_CASES = [(), ((3, 1.05),), ((6, 1.05),), ((0, 1.05), (5, 1.05)), ((1, 1.05), (2, 1.05))]


def _synth_job(tmp_path: Path, slow: tuple, seed: int):  # type: ignore[no-untyped-def]
    from lumos_core.synth import SynthConfig, model_from_args, synthesize

    model = model_from_args(
        "custom", layers=4, hidden=4096, ffn=None, heads=32, seq=2048, vocab=None, kv_channels=None
    )
    cfg = SynthConfig(model=model, tp=2, pp=2, dp=2, iterations=4, seed=seed, slow_ranks=slow)
    folder = tmp_path / f"s{seed}-{'-'.join(str(r) for r, _ in slow) or 'plain'}"
    synthesize(cfg, folder)
    return load_job(folder, use_cache=False, workers=1)


@pytest.mark.parametrize("seed", [0, 1])
def test_synthetic_slowed_ranks_are_found_exactly_at_5_percent(tmp_path: Path, seed: int) -> None:
    """Precision and recall 1.0 over the cases (a plain job, one and two slowed ranks, two in one
    pipeline stage): every slowed rank flagged, nothing else, with the slowdown measured."""
    tp = fp = fn = 0
    for slow in SLOWED_CASES:
        rep = find_stragglers(_synth_job(tmp_path, slow, seed))
        got = {r.rank for r in rep.flagged}
        want = {r for r, _ in slow}
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
        for r in rep.flagged:
            assert r.cause == "compute" and r.reason.startswith("compute: kernels")
            assert 0.03 < r.slowdown < 0.08, (slow, r.rank, r.slowdown)  # 5 % +- the GPUs' own spread
    assert fp == 0 and fn == 0 and tp == 6  # precision = recall = 1.0



@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 4])
def test_two_slowed_ranks_among_8_do_not_mask_each_other(tmp_path: Path, seed: int) -> None:
    """Two slowed ranks widen each other's reference: on these seeds a one-at-a-time leave-one-out
    z-score found 3 of the 4 (seed 4: ranks 1 and 2 both at z 3.1, rank 5 at 3.4, against 3.5).
    The outward search takes the most extreme out and judges the next without it."""
    for slow in SLOWED_CASES[3:]:
        rep = find_stragglers(_synth_job(tmp_path, slow, seed))
        assert sorted(r.rank for r in rep.flagged) == sorted(r for r, _ in slow), (seed, slow)
        for r in rep.flagged:
            assert r.cause == "compute" and 0.03 < r.slowdown < 0.08, (slow, r.rank, r.slowdown)

def test_a_plain_small_8_rank_job_flags_nothing(tmp_path: Path) -> None:
    """TP2 x PP2 x DP2 with small layers: the first rank of each tensor-parallel pair of stage 0 is
    late at its all-reduce several times as often as the second (seed 0: ranks 0 and 2 at 17 and 19
    of 114, ranks 1 and 3 at 2 and 3). That is their place in the group, not a straggler: each is
    compared with the ranks at the same place."""
    from lumos_core.synth import SynthConfig, model_from_args, synthesize

    model = model_from_args(
        "custom", layers=4, hidden=1024, ffn=None, heads=16, seq=1024, vocab=None, kv_channels=None
    )
    for seed in (0, 1):
        synthesize(SynthConfig(model=model, tp=2, pp=2, dp=2, iterations=3, seed=seed), tmp_path / f"s{seed}")
        rep = find_stragglers(load_job(tmp_path / f"s{seed}", use_cache=False, workers=1))
        assert [(r.rank, r.reason) for r in rep.flagged] == [], seed


# A 64-rank job (TP2 x PP2 x DP16, small layers: ~250k tasks per job) with synth's jitter and 3
# iterations: with 64 ranks *some* rank is always the most delayed by chance (QA found seed 0 flagging
# rank 17 and seed 1 rank 26 as "host side" stragglers), so the repeated-delay test must hold the
# most delayed of 64 ranks to a bound that grows with the number of ranks. The slowed ranks are the
# ones QA saw wrongly flagged (stage 0) and one in the last stage.
BIG_CASES = [(0, 17), (1, 26), (1, 45)]
# Both members of one tensor-parallel pair slowed: neither arrives later than the other, and the
# pair arrives at its data-parallel all-reduces as its unslowed peers do; both must still be found.
PAIR_CASE = (0, (60, 61))


@pytest.fixture(scope="module")
def big_jobs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from lumos_core.synth import SynthConfig, model_from_args, synthesize

    model = model_from_args(
        "custom", layers=4, hidden=1024, ffn=None, heads=16, seq=1024, vocab=None, kv_channels=None
    )
    root = tmp_path_factory.mktemp("big")
    jobs = {}
    for seed, slowed in [(0, None), (1, None), *BIG_CASES, PAIR_CASE]:
        ranks = slowed if isinstance(slowed, tuple) else () if slowed is None else (slowed,)
        slow = tuple((r, 1.05) for r in ranks)
        cfg = SynthConfig(model=model, tp=2, pp=2, dp=16, iterations=3, seed=seed, slow_ranks=slow)
        folder = root / f"s{seed}-{slowed}"
        synthesize(cfg, folder)
        jobs[seed, slowed] = find_stragglers(load_job(folder, use_cache=False, workers=1))
    return jobs


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_plain_64_rank_job_flags_nothing(big_jobs, seed: int) -> None:  # type: ignore[no-untyped-def]
    rep = big_jobs[seed, None]
    assert len(rep.ranks) == 64
    assert [(r.rank, r.reason) for r in rep.flagged] == []


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "slowed"), BIG_CASES)
def test_a_64_rank_job_with_one_rank_5_percent_slower_flags_exactly_it(  # type: ignore[no-untyped-def]
    big_jobs, seed: int, slowed: int
) -> None:
    rep = big_jobs[seed, slowed]
    assert [r.rank for r in rep.flagged] == [slowed]
    r = rep.flagged[0]
    assert r.cause == "compute" and 0.03 < r.slowdown < 0.08, (r.slowdown, r.reason)


@pytest.mark.slow
def test_a_64_rank_job_with_a_slowed_tensor_parallel_pair_flags_both(big_jobs) -> None:  # type: ignore[no-untyped-def]
    rep = big_jobs[PAIR_CASE]
    assert sorted(r.rank for r in rep.flagged) == list(PAIR_CASE[1])
    for r in rep.flagged:
        assert r.cause == "compute" and 0.03 < r.slowdown < 0.08, (r.rank, r.slowdown, r.reason)


def test_cli_synth_slow_rank_and_replay_json_has_stragglers(tmp_path: Path) -> None:
    import subprocess
    import sys

    from conftest import REPO

    out = tmp_path / "job"
    args = ["--model", "custom", "--layers", "4", "--hidden", "4096", "--heads", "32", "--seq", "2048"]
    args += ["--iterations", "2"]  # the replay is what takes the time
    cmd = [sys.executable, "-m", "lumos_core", "synth", str(out), *args, "--slow-rank", "6:1.05", "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "rank 6 slowed x1.05" in done.stdout
    bad = subprocess.run(
        [*cmd[:4], str(tmp_path / "x"), "--slow-rank", "99:1.05"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "--slow-rank" in bad.stderr
    rep = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", str(out), "--json", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert rep.returncode == 0, rep.stderr
    s = orjson.loads(rep.stdout)["stragglers"]
    assert s["flagged"] == [6]
    six = next(r for r in s["ranks"] if r["rank"] == 6)
    assert six["flagged"] and six["reason"].startswith("compute") and s["definition"]


# ---------------------------------------------------------------- the false positives
@needs_shared
def test_real_traces_flag_no_punctual_rank() -> None:
    """nanoGPT: ranks 5 and 7 arrive late at 0 of their ~84 collectives and are not flagged (one
    long iteration is not evidence); rank 1, late by its own doing at 10 of 76 by ~3 ms (8.2 ms per
    iteration over its 4 iterations; the bound is 3.0 x the 3.46 ms spread / sqrt(4) = 5.2 ms), is. DLRM (one step, 8 collectives):
    no rank is late often enough to be told from chance."""
    nano = find_stragglers(load_job(shared("h100-nanogpt-8rank")))
    assert [r.rank for r in nano.flagged] == [1]
    assert nano.flagged[0].cause in ("compute", "host") and nano.flagged[0].reason.startswith(
        nano.flagged[0].cause
    )
    for r in nano.ranks:
        if r.rank in (5, 7):
            assert not r.flagged
    dlrm = find_stragglers(load_job(shared("dlrm-v100-8rank")))
    assert dlrm.flagged == []
