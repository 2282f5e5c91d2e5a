"""Trace-free prediction of a training iteration: the same physics as ``lumos synth``, no traces.

``lumos synth --predict-only`` answers "what would 70B on 1,024 H100s do?" in about a second.
It builds the very instruction programs the trace generator runs (:mod:`.stage_program`: per-layer
GEMM/attention/elementwise kernels from :mod:`lumos_core.perf.costs`, TP all-reduces or SP
reduce-scatter + all-gather, recomputation, embedding, LM head and cross entropy, DP gradient
reduce-scatter per bucket, gradient-norm clipping, Adam and the parameter all-gather) and times them
with the timeline's nominal host costs (:mod:`.timeline`: Python gaps, launch calls, per-operator
framework time), but without jitter, per rank or events:

* one microbatch's forward and backward of each stage (each model chunk when interleaved) is run
  causally from an idle CPU and GPU: the CPU issues every operator, kernels start at the later of
  their launch and the previous kernel's end, TP collectives join the compute stream, the
  asynchronous dgrad all-reduce overlaps the wgrad GEMM; the phase lasts until both are done;
* the pipeline runs the schedule's compute order on every stage (:mod:`lumos_core.perf.schedules`:
  1F1B, GPipe, interleaved 1F1B with ``vp`` chunks) with each forward waiting for its input from
  the previous model piece and each backward for its gradient from the next, plus the p2p time;
  the bubble (p - 1) / (vp m) emerges from the dependencies;
* the last backward of a stage overlaps its gradient reduce-scatter; what sticks out, the
  optimizer (norm, host sync, Adam, all-gather) and the step's fixed costs follow.

Synthetic traces of the same config replay to the same iteration time within a few per cent
(tests/test_synth_predict.py; jitter and CPU run-ahead across phases account for the rest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lumos_core.errors import LumosError
from lumos_core.perf.costs import peak_flops
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.perf.nccl import GroupShape, NcclModel, shape_of_strided_group
from lumos_core.perf.schedules import interleaved_order, schedule
from lumos_core.synth.flops import MemoryEstimate, iteration_flops, stage_memory
from lumos_core.synth.models import SynthConfig
from lumos_core.synth.plan import (
    N_STREAMS,
    OP_BEGIN,
    OP_COLL,
    OP_END,
    OP_HANDOFF,
    OP_KERNEL,
    OP_MEMCPY,
    OP_SYNC,
    OP_WAIT,
    ROLE_CP,
    ROLE_CP_RECV,
    ROLE_DP,
    ROLE_TP,
    StagePlan,
)
from lumos_core.synth.stage_program import StageProgram
from lumos_core.synth.timeline import (
    GAP_NS,
    HANDOFF_NS,
    LAUNCH_LATENCY_NS,
    LAUNCH_NS,
    NCCL_LAUNCH_NS,
    STEP_OVERHEAD_NS,
)
from lumos_core.trace.model import CollectiveKind

__all__ = ["Prediction", "layer_times", "predict"]

# Host time of one collective call around its launch (record, stream waits, bookkeeping; the
# timeline's nominal steps) and of work.wait().
_COLL_HOST_NS = 3_000 + 2_500 + 1_500 + 800 + 1_200 + 5_000 + NCCL_LAUNCH_NS + 1_500 + 1_000 + 800 + 1_200
_WAIT_HOST_NS = 2_700


@dataclass
class Prediction:
    """Predicted figures of one iteration of a configuration (trace-free)."""

    config: SynthConfig
    iteration_s: float
    tokens_per_s_per_gpu: float
    mfu: float  # model FLOPs (no recomputation) / (time x GPUs x peak)
    hfu: float  # hardware FLOPs (recomputation counted)
    model_tflops_per_gpu: float
    memory: list[MemoryEstimate] = field(default_factory=list)
    breakdown: dict[str, float] = field(default_factory=dict)  # seconds

    def as_dict(self) -> dict[str, object]:
        return {
            "synthetic": False,
            "trace_free_prediction": True,
            "config": self.config.to_json(),
            "gpus": self.config.world_size,
            "global_batch": self.config.global_batch,
            "iteration_s": round(self.iteration_s, 6),
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 2),
            "mfu": round(self.mfu, 4),
            "hfu": round(self.hfu, 4),
            "model_tflops_per_gpu": round(self.model_tflops_per_gpu, 2),
            "memory_per_stage": [m.as_dict() for m in self.memory],
            "fits_in_memory": all(m.total <= _gpu_bytes(self.config) for m in self.memory),
            "gpu_memory_gib": round(_gpu_bytes(self.config) / 2**30, 2),
            "memory_warning": self.memory_warning(),
            "breakdown_s": {k: round(v, 6) for k, v in self.breakdown.items()},
        }

    def memory_warning(self) -> str | None:
        """'stage 0 needs 262.6 GiB, the H100 has 80 GiB (...)' when a stage does not fit, else None:
        the worst stage, so that the user sees by how much (and where) it misses."""
        cap = _gpu_bytes(self.config)
        over = [m for m in self.memory if m.total > cap]
        if not over:
            return None
        worst = max(over, key=lambda m: m.total)
        text = f"stage {worst.stage} needs {worst.total / 2**30:.1f} GiB, the {self.config.gpu} has {cap / 2**30:.1f} GiB"
        if len(self.memory) > 1:
            text += f" ({len(over)} of {len(self.memory)} stages do not fit)"
        return text


def _gpu_bytes(cfg: SynthConfig) -> float:
    return float(get_gpu(cfg.gpu).memory_bytes)


@dataclass(frozen=True, slots=True)
class _Phase:
    host: float  # s: the CPU issuing the phase
    gpu: float  # s: the compute stream's end from an idle CPU and GPU, collectives joined
    dp_tail: float = 0.0  # s: the DP stream's end beyond the compute stream's (exposed reduction)
    gpu_only: float = 0.0  # s: the same with every operator already issued (the CPU ran ahead)

    @property
    def time(self) -> float:
        return max(self.host, self.gpu)


def _evaluate(plan: StagePlan, comm_s: list[float]) -> _Phase:
    cold = _run(plan, comm_s, 1.0)
    ahead = _run(plan, comm_s, 0.0)
    return _Phase(cold.host, cold.gpu, cold.dp_tail, ahead.gpu)


def _run(plan: StagePlan, comm_s: list[float], host_weight: float) -> _Phase:
    """Host and GPU time of a plan's instructions in program order, by the timeline's causal rules
    at their mean costs: the CPU issues each operator (gap, framework time, launch call); a kernel
    starts at the later of its launch and the end of the previous kernel on its stream; collectives
    start once the compute stream's queued work (recorded event) and their own stream are done.
    The phase starts with CPU and GPU idle, so per-operator interplay of host and GPU time (neither
    fully hidden when they are of a size) is kept."""
    host = 0.0
    hw = host_weight * 1e-9  # 0: the CPU already issued everything (it ran ahead)
    lat = LAUNCH_LATENCY_NS * hw
    avail = [0.0] * N_STREAMS  # compute, then one stream per role
    handles: dict[int, float] = {}
    for op in plan.ops:
        code = op[0]
        if code == OP_KERNEL:
            d = plan.kernels[op[2]]
            launched = host + (GAP_NS[op[1]] + 0.6 * d.cpu_ns + LAUNCH_NS) * hw
            avail[0] = max(launched + lat, avail[0]) + d.gpu_ns * 1e-9
            host = launched + 0.4 * d.cpu_ns * hw
        elif code == OP_COLL:
            c = plan.comms[op[2]]
            s = c.role + 1
            launched = host + (GAP_NS[op[1]] + _COLL_HOST_NS - 4_500) * hw
            end = max(avail[s], avail[0], launched + lat) + comm_s[op[2]]
            avail[s] = end
            host += (GAP_NS[op[1]] + _COLL_HOST_NS) * hw
            if op[3] < 0:
                host += _WAIT_HOST_NS * hw
                avail[0] = max(avail[0], end)
            else:
                handles[op[3]] = end
        elif code == OP_WAIT:
            for h in op[2]:
                host += _WAIT_HOST_NS * hw
                avail[0] = max(avail[0], handles.get(h, 0.0))
        elif code == OP_BEGIN:
            host += 1_500 * hw
        elif code == OP_END:
            host += 600 * hw
        elif code == OP_HANDOFF:
            host += HANDOFF_NS * hw
        elif code == OP_MEMCPY:
            host += (GAP_NS[op[1]] + 2 * LAUNCH_NS) * hw
            avail[0] = max(avail[0], host + lat) + (1_400 + op[2] // 10) * 1e-9
        elif code == OP_SYNC:  # the CPU waits for the GPU
            host = max(host + (GAP_NS[op[1]] + 2_800) * hw, avail[0])
    return _Phase(host, avail[0], max(0.0, avail[ROLE_DP + 1] - avail[0]))


class _Stage:
    """The per-microbatch phases of one stage (or model chunk) and its optimizer."""

    def __init__(self, cfg: SynthConfig, gpu: GpuProfile, model: NcclModel, stage: int, chunk: int | None):
        self.cfg, self.gpu, self.model = cfg, gpu, model
        self.stage = stage
        shapes = _group_shapes(cfg, gpu.gpus_per_node)
        self.forward = self._phase(lambda b: b.forward(0), stage, chunk, shapes)
        self.backward = self._phase(lambda b: b.backward(0, False, []), stage, chunk, shapes)
        self.backward_sync = self._phase(lambda b: b.backward(0, True, []), stage, chunk, shapes)
        self.optimizer = self._phase(lambda b: (b.zero_grad(), b.optimizer([])), stage, chunk, shapes)
        self.params = StageProgram(cfg, gpu, stage, chunk).rank_params

    def _phase(self, write, stage: int, chunk: int | None, shapes: dict[int, GroupShape]) -> _Phase:
        b = StageProgram(self.cfg, self.gpu, stage, chunk)
        write(b)
        comm_s = [self.model.predict(c.kind, c.size_bytes, shapes[c.role]).seconds for c in b.plan.comms]
        return _evaluate(b.plan, comm_s)


def _group_shapes(cfg: SynthConfig, gpn: int) -> dict[int, GroupShape]:
    """Megatron's rank order: TP fastest, then CP, DP, PP. Gradients are reduced over DP x CP (one
    group of stride TP). The CP ring's transfers run in lock step (each kernel waits for its
    block), so its slowest hop sets the pace: between nodes when the CP group spans nodes."""
    cp_group = shape_of_strided_group(cfg.cp, cfg.tp, gpn)
    hop = GroupShape(2, 2, 1) if cp_group.inter_node else GroupShape.single_node(2)
    return {
        ROLE_TP: shape_of_strided_group(cfg.tp, 1, gpn),
        ROLE_CP: hop,
        ROLE_CP_RECV: hop,
        ROLE_DP: shape_of_strided_group(cfg.dp_cp, cfg.tp, gpn),
    }


def _p2p_seconds(cfg: SynthConfig, gpu: GpuProfile, model: NcclModel) -> float:
    """One activation (or gradient) transfer between neighbouring stages."""
    if cfg.pp == 1:
        return 0.0
    stride = cfg.tp * cfg.cp * cfg.dp
    shape = shape_of_strided_group(2, stride, gpu.gpus_per_node)
    elems = cfg.tokens * cfg.model.hidden // (cfg.tp if cfg.sp else 1)
    return model.predict(CollectiveKind.SEND, 2 * elems, shape).seconds + 10e-6  # + the p2p group's host


def _pipeline(cfg: SynthConfig, stages: dict[tuple[int, int], _Stage], p2p: float) -> list[float]:
    """When each stage finishes its last backward, running the schedule's order with dependencies."""
    p, v, m = cfg.pp, cfg.vp, cfg.microbatches
    orders = []
    for s in range(p):
        if v > 1 or cfg.schedule == "1f1b":
            orders.append(interleaved_order(s, p, v, m))
        else:
            orders.append([(ph, mb, 0) for ph, mb in schedule(cfg.schedule, s, p, m)])
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p  # the stage's GPU
    cpu = [0.0] * p  # the stage's CPU: it issues the next phase without waiting for its input
    pos = [0] * p
    last_piece = p * v - 1
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                phase, mb, chunk = orders[s][pos[s]]
                piece = chunk * p + s
                if phase == "F":
                    dep = done.get(("F", mb, piece - 1)) if piece > 0 else 0.0
                    ph = stages[(s, chunk)].forward
                else:
                    dep = done.get(("B", mb, piece + 1)) if piece < last_piece else 0.0
                    ph = stages[(s, chunk)].backward
                if dep is None:
                    break
                arrival = dep + (p2p if dep > 0.0 else 0.0)
                cpu_start = max(cpu[s], arrival) if cfg.p2p_blocks_cpu else cpu[s]
                gpu_start = max(free[s], arrival)
                free[s] = max(cpu_start + ph.time, gpu_start + ph.gpu_only)
                # A framework that syncs at layer boundaries (``layer_sync``) also waits for the
                # phase's last layer before it issues the next phase.
                cpu[s] = free[s] if cfg.layer_sync else cpu_start + ph.host
                done[(phase, mb, piece)] = free[s]
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise LumosError(f"pipeline schedule deadlocked (pp {p}, vp {v}, {m} microbatches)")
    return free


