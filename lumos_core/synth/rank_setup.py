"""What the rank simulation and the event emitter both need about one rank."""

from __future__ import annotations

from dataclasses import dataclass

from lumos_core.synth.plan import StagePlan


@dataclass
class RankSetup:
    """Everything :func:`run_rank` needs about one rank (the plan is shared by its stage)."""

    rank: int
    plan: StagePlan
    seed: int
    iterations: int
    comm_ns: list[int]  # nominal duration of each of the plan's comm descriptors on this rank
    comm_kernel: list[str]  # NCCL kernel name of each comm descriptor on this rank
    group_index: tuple[int, int]  # process-group index of the TP and DP roles
    group_size: tuple[int, int]
    # global ranks of the previous and next pipeline stage, then of the next and previous rank of
    # the context-parallel ring (-1 if none)
    peers: tuple[int, int, int, int]
    start_ns: int  # when the rank starts its first profiled step
    gpu_speed: float  # multiplies every kernel duration
