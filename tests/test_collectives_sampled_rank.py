"""Collectives without a process-group name or group size, in a folder that holds fewer ranks than
the job's distributedInfo says (one sampled rank of a 128-rank job): they are not known to be
complete, so they count as partial (their waits are the missing peers') instead of looking like
whole 1-rank groups. A folder holding every rank still matches them as complete (DLRM's case)."""

from __future__ import annotations

from pathlib import Path

from tracegen import TraceBuilder

from lumos_core.trace.collectives import match_collectives
from lumos_core.trace.loader import load_job

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _rank(folder: Path, rank: int, world: int) -> None:
    b = TraceBuilder(rank=rank, world=world)
    for k in range(2):
        t0 = 1000.0 * k
        b.step(k + 1, t0, 990)
        b.launch(NCCL, t0 + 2, 3, kts=t0 + 10, kdur=300, stream=20)
    folder.mkdir(parents=True, exist_ok=True)
    b.write(folder / f"rank{rank}.json")


def test_unnamed_collectives_of_a_sampled_rank_are_partial(tmp_path: Path) -> None:
    _rank(tmp_path / "one", 0, 128)
    s = match_collectives(load_job(tmp_path / "one", use_cache=False, workers=1)).summary()
    assert s["instances"] == 2 and s["complete"] == 0 and s["partial"] == 2


def test_unnamed_collectives_of_a_whole_job_are_complete(tmp_path: Path) -> None:
    for r in range(2):
        _rank(tmp_path / "all", r, 2)
    s = match_collectives(load_job(tmp_path / "all", use_cache=False, workers=1)).summary()
    assert s["instances"] == 2 and s["complete"] == 2
