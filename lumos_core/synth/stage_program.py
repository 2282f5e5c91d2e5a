"""One stage's whole training iteration: the pipeline schedule's forward and backward steps and p2p
transfers, gradient reduce-scatter per bucket, the optimizer (see :mod:`lumos_core.synth.plan`)."""

from __future__ import annotations

from collections.abc import Sequence

from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.schedules import interleaved_steps, pipeline_steps
from lumos_core.synth.kernel_names import ADAM, FILL, L2NORM
from lumos_core.synth.models import SynthConfig
from lumos_core.synth.plan import (
    BF16,
    OP_COLL,
    OP_HANDOFF,
    OP_MEMCPY,
    OP_P2P,
    OP_STEP_BEGIN,
    OP_STEP_END,
    OP_SYNC,
    ROLE_DP,
    ROLE_NEXT,
    ROLE_PREV,
    THREAD_AUTOGRAD,
    THREAD_MAIN,
    CommDesc,
    KernelDesc,
    StagePlan,
)
from lumos_core.synth.stage_layers import StageLayers
from lumos_core.synth.stage_writer import StageWriter, ns
from lumos_core.trace.model import CollectiveKind


class StageProgram:
    """Data parallelism, microbatch steps, p2p and the optimizer of one stage (or, with ``chunk``,
    one model chunk of an interleaved schedule), written by a :class:`StageWriter` (``w``) with the
    model pieces of :class:`StageLayers` (``parts``)."""

    def __init__(
        self,
        cfg: SynthConfig,
        gpu: GpuProfile,
        stage: int,
        chunk: int | None = None,
        w: StageWriter | None = None,
    ) -> None:
        self.cfg = cfg
        self.w = w or StageWriter(cfg, gpu, stage)  # ``w``: the stage's writer, shared by its chunks
        self.parts = StageLayers(self.w)
        self.plan = self.w.plan
        if chunk is None:
            per, piece, pieces = cfg.layers_per_stage, stage, cfg.pp
        else:  # one model chunk (virtual stage) of an interleaved schedule
            per, piece, pieces = (
                cfg.model.layers // (cfg.pp * cfg.vp),
                chunk * cfg.pp + stage,
                cfg.pp * cfg.vp,
            )
        self.layers = range(piece * per, (piece + 1) * per)
        self.first = piece == 0
        self.last = piece == pieces - 1
        self._buckets = self._gradient_buckets()

    @property
    def bucket_sizes(self) -> list[int]:
        """Parameters of each data-parallel gradient bucket of this stage, in reduction order."""
        return list(self._buckets.values())

    # ---- data parallelism ----
    def _param_groups(self) -> list[tuple[str, int]]:
        """(name, parameters on this rank) in the order backward produces their gradients."""
        cfg, m = self.cfg, self.cfg.model
        groups: list[tuple[str, int]] = []
        if self.last:
            groups.append(("output_layer", m.vocab * m.hidden // cfg.tp + m.norm_params))
        # Column/row-parallel weights and column-parallel biases are split; row-parallel biases and
        # norms are replicated on every TP rank.
        split = m.hidden * m.qkv_dim + m.attn_dim * m.hidden + m.hidden * m.ffn_in_dim + m.ffn * m.hidden
        if m.bias:
            split += m.qkv_dim + m.ffn_in_dim
        per_layer = split // cfg.tp + (2 * m.hidden if m.bias else 0) + 2 * m.norm_params
        groups.extend((f"layer{i}", per_layer) for i in reversed(self.layers))
        if self.first:
            positions = m.seq * m.hidden if m.learned_positions else 0
            groups.append(("embedding", m.vocab * m.hidden // cfg.tp + positions))
        return groups

    def _gradient_buckets(self) -> dict[str, int]:
        """Group name -> parameters of the bucket that closes after that group's backward.

        Megatron fills buckets in backward order until each holds ``bucket_params``; sizes are
        padded to a multiple of the data-parallel size (DP x CP: Megatron reduces gradients over
        the combined group) so reduce-scatter shards are equal."""
        closes: dict[str, int] = {}
        acc = 0
        groups = self._param_groups()
        for i, (name, n) in enumerate(groups):
            acc += n
            if acc >= self.cfg.bucket_params or i == len(groups) - 1:
                dp = self.cfg.dp_cp
                closes[name] = (acc + dp - 1) // dp * dp
                acc = 0
        return closes

    @property
    def rank_params(self) -> int:
        return sum(n for _, n in self._param_groups())

    def maybe_reduce_scatter(self, th: int, group: str, handles: list[int]) -> None:
        numel = self._buckets.get(group)
        if numel is None or self.cfg.dp_cp == 1:
            return
        desc = CommDesc(
            ROLE_DP,
            CollectiveKind.REDUCE_SCATTER,
            "_reduce_scatter_base",
            "nccl:_reduce_scatter_base",
            numel,
            numel // self.cfg.dp_cp,
            *BF16,
        )
        h = self.w.new_handle()
        handles.append(h)
        self.w.ops.append((OP_COLL, th, self.w.comm_index(desc), h))

    # ---- the step ----
    def forward(self, mb: int) -> None:
        th = THREAD_MAIN
        self.w.begin(th, f"forward_step#{mb}")
        if self.first:
            self.parts.embedding_forward(th)
        for layer in self.layers:
            self.parts.layer_forward(th, layer)
        if self.last:
            self.parts.output_forward(th)
        self.w.end(th)

    def backward(self, mb: int, sync_grads: bool, rs_handles: list[int]) -> None:
        th = THREAD_AUTOGRAD
        self.w.ops.append((OP_HANDOFF, THREAD_MAIN, th))
        self.w.begin(th, f"backward_step#{mb}")
        if self.last:
            self.parts.output_backward(th)
            if sync_grads:
                self.maybe_reduce_scatter(th, "output_layer", rs_handles)
        for layer in reversed(self.layers):
            self.parts.layer_backward(th, layer)
            if sync_grads:
                self.maybe_reduce_scatter(th, f"layer{layer}", rs_handles)
        if self.first:
            self.parts.embedding_backward(th)
            if sync_grads:
                self.maybe_reduce_scatter(th, "embedding", rs_handles)
        self.w.end(th)
        self.w.ops.append((OP_HANDOFF, th, THREAD_MAIN))

    def p2p(self, transfers: tuple) -> None:
        T, h = self.w.T, self.w.h
        descs = []
        for t in transfers:
            role = ROLE_PREV if t.peer == "prev" else ROLE_NEXT
            kind = CollectiveKind.SEND if t.op == "send" else CollectiveKind.RECV
            descs.append(
                self.w.comm_index(
                    CommDesc(role, kind, t.op, f"nccl:{t.op}", T * h, T * h, *BF16, payload=t.payload)
                )
            )
        self.w.ops.append((OP_P2P, THREAD_MAIN, tuple(descs)))

    def optimizer(self, rs_handles: list[int], others: Sequence[StageProgram] = ()) -> None:
        """The distributed optimizer's step; ``others``: the stage's other model chunks (interleaved
        schedule), updated by the same step (one gradient norm, Adam and all-gather per bucket)."""
        th = THREAD_MAIN
        cfg = self.cfg
        chunks = [self, *others]
        self.w.wait(th, rs_handles)  # finish_grad_sync
        shard = sum(c.rank_params for c in chunks) // cfg.dp_cp  # the optimizer shards over DP x CP
        self.w.begin(th, "Optimizer.step#DistributedOptimizer.step")
        t_norm = costs.memory_time(shard * 4, self.w.gpu)
        self.w.kernel(
            th,
            KernelDesc(
                "multi_tensor_l2norm",
                L2NORM,
                ns(t_norm),
                35_000,
                grid=(320, 1, 1),
                block=(512, 1, 1),
                registers=40,
            ),
        )
        self.w.ops.append((OP_MEMCPY, th, 4))  # grad_norm.item()
        self.w.ops.append((OP_SYNC, th))
        ag_handles: list[int] = []
        buckets = [n for c in chunks for n in c.bucket_sizes]
        for numel in buckets:
            # Adam on the fp32 shard: read/write params, m, v (24 B), read the bf16 grad, write bf16 params.
            t_adam = costs.memory_time(numel // cfg.dp_cp * 28, self.w.gpu)
            self.w.kernel(
                th,
                KernelDesc(
                    "multi_tensor_adam",
                    ADAM,
                    ns(t_adam),
                    40_000,
                    grid=(320, 1, 1),
                    block=(512, 1, 1),
                    registers=64,
                ),
            )
        if cfg.dp_cp > 1:
            for numel in buckets:
                desc = CommDesc(
                    ROLE_DP,
                    CollectiveKind.ALL_GATHER,
                    "_allgather_base",
                    "nccl:_all_gather_base",
                    numel // cfg.dp_cp,
                    numel,
                    *BF16,
                )
                h = self.w.new_handle()
                ag_handles.append(h)
                self.w.ops.append((OP_COLL, th, self.w.comm_index(desc), h))
        self.w.end(th)
        self.w.wait(th, ag_handles)

    def zero_grad(self) -> None:
        n = self.rank_params
        self.w.elementwise(THREAD_MAIN, "aten::zero_", FILL, n, reads=0, writes=1, dims=[[n]])


def build_stage_plan(cfg: SynthConfig, gpu: GpuProfile, stage: int) -> StagePlan:
    """The instructions of one training iteration on pipeline ``stage``: with virtual stages
    (``cfg.vp`` > 1) its model chunks in the interleaved 1F1B order, each chunk's gradients
    reduce-scattered during its own last backward."""
    w = StageWriter(cfg, gpu, stage)
    if cfg.vp > 1:
        chunks = [StageProgram(cfg, gpu, stage, c, w) for c in range(cfg.vp)]
        steps = interleaved_steps(stage, cfg.pp, cfg.vp, cfg.microbatches)
    else:
        chunks = [StageProgram(cfg, gpu, stage, None, w)]
        steps = pipeline_steps(cfg.schedule, stage, cfg.pp, cfg.microbatches)
    w.ops.append((OP_STEP_BEGIN,))
    for chunk in chunks:  # Megatron zeroes each model chunk's gradient buffer
        chunk.zero_grad()
    last_backward = {s.chunk: i for i, s in enumerate(steps) if s.phase == "B"}
    rs_handles: list[int] = []
    for i, step in enumerate(steps):
        b = chunks[step.chunk]
        if step.phase == "F":
            b.forward(step.microbatch)
        elif step.phase == "B":
            b.backward(step.microbatch, sync_grads=i == last_backward[step.chunk], rs_handles=rs_handles)
        else:
            b.p2p(step.transfers)
    chunks[0].optimizer(rs_handles, chunks[1:])
    w.ops.append((OP_STEP_END,))
    return w.plan
