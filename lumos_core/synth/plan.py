"""The operation sequence of one Megatron-LM training step on one pipeline stage.

A :class:`StagePlan` is the program every rank of a stage runs each iteration, as a list of small
instruction tuples (opcode first) plus tables of kernel and communication descriptors; it is
written by :func:`lumos_core.synth.stage_program.build_stage_plan` (the model pieces in
:mod:`.stage_layers`, the instructions in :mod:`.stage_writer`, kernel names in :mod:`.kernel_names`). Ranks of a
stage share one plan; what differs per rank (process groups, peers, whether a group spans nodes,
jitter) is resolved by :mod:`.timeline` when it runs the plan.

What a step contains (Megatron-LM with the distributed optimizer, ``overlap_grad_reduce``,
tensor parallelism without sequence parallelism, untied embeddings):

* ``ProfilerStep#N`` around everything; a fill kernel zeroes the gradient buffer;
* the pipeline schedule (:func:`lumos_core.perf.schedules.pipeline_steps`, or ``interleaved_steps``
  with virtual stages: each rank's model chunks in interleaved 1F1B order, p2p around the stage
  ring): forward steps on the main thread, backward steps on the autograd thread
  (``pt_autograd_0``), p2p groups on the main thread with one NCCL stream per peer;
* per layer forward: LayerNorm, QKV GEMM, flash attention, projection GEMM, TP all-reduce,
  residual add, LayerNorm, FC1 GEMM, GeLU, FC2 GEMM, TP all-reduce, residual add;
* per layer backward: the matching dgrad/wgrad GEMMs, with the TP all-reduce of a column-parallel
  input gradient launched asynchronously and overlapped with the weight-gradient GEMM (Megatron's
  ``LinearWithGradAccumulationAndAsyncCommunication``);
* stage 0 adds the vocabulary-parallel embedding (one TP all-reduce); the last stage adds the
  output layer and the vocabulary-parallel cross entropy (three small fp32 TP all-reduces);
* during the last microbatch's backward, each gradient bucket (``bucket_params``) is
  reduce-scattered over the data-parallel group as soon as its layers are done (overlapping the
  rest of the backward); the optimizer waits for them, computes the gradient norm (a
  device-to-host copy and a ``cudaStreamSynchronize``: the CPU blocks), runs Adam on its shard
  and all-gathers the updated parameters per bucket.

Layer ranges are ``user_annotation`` events named ``decoder.layers.<i>`` (forward, main thread)
and ``decoder.layers.<i>.backward`` (autograd thread) with the global layer index ``i``;
microbatches are ``forward_step#<mb>`` / ``backward_step#<mb>`` (0-based).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lumos_core.trace.model import CollectiveKind

__all__ = ["CommDesc", "KernelDesc", "StagePlan", "layer_annotation"]

# ---- instruction opcodes (first element of every instruction tuple) ----
OP_STEP_BEGIN = 0  # (op,)
OP_STEP_END = 1  # (op,)
OP_BEGIN = 2  # (op, thread, name, cat)       a CPU range (user_annotation or cpu_op) opens
OP_END = 3  # (op, thread)                    the innermost open range of the thread closes
OP_KERNEL = 4  # (op, thread, kernel_desc)      a cpu_op launching one kernel on the compute stream
OP_COLL = 5  # (op, thread, comm_desc, handle)  a collective; handle -1: wait at once (synchronous)
OP_P2P = 6  # (op, thread, (comm_desc, ...))    p2p transfers issued together, then all waited
OP_WAIT = 7  # (op, thread, (handle, ...))      compute stream waits for async collectives
OP_MEMCPY = 8  # (op, thread, nbytes)           device-to-host copy on the compute stream
OP_SYNC = 9  # (op, thread)                     cudaStreamSynchronize(compute): the CPU blocks
OP_HANDOFF = 10  # (op, from_thread, to_thread) to_thread continues after from_thread's work

THREAD_MAIN = 0
THREAD_AUTOGRAD = 1

# Communication roles; a rank's NCCL stream for role r is stream index r + 1 (0 is compute).
ROLE_TP = 0
ROLE_DP = 1
ROLE_PREV = 2
ROLE_NEXT = 3
# Context parallelism's ring attention (Megatron-Core's default ``cp_comm_type="p2p"``,
# TransformerEngine's AttnFuncWithCPAndKVP2P): K/V blocks are sent to the next rank of the CP
# group and received from the previous one, each direction on its own NCCL stream.
ROLE_CP = 4  # sends to the next rank of the CP ring
ROLE_CP_RECV = 5  # receives from the previous rank of the CP ring
N_STREAMS = 7

BF16 = ("BFloat16", 2)
FP32 = ("Float", 4)


@dataclass(slots=True)
class KernelDesc:
    """A cpu_op that launches one kernel on the compute stream, with its nominal times."""

    cpu_name: str
    kernel_name: str
    gpu_ns: int  # roofline duration before jitter
    cpu_ns: int  # the cpu_op's own time around the launch call, before jitter
    dims: list[list[int]] | None = None  # "Input Dims"
    types: list[str] | None = None  # "Input type"
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers: int = 32
    shared_memory: int = 0
    launch: str = "cudaLaunchKernel"


@dataclass(slots=True)
class CommDesc:
    """One collective or p2p transfer a stage issues; sizes per rank, NCCL-tests ``size_bytes``."""

    role: int
    kind: CollectiveKind
    coll_name: str  # "Collective name" as PyTorch records it
    annotation: str  # "nccl:all_reduce" ...
    in_nelems: int
    out_nelems: int
    dtype: str
    dtype_bytes: int
    reduce_op: str = "Sum"
    payload: str = ""  # p2p: "act" / "grad" and the microbatch, for labels

    @property
    def size_bytes(self) -> int:
        nel = self.out_nelems if self.kind == CollectiveKind.ALL_GATHER else self.in_nelems
        return nel * self.dtype_bytes


@dataclass
class StagePlan:
    """The instructions of one iteration of one pipeline stage (shared by its ranks)."""

    stage: int
    ops: list[tuple] = field(default_factory=list)
    kernels: list[KernelDesc] = field(default_factory=list)
    comms: list[CommDesc] = field(default_factory=list)
    n_handles: int = 0

    @property
    def n_kernels(self) -> int:
        """GPU activities per iteration (compute kernels, memcpys, NCCL kernels)."""
        n = 0
        for op in self.ops:
            code = op[0]
            if code in (OP_KERNEL, OP_COLL, OP_MEMCPY):
                n += 1
            elif code == OP_P2P:
                n += len(op[2])
        return n


def layer_annotation(layer: int, backward: bool = False) -> str:
    """Name of the ``user_annotation`` around a layer's forward or backward (global layer index)."""
    return f"decoder.layers.{layer}.backward" if backward else f"decoder.layers.{layer}"