def predict(cfg: SynthConfig, gpu: GpuProfile | str | None = None) -> Prediction:
    """Predicted iteration time, throughput, MFU and memory per stage of ``cfg`` (no traces).

    ``gpu`` overrides the profile named by ``cfg.gpu`` (e.g. one with fitted priors)."""
    g = get_gpu(gpu if gpu is not None else cfg.gpu)
    model = NcclModel.for_gpu(g)
    chunks = range(cfg.vp) if cfg.vp > 1 else (None,)
    stages = {(s, c or 0): _Stage(cfg, g, model, s, c) for s in range(cfg.pp) for c in chunks}
    p2p = _p2p_seconds(cfg, g, model)
    ends = _pipeline(cfg, stages, p2p)
    totals = []
    for s in range(cfg.pp):
        first_chunk = stages[(s, 0)]  # the last backward of a stage is on its first chunk
        exposed_dp = first_chunk.backward_sync.dp_tail + max(
            0.0, first_chunk.backward_sync.time - first_chunk.backward.time
        )
        opt = sum(stages[(s, c)].optimizer.time for c in range(cfg.vp))
        totals.append(ends[s] + exposed_dp + opt)
    iteration = max(totals) + STEP_OVERHEAD_NS * 1e-9
    world = cfg.world_size
    m = cfg.model
    gb = cfg.global_batch
    model_flops = iteration_flops(m, gb, "none")
    hw_flops = iteration_flops(m, gb, cfg.recompute)
    peak = peak_flops(g) * world * iteration
    memory = [stage_memory(cfg, s, sum(stages[(s, c)].params for c in range(cfg.vp))) for s in range(cfg.pp)]
    s0 = stages[(0, 0)]
    return Prediction(
        config=cfg,
        iteration_s=iteration,
        tokens_per_s_per_gpu=gb * m.seq / iteration / world,
        mfu=model_flops / peak,
        hfu=hw_flops / peak,
        model_tflops_per_gpu=model_flops / iteration / world / 1e12,
        memory=memory,
        breakdown={
            "pipeline": max(ends),
            "forward_per_microbatch_stage0": s0.forward.time,
            "backward_per_microbatch_stage0": s0.backward.time,
            "host_share_forward": s0.forward.host / max(s0.forward.time, 1e-12),
            "p2p": p2p,
            "optimizer_stage0": s0.optimizer.time,
            "bubble_share": 1.0
            - cfg.microbatches
            * cfg.vp
            * (s0.forward.time + s0.backward.time)
            / max(math.fsum(ends[:1]), 1e-12),
        },
    )


def layer_times(cfg: SynthConfig, gpu: GpuProfile | str | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one transformer layer of ``cfg`` on its TP group, the backward
    including what recomputation re-runs (Korthikanti et al.'s Table 4 measures these)."""
    g = get_gpu(gpu if gpu is not None else cfg.gpu)
    model = NcclModel.for_gpu(g)
    shapes = _group_shapes(cfg, g.gpus_per_node)
    out = []
    for backward in (False, True):
        b = StageProgram(cfg, g, 0)
        layer = b.layers[0]
        if backward:
            b.parts.layer_backward(1, layer)
        else:
            b.parts.layer_forward(0, layer)
        comm_s = [model.predict(c.kind, c.size_bytes, shapes[c.role]).seconds for c in b.plan.comms]
        out.append(_evaluate(b.plan, comm_s).time)
    return out[0], out[1]
