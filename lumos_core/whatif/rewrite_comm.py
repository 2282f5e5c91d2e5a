"""Communication the rewrite creates: pipeline send/recv groups between stages (joined with their
peers) and the data-parallel gradient all-reduce."""

from __future__ import annotations

from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.perf import costs
from lumos_core.trace.model import CollectiveKind
from lumos_core.whatif.config import JobConfig
from lumos_core.whatif.rewrite_builder import HANDOFF_NS, LAST_CPU, Builder, chain

P2P_LAUNCH_NS = 20_000  # CPU cost of issuing a send/recv (Megatron's p2p call), when not traced
_GLOO_LATENCY = 100e-6  # s per gloo all-reduce over loopback TCP
_GLOO_BANDWIDTH = 1.5e9  # B/s a gloo ring sustains on one host (loopback, CPU-driven)


def emit_p2p_group(
    b: Builder,
    nr: int,
    cpu_proc: int,
    gpu_procs: list[int],
    compute_proc: int,
    ops: list[str],
    ns: list[int],
    last: dict,
    blocking: bool,
) -> list[int]:
    """A group of sends/recvs issued together (Megatron's batched p2p): one CPU call per transfer,
    each kernel on its pipeline stream (``gpu_procs``: one per transfer) as arrive -> (join with the
    peer) -> transfer. Like every
    NCCL operation in PyTorch it first waits for the compute stream's latest work; the compute
    stream's next work waits for the whole group (Megatron waits on every request, sends too). When
    the traced job made the CPU wait for its transfers (a synchronize after them), a CPU wait follows the group too."""
    arrives = []
    xfers = []
    for i, (op, gpu_proc) in enumerate(zip(ops, gpu_procs)):
        cpu = b.add(-1, -1, nr, NodeType.CPU, cpu_proc, P2P_LAUNCH_NS, -1, op)
        chain(b, cpu, 0, last)
        prev = last.get(LAST_CPU)
        if i == 0 and prev is not None and b.proc[prev] != cpu_proc:
            b.sp.append((prev, cpu, HANDOFF_NS, True, int(EdgeKind.CPU_CROSS)))
        last[LAST_CPU] = cpu
        arrive = b.add(-1, -1, nr, NodeType.ARRIVE, gpu_proc, 0, -1, op)
        b.sp.append((cpu, arrive, 1_000, True, int(EdgeKind.LAUNCH)))
        chain(b, arrive, 0, last)
        if compute_proc in last:  # PyTorch makes the NCCL stream wait for the current stream first
            b.sp.append((last[compute_proc], arrive, 0, True, int(EdgeKind.EVENT_WAIT)))
        xfer = b.add(-1, -1, nr, NodeType.GPU, gpu_proc, ns[i], -1, op)
        b.arrive_of[xfer] = arrive
        last[gpu_proc] = xfer
        arrives.append(arrive)
        xfers.append(xfer)
        # Megatron waits on every request of the batch (``req.wait()`` for sends too): the compute
        # stream's next work follows the whole group, not only what it received.
        last.setdefault(("wait", compute_proc), []).append(xfer)
    if blocking:
        wait = b.add(-1, -1, nr, NodeType.CPU, cpu_proc, 2_000, -1, "wait")
        chain(b, wait, 0, last)
        last[LAST_CPU] = wait
        for xfer in xfers:
            b.ep.append((xfer, wait, 2_000, True, int(EdgeKind.SYNC)))
    return arrives


def emit_grad_sync(
    b: Builder,
    nr: int,
    cpu_proc: int,
    gpu_proc: int,
    compute_proc: int,
    nbytes: float,
    config: JobConfig,
    cpu_only: bool,
    last: dict,
) -> None:
    """The gradient all-reduce a data-parallel job adds after its last backward (DDP waits for it
    before the optimizer step). On GPU: NCCL on its own stream, timed by the NCCL model;
    on CPU: gloo over TCP, which the CPU itself drives."""
    n = config.dp
    if cpu_only:
        seconds = _GLOO_LATENCY + nbytes * 2 * (n - 1) / n / _GLOO_BANDWIDTH
        cpu = b.add(-1, -1, nr, NodeType.CPU, cpu_proc, int(seconds * 1e9), -1, "allreduce")
        chain(b, cpu, 0, last)
        last[LAST_CPU] = cpu
        return
    gpu = config.gpu_profile
    inter = n * config.tp * config.pp > gpu.gpus_per_node
    seconds = costs.collective_time(CollectiveKind.ALL_REDUCE, nbytes, n, gpu, inter_node=inter)
    cpu = b.add(-1, -1, nr, NodeType.CPU, cpu_proc, P2P_LAUNCH_NS, -1, "allreduce")
    chain(b, cpu, 0, last)
    xfer = b.add(-1, -1, nr, NodeType.GPU, gpu_proc, int(seconds * 1e9), -1, "allreduce")
    b.sp.append((cpu, xfer, 1_000, True, int(EdgeKind.LAUNCH)))
    if compute_proc in last:  # it reduces the gradients the compute stream produced
        b.sp.append((last[compute_proc], xfer, 0, True, int(EdgeKind.EVENT_WAIT)))
    chain(b, xfer, 0, last)
    wait = b.add(-1, -1, nr, NodeType.CPU, cpu_proc, 2_000, -1, "wait")
    chain(b, wait, 0, last)
    b.ep.append((xfer, wait, 2_000, True, int(EdgeKind.SYNC)))
    last[LAST_CPU] = wait


def join_transfers(b: Builder, arrives: list[int]) -> None:
    """A send and its receive start moving data when both sides have arrived."""
    join = b.add(-1, -1, b.new_rank[arrives[0]], NodeType.JOIN, -1, 0, -1, "join")
    for a in arrives:
        b.sp.append((a, join, 0, True, int(EdgeKind.P2P)))
        b.sp.append((join, a + 1, 0, False, int(EdgeKind.P2P)))  # the transfer follows its arrive node
        b.extra[a] = b.extra[a] + "+joined"


def close_unpaired(b: Builder) -> None:
    for a in range(len(b.dur)):
        if b.node_type[a] == NodeType.ARRIVE and b.extra[a] in ("send", "recv"):
            b.sp.append((a, a + 1, 0, True, int(EdgeKind.P2P)))


def activation_bytes(base: JobConfig, config: JobConfig) -> float:
    """Bytes a pipeline stage sends per microbatch: micro-batch x seq x hidden in bf16 (a rank holds
    seq / CP of the sequence)."""
    mb = config.micro_batch or base.micro_batch or 1
    seq = config.seq or base.seq or 2048
    h = config.hidden or base.hidden or 4096
    return float(mb * seq * h * 2) / config.cp
