"""A small data-parallel job built by hand where one rank is late: every iteration each rank computes
(a GEMM), then all ranks all-reduce; the late rank's compute takes ``delay_us`` longer, so the others
wait for it inside the all-reduce."""

from __future__ import annotations

from pathlib import Path

from tracegen import TraceBuilder, nccl_args

COMPUTE_US = 1000.0
COMM_US = 200.0  # the all-reduce's transfer, once the last rank has arrived
ITER_US = 2000.0


def write_straggler_job(
    folder: Path,
    n_ranks: int = 8,
    late_rank: int = 5,
    delay_us: float = 400.0,
    iterations: int = 3,
    groups: int = 1,
    last_group_extra_us: float = 0.0,
) -> Path:
    """``groups`` > 1 splits the ranks into runs with an all-reduce group each (like pipeline
    stages), the last run's iterations ``last_group_extra_us`` longer (a stage with more work)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(n_ranks):
        b = TraceBuilder(rank=rank, world=n_ranks)
        size = n_ranks // groups
        g = rank // size
        it_us = ITER_US + (last_group_extra_us if g == groups - 1 and groups > 1 else 0.0)
        for k in range(iterations):
            t0 = k * it_us
            b.step(k + 1, t0, it_us - 10)
            b.cpu("aten::mm", t0 + 1, 5)
            late = delay_us if rank == late_rank else 0.0
            arrive = t0 + 10 + COMPUTE_US + late
            b.launch("ampere_sgemm_128x64_tn", t0 + 2, 3, kts=t0 + 10, kdur=COMPUTE_US + late)
            # every rank leaves the all-reduce when the last one has arrived and the data moved
            leave = t0 + 10 + COMPUTE_US + delay_us + COMM_US
            b.launch(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                t0 + 6,
                3,
                kts=arrive,
                kdur=leave - arrive,
                stream=20,
                kargs=nccl_args(seq=k, size=size, pg=str(g))
                if groups > 1
                else nccl_args(seq=k, size=n_ranks),
            )
        b.write(folder / f"rank{rank}.json")
    return folder
