"""Rebuild the execution graph for a new pipeline degree, microbatch count or number of layers
(paper §3.4: "group the tasks by layers and partition the original layers and their underlying
tasks into new stages", "update the pipeline schedule", "insert communication tasks").

The traced iteration is cut into *templates*: the tasks of one layer's forward or backward of one
microbatch, of the embedding, of the head and loss, of the iteration's prologue and optimizer step
(:mod:`lumos_core.whatif.segments`). Each new pipeline stage gets a *program*: its layers' templates in the
order of the schedule (:mod:`lumos_core.perf.schedules`, 1F1B or GPipe), copied with their own
dependencies (launches, event waits, syncs, collectives) and measured lags, chained in the new
order on every thread and stream, plus new send/recv tasks between stages. A dependency that
crossed template boundaries in the trace is reconnected to the most recent copy of its source.
One representative rank per stage is simulated: tensor- and data-parallel peers run the same
program. Gradient synchronisation runs once per iteration, with the last microbatch.

Interleaved pipelines (Megatron's virtual stages, VP > 1):

* a traced interleaved job is read per (model chunk, microbatch): each layer's forward and backward
  of each microbatch is its own template wherever the schedule ran it, and the layers' templates
  are taken from the stage that holds them (:mod:`~lumos_core.whatif.source_layout`: chunk c of
  stage s runs the (c P + s)-th run of layers; layers numbered per stage or per chunk are given
  their global numbers, per chunk by the schedule's order of steps); the embedding, head and
  gradient synchronisation stay with the first chunk of stage 0, the last chunk of the last stage
  and the last microbatch;
* a target with VP > 1 is built in Megatron-LM's interleaved order
  (:func:`~lumos_core.perf.schedules.interleaved_steps`): stage s holds chunks c = 0..VP-1 of
  L / (P VP) layers (model piece c P + s), each (microbatch, chunk) step copies those layers'
  templates, and the stages form a ring (the last stage's chunk c feeds stage 0's chunk c + 1).
  The n-th transfer over a link meets the n-th on the other side (Megatron's order guarantees it);
  transfers to the previous and the next stage run on separate streams, as PyTorch's NCCL
  streams per peer do. Approximations: a layer's template is the same whatever chunk runs it, and
  the host work between steps that belongs to no layer (the traced send/recv calls and their
  event waits) is replaced by the rebuilt send/recv groups, as for 1F1B.

The graph being assembled and its program order are in :mod:`~lumos_core.whatif.rewrite_builder`,
the send/recv and gradient all-reduce it creates in :mod:`~lumos_core.whatif.rewrite_comm`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lumos_core.errors import ConfigError
from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.perf import costs
from lumos_core.perf.schedules import interleaved_steps, pipeline_steps
from lumos_core.trace.model import CollectiveKind, Job, Kind, LaneRole, RankTrace
from lumos_core.whatif.baseline import group_roles, process_groups
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.retime.rank_nodes import nodes_by_rank
from lumos_core.whatif.rewrite_builder import HANDOFF_NS, LAST_CPU, Builder, Key, Template, chain, finish
from lumos_core.whatif.rewrite_comm import (
    activation_bytes,
    close_unpaired,
    emit_grad_sync,
    emit_p2p_group,
    join_transfers,
)
from lumos_core.whatif.segments import Phase, segment_rank
from lumos_core.whatif.source_layout import SourceLayout, global_layers

PP_STREAM = 9001  # stream id of the synthetic pipeline send/recv stream
PREV_LANE = -3  # source lane standing for an interleaved stage's stream to its previous stage


@dataclass
class Rewritten:
    """The rewritten graph and what turns its simulation into timelines."""

    graph: ExecutionGraph
    new_rank: np.ndarray  # per node
    instance: np.ndarray  # per node
    extra: list[str]  # per node
    represents: dict[int, list[int]]
    lanes: dict[int, list[tuple[int, int]]]  # new rank -> (source rank, source lane) per new lane
    iterations: dict[int, list[int]]  # new rank -> first instance of each iteration
    instance_info: list[tuple[int, int, Key]]  # instance -> (new rank, iteration, source key)
    stage_of: dict[int, int]  # new rank -> stage


def build_rewritten(
    job: Job, graph: ExecutionGraph, baseline: Baseline, config: JobConfig, notes: list[str]
) -> Rewritten:
    """The graph of ``config``'s pipeline (see the module docstring)."""
    base = baseline.config
    if base.layers is None:
        raise ConfigError("the number of layers in the trace is unknown: give it with --baseline-layers N")
    if config.tp != base.tp and base.tp == 1:
        raise ConfigError(
            "adding tensor parallelism to a trace recorded without it needs per-layer TP "
            "collectives, which the trace does not have: start from a trace with TP > 1"
        )
    L0, L1 = base.layers, config.layers or base.layers
    P0, P1, M1 = base.pp, config.pp, config.microbatches
    V = config.vp  # interleaved 1F1B when > 1: V model chunks per stage, in Megatron's order
    layout = SourceLayout.of(L0, P0, base.vp)
    lps0 = L0 // P0
    by_rank = {t.rank: t for t in job.ranks}
    stage_of_src = _stage_of_ranks(job, base)
    reps = {
        s: min(r for r, st in stage_of_src.items() if st == s) for s in sorted(set(stage_of_src.values()))
    }
    if len(reps) < P0:
        raise ConfigError(
            f"the trace holds {len(reps)} of its {P0} pipeline stages: every stage's rank file is needed"
        )
    segs = {
        s: global_layers(segment_rank(by_rank[r]), s, layout, base.microbatches) for s, r in reps.items()
    }
    m_src = {s: max(seg.n_microbatches, 1) for s, seg in segs.items()}
    templates, tpl_of = _templates(graph, reps, segs)
    _check_layers_found(templates, layout, reps)
    roles, _ = group_roles(job)
    dp_nodes = _dp_collective_nodes(graph, by_rank, roles)
    blocking = _p2p_blocks_cpu(graph, by_rank)

    b = Builder()
    gpu = config.gpu_profile
    cpu_only = not any((t.kind == Kind.KERNEL).any() for t in by_rank.values())
    h, f = base.hidden, base.ffn
    layer_params = float(4 * h * h + 2 * h * f) if h and f else 1.0
    vocab = baseline.fields["vocab"].value if "vocab" in baseline.fields else None
    nonlayer_params = float(2 * vocab * h) if vocab and h else 0.0
    # A trace without data parallelism has no gradient synchronisation to copy: add one all-reduce
    # of the gradients per iteration (fp32 on CPU, bf16 on GPU).
    grad_sync_bytes = 0.0
    if base.dp == 1 and config.dp > 1 and not dp_nodes:
        if not (h and f):
            raise ConfigError(
                "adding data parallelism to a trace without it needs the model size to size the "
                "gradient all-reduce: give --baseline-hidden and --baseline-ffn"
            )
        grad_sync_bytes = (L1 * layer_params + nonlayer_params) * (4 if cpu_only else 2)
    act_bytes = activation_bytes(base, config)
    # A transfer between stages s and s+1 crosses nodes when their first ranks (s x TP x DP apart,
    # Megatron's order) sit on different nodes.
    stage_ranks = config.tp * config.dp * config.cp
    gpn = gpu.gpus_per_node
    p2p_ns_of = {
        inter: int(costs.collective_time(CollectiveKind.SEND, act_bytes, 2, gpu, inter_node=inter) * 1e9)
        for inter in (False, True)
    }

    def p2p_ns_between(stage: int) -> int:
        nxt = (stage + 1) % P1 if V > 1 else stage + 1  # interleaved: the last stage feeds stage 0
        return p2p_ns_of[(stage * stage_ranks) // gpn != (nxt * stage_ranks) // gpn]

    p2p_ns = max(p2p_ns_between(s) for s in range(max(P1 - 1, 1)))
    n_iter = min(3, max(len(by_rank[reps[0]].iterations), 1))
    new_rank_of = {s: s * stage_ranks for s in range(P1)}
    lanes: dict[int, list[tuple[int, int]]] = {}
    iterations: dict[int, list[int]] = {}
    instance_info: list[tuple[int, int, Key]] = []
    pairs: dict[tuple[str, int, int, int], dict[str, int]] = defaultdict(dict)
    signatures: dict[tuple[int, int], tuple[int, int]] = {}  # (source rank, lane) -> its signature

    for s in range(P1):
        nr = new_rank_of[s]
        chunk_ids = [_piece_layers(c * P1 + s, P1 * V, L1) for c in range(V)]  # V = 1: the stage's
        layer_ids = [lid for ids in chunk_ids for lid in ids]
        chunk_src = [[min(lid * L0 // L1, L0 - 1) for lid in ids] for ids in chunk_ids]
        home = layout.stage_of(chunk_src[0][0])  # source stage for the prologue/step templates
        lanes[nr] = []
        lane_key: dict[tuple[int, int], int] = {}

        def lane_of(src_rank: int, src_lane: int, nr: int = nr, lane_key: dict = lane_key) -> int:
            key = signatures.get((src_rank, src_lane))
            if key is None:
                key = _lane_signature(by_rank[src_rank], src_lane, roles) if src_rank >= 0 else None
                key = key or (1, PREV_LANE if src_lane == PREV_LANE else -1)  # new streams
                signatures[(src_rank, src_lane)] = key
            idx = lane_key.get(key)
            if idx is None:
                idx = lane_key[key] = len(lanes[nr])
                lanes[nr].append((src_rank, src_lane))
            return b.proc_id(nr, idx)

        home_rank = reps[home]
        for ln in by_rank[home_rank].lanes:  # the home rank's lanes first, in their order
            lane_of(home_rank, ln.index)
        main_proc = lane_of(home_rank, _lane_with_role(by_rank[home_rank], LaneRole.CPU_MAIN))
        compute_proc = lane_of(home_rank, _lane_with_role(by_rank[home_rank], LaneRole.COMPUTE))
        last: dict[int, int] = {}
        emitted: dict[Key, int] = {}
        copies: dict[int, dict[int, int]] = {}
        iterations[nr] = []
        for it in range(n_iter):
            iterations[nr].append(len(instance_info))
            sent: dict[tuple[str, str], int] = defaultdict(int)  # transfers so far per (op, payload)
            src_stage_layers = lps0
            step_scale = (len(layer_ids) * layer_params + nonlayer_params / P1) / (
                src_stage_layers * layer_params + nonlayer_params / P0
            )
            sync = (
                grad_sync_bytes
                * (len(layer_ids) * layer_params + nonlayer_params / P1)
                / max(L1 * layer_params + nonlayer_params, 1)
            )
            for item in _program(
                s, P1, M1, V, config.schedule, chunk_src, layout, m_src, home, step_scale, sync
            ):
                if item[0] == "grad_sync":
                    emit_grad_sync(
                        b, nr, main_proc, lane_of(-2, -2), compute_proc, item[1], config, cpu_only, last
                    )
                    continue
                if item[0] == "p2p":
                    arrives = emit_p2p_group(
                        b,
                        nr,
                        main_proc,
                        [lane_of(-1, _p2p_lane(x[1], V)) for x in item[1]],
                        compute_proc,
                        [x[0] for x in item[1]],
                        [p2p_ns_between(s if x[1] == "next" else (s - 1) % P1) for x in item[1]],
                        last,
                        blocking,
                    )
                    # The n-th send over a link meets the n-th receive there (in 1F1B: microbatch n).
                    for (op, peer, payload, _m), arrive in zip(item[1], arrives):
                        link = s if peer == "next" else (s - 1) % P1
                        pairs[(payload, sent[(op, payload)], it, link)][op] = arrive
                        sent[(op, payload)] += 1
                    continue
                key, drop_dp, scale = item
                tpl = templates.get(key)
                if tpl is None:
                    continue
                inst = len(instance_info)
                instance_info.append((nr, it, key))
                copies[inst] = _emit(
                    b,
                    graph,
                    tpl,
                    nr,
                    inst,
                    lane_of,
                    last,
                    emitted,
                    copies,
                    tpl_of,
                    dp_nodes if drop_dp else None,
                    scale,
                    cpu_only,
                )
                emitted[key] = inst
    for ends in pairs.values():
        if "send" in ends and "recv" in ends:
            join_transfers(b, [ends["send"], ends["recv"]])
    close_unpaired(b)  # a transfer whose peer is not in the job waits for no one
    g = finish(job, b)
    represents = {
        nr: sorted(nr + t + config.tp * d for d in range(config.dp * config.cp) for t in range(config.tp))
        for nr in new_rank_of.values()
    }
    if P1 != P0 or base.microbatches != M1 or base.vp != V:
        notes.append(
            f"pipeline rebuilt: {P1} stage(s) x {L1 // P1} layers, {M1} microbatches, "
            f"{config.schedule if V == 1 else f'interleaved {config.schedule} over {V} virtual stages'}; "
            f"send/recv of {act_bytes / 2**20:.1f} MiB per microbatch (up to {p2p_ns / 1000:.0f} µs)"
        )
    if V > 1:
        notes.append(
            f"vp={V} (rewrite): interleaved 1F1B rebuilt in Megatron-LM's order: {V} model chunks of "
            f"{L1 // (P1 * V)} layer(s) per stage, the bubble (PP-1)/(VP x microbatches) = "
            f"{(P1 - 1) / (V * M1):.3f} of the ideal time, {V}x the pipeline transfers of "
            f"{act_bytes / 2**20:.1f} MiB around the stage ring"
        )
    if L1 != L0:
        notes.append(
            f"{L1} layers built from the trace's {L0}: layer templates "
            f"{'duplicated' if L1 > L0 else 'removed'}"
        )
    return Rewritten(
        graph=g,
        new_rank=np.asarray(b.new_rank),
        instance=np.asarray(b.instance),
        extra=b.extra,
        represents=represents,
        lanes=lanes,
        iterations=iterations,
        instance_info=instance_info,
        stage_of={v: k for k, v in new_rank_of.items()},
    )


# ------------------------------------------------------------------------------------------ program


def _program(
    s: int,
    P: int,
    M: int,
    V: int,
    schedule: str,
    chunk_src: list[list[int]],
    layout: SourceLayout,
    m_src: dict[int, int],
    home: int,
    step_scale: float = 1.0,
    grad_sync_bytes: float = 0.0,
) -> list[tuple]:
    """Items of one iteration of stage ``s``: ((source key), drop_dp, scale) or ("p2p", ...).
    ``chunk_src``: the source layers of each of the stage's model chunks (one without VP)."""
    items: list[tuple] = [((home, Phase.PROLOGUE, -1, -1), False, 1.0)]
    first_src, last_src = 0, layout.stages - 1

    def src_mb(stage: int, last_mb: bool) -> int:
        # The last microbatch's backward carries the gradient sync; forward templates are alike.
        return m_src.get(stage, 1) - 1 if last_mb else 0

    steps = interleaved_steps(s, P, V, M) if V > 1 else pipeline_steps(schedule, s, P, M)
    for step in steps:
        if step.phase == "P2P":
            items.append(("p2p", [(x.op, x.peer, x.payload, x.microbatch) for x in step.transfers]))
            continue
        last_mb = step.microbatch == M - 1
        first_piece, last_piece = s == 0 and step.chunk == 0, s == P - 1 and step.chunk == V - 1
        src_layers = chunk_src[step.chunk]
        if step.phase == "F":
            if first_piece:
                items.append(((first_src, Phase.PRE_F, -1, 0), False, 1.0))
            for src in src_layers:
                items.append(((layout.stage_of(src), Phase.F, src, 0), False, 1.0))
            if last_piece:
                items.append(((last_src, Phase.MID, -1, 0), False, 1.0))
        else:
            for src in reversed(src_layers):
                st = layout.stage_of(src)
                items.append(((st, Phase.B, src, src_mb(st, last_mb)), not last_mb, 1.0))
            if first_piece:
                items.append(((first_src, Phase.POST_B, -1, src_mb(first_src, last_mb)), not last_mb, 1.0))
    # The optimizer works on the parameters the stage holds.
    if grad_sync_bytes:
        items.append(("grad_sync", grad_sync_bytes))
    items.append(((home, Phase.STEP, -1, -1), False, step_scale))
    return items


def _piece_layers(piece: int, pieces: int, layers: int) -> list[int]:
    """The layers of model piece ``piece`` of ``pieces`` (stages x chunks, Megatron's order)."""
    return list(range(piece * layers // pieces, (piece + 1) * layers // pieces))


# ------------------------------------------------------------------------------------------ templates


def _stage_of_ranks(job: Job, base: JobConfig) -> dict[int, int]:
    """Pipeline stage of every traced rank (its position in its pipeline group)."""
    if base.pp <= 1:
        return {t.rank: 0 for t in job.ranks}
    roles, _ = group_roles(job)
    groups = process_groups(job)
    out: dict[int, int] = {}
    for name, role in roles.items():
        if role == "pp" and name in groups:
            for i, r in enumerate(groups[name]["ranks"]):
                out[r] = i
    present = {t.rank for t in job.ranks}
    for r in present:
        out.setdefault(r, (r // (base.tp * base.dp)) % base.pp)
    return {r: s for r, s in out.items() if r in present}


def _templates(
    graph: ExecutionGraph, reps: dict[int, int], segs: dict
) -> tuple[dict[Key, Template], dict[int, Key]]:
    """Nodes of each (stage, phase, layer, microbatch) of the chosen iteration; node -> its key."""
    out: dict[Key, Template] = {}
    tpl_of: dict[int, Key] = {}
    for s, r in reps.items():
        seg = segs[s]
        nodes = np.flatnonzero((graph.rank == r) & (graph.event >= 0))
        ev = graph.event[nodes]
        ph = seg.phase[ev].astype(np.int64)
        keep = (ph >= 0) & (ph != Phase.P2P)
        nodes, ev, ph = nodes[keep], ev[keep], ph[keep]
        lay = seg.layer[ev].astype(np.int64)
        mb = seg.mb[ev].astype(np.int64)
        per_iter = np.isin(ph, [Phase.PROLOGUE, Phase.STEP])
        lay[per_iter] = -1
        mb[per_iter] = -1
        order = np.lexsort((graph.measured_start[nodes], graph.proc[nodes]))
        nodes, ph, lay, mb = nodes[order], ph[order], lay[order], mb[order]
        code = (ph * 4096 + lay + 1) * 4096 + mb + 1
        for c in np.unique(code).tolist():
            sel = nodes[code == c]
            key = (s, c // 4096 // 4096, (c // 4096) % 4096 - 1, c % 4096 - 1)
            out[key] = Template(key, r, sel)
            for v in sel.tolist():
                tpl_of[v] = key
    return out, tpl_of


def _check_layers_found(
    templates: dict[Key, Template], layout: SourceLayout, reps: dict[int, int]
) -> None:
    """Every layer's forward must be on the rank of the stage that the layout says ran it: a layer
    missing there would be silently left out of the rebuilt pipeline."""
    for layer in range(layout.layers):
        stage = layout.stage_of(layer)
        if (stage, Phase.F, layer, 0) not in templates:
            chunks = f" x {layout.chunks} virtual stages" if layout.chunks > 1 else ""
            raise ConfigError(
                f"rank {reps[stage]}: layer {layer}'s forward is not in its trace, but a pipeline of "
                f"{layout.stages} stages{chunks} and {layout.layers} layers runs it on stage {stage}: "
                "give the trace's layout with --baseline-vp (interleaved stages) and --baseline-layers"
            )


def _p2p_blocks_cpu(graph: ExecutionGraph, by_rank: dict[int, RankTrace]) -> bool:
    """Did the traced job make the CPU wait for its pipeline transfers (a synchronize on them)?"""
    p2p_kinds = (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV)
    sync_src = graph.ep_src[graph.ep_kind == EdgeKind.SYNC]
    for v in np.unique(sync_src).tolist():
        t = by_rank.get(int(graph.rank[v]))
        e = int(graph.event[v])
        if t is None or e < 0:
            continue
        rows = np.flatnonzero(t.collectives.event == e)
        if len(rows) and t.collectives.kind[rows[0]] in p2p_kinds:
            return True
    return False


def _dp_collective_nodes(
    graph: ExecutionGraph, by_rank: dict[int, RankTrace], roles: dict[str, str]
) -> set[int]:
    """Graph nodes of gradient-synchronisation collectives (data-parallel or whole-world groups)."""
    out: set[int] = set()
    nodes_of_rank = nodes_by_rank(graph)
    empty = np.zeros(0, np.int64)
    for r, t in by_rank.items():
        c = t.collectives
        if len(c) == 0:
            continue
        row_of = np.full(len(t), -1, np.int64)
        row_of[c.event] = np.arange(len(c))  # an event on several rows: its last row
        mine = nodes_of_rank.get(r, empty)
        mine = mine[graph.event[mine] >= 0]
        rows = row_of[graph.event[mine]]
        has = rows >= 0
        pg = c.pg[rows[has]]
        sync = [
            p
            for p in np.unique(pg).tolist()
            if (roles.get(t.strings[p], "dp") if p >= 0 else "dp") in ("dp", "world")
        ]
        out.update(mine[has][np.isin(pg, sync)].tolist())
    return out


def _lane_signature(t: RankTrace, lane: int, roles: dict[str, str]) -> tuple[int, int]:
    """Which lane of a new rank a source lane maps to: (is GPU, role and what its collectives serve)."""
    ln = t.lanes[lane]
    if ln.is_gpu:
        c = t.collectives
        on_lane = c.pg[t.lane[c.event] == lane]
        kinds = {roles.get(t.strings[int(p)], "dp") for p in on_lane.tolist() if p >= 0}
        return (
            1,
            int(ln.role) * 100 + sum(1 << i for i, k in enumerate(("tp", "dp", "pp", "world")) if k in kinds),
        )
    return (0, int(ln.role) * 100000 + (0 if ln.role <= LaneRole.CPU_AUTOGRAD else ln.tid % 99991))


def _p2p_lane(peer: str, V: int) -> int:
    """The new lane of a transfer: one pipeline stream, or with interleaved stages -- whose groups
    talk to both neighbours at once -- one per peer (PyTorch's NCCL stream per peer pair)."""
    return PREV_LANE if V > 1 and peer == "prev" else -1


def _lane_with_role(t: RankTrace, role: LaneRole) -> int:
    for ln in t.lanes:
        if ln.role == role:
            return ln.index
    return next((ln.index for ln in t.lanes if ln.is_gpu == role.is_gpu), 0)


# ------------------------------------------------------------------------------------------ emitting


def _emit(
    b: Builder,
    graph: ExecutionGraph,
    tpl: Template,
    nr: int,
    inst: int,
    lane_of,
    last: dict[int, int],
    emitted: dict[Key, int],
    copies: dict[int, dict[int, int]],
    tpl_of: dict[int, Key],
    drop: set[int] | None,
    scale: float,
    cpu_only: bool = False,
) -> dict[int, int]:
    """Copy a template: its nodes, internal dependencies and measured lags; chain it after what each
    processor ran last; reconnect dependencies on other templates to their latest copies."""
    nodes = (
        tpl.nodes if drop is None else np.asarray([v for v in tpl.nodes.tolist() if v not in drop], np.int64)
    )
    copy: dict[int, int] = {}
    for v in nodes.tolist():
        typ = int(graph.node_type[v])
        rank, lane = graph.procs[int(graph.proc[v])]
        d = int(graph.dur[v])
        if (
            scale != 1.0
            and graph.arrive_of[v] < 0
            and (typ == NodeType.GPU or (cpu_only and typ == NodeType.CPU))
        ):
            d = int(round(d * scale))
        copy[v] = b.add(tpl.rank, int(graph.event[v]), nr, typ, lane_of(rank, lane), d, inst)
        if graph.arrive_of[v] >= 0 and int(graph.arrive_of[v]) in copy:
            b.arrive_of[copy[v]] = copy[int(graph.arrive_of[v])]
    # The training loop is sequential from Python's point of view: a template's CPU work starts after
    # the previous template's, even on another thread (the main thread blocks in backward(); the
    # autograd thread starts when it is called).
    cpu_nodes = [v for v in nodes.tolist() if graph.node_type[v] == NodeType.CPU]
    if cpu_nodes:
        first = min(cpu_nodes, key=lambda v: int(graph.measured_start[v]))
        prev = last.get(LAST_CPU)
        if prev is not None and b.proc[prev] != b.proc[copy[first]]:
            b.sp.append((prev, copy[first], HANDOFF_NS, True, int(EdgeKind.CPU_CROSS)))
    for v in nodes.tolist():
        nv = copy[v]
        chained = False
        for j in range(int(graph.sp_ptr[v]), int(graph.sp_ptr[v + 1])):
            u = int(graph.sp_src[j])
            kind, lag, fe = int(graph.sp_kind[j]), int(graph.sp_lag[j]), bool(graph.sp_from_end[j])
            if graph.node_type[u] == NodeType.JOIN:  # this rank stands for its peers: arrive -> transfer
                a = int(graph.arrive_of[v])
                if a in copy:
                    b.sp.append((copy[a], nv, 0, True, kind))
                    chained = True
                continue
            same_proc = kind in (EdgeKind.CPU_THREAD, EdgeKind.STREAM) and graph.proc[u] == graph.proc[v]
            if u in copy:
                if cpu_only and scale != 1.0 and kind == EdgeKind.CPU_THREAD:
                    lag = int(round(lag * scale))  # CPU-only: operators work between their children
                b.sp.append((copy[u], nv, lag, fe, kind))
                chained |= same_proc
            elif not same_proc:
                src = _latest(u, emitted, copies, tpl_of, tpl.key)
                if src is not None:
                    b.sp.append((src, nv, lag, fe, kind))
        if chained:
            for src in last.pop(("wait", b.proc[nv]), ()):
                b.sp.append((src, nv, 0, True, int(EdgeKind.EVENT_WAIT)))
            last[b.proc[nv]] = nv
        else:
            chain(b, nv, _own_chain_lag(graph, v), last)
        for j in range(int(graph.ep_ptr[v]), int(graph.ep_ptr[v + 1])):
            u = int(graph.ep_src[j])
            src = copy.get(u, _latest(u, emitted, copies, tpl_of, tpl.key))
            if src is not None:
                b.ep.append(
                    (src, nv, int(graph.ep_lag[j]), bool(graph.ep_from_end[j]), int(graph.ep_kind[j]))
                )
    if cpu_nodes:
        last[LAST_CPU] = copy[max(cpu_nodes, key=lambda v: int(graph.measured_end[v]))]
    return copy


def _latest(
    u: int, emitted: dict[Key, int], copies: dict[int, dict[int, int]], tpl_of: dict[int, Key], current: Key
) -> int | None:
    """The copy of source node ``u`` in the most recent instance of its template (never a later one)."""
    key = tpl_of.get(u)
    if key is None or key == current:
        return None
    inst = emitted.get(key)
    if inst is None:
        return None
    return copies[inst].get(u)


def _own_chain_lag(graph: ExecutionGraph, v: int) -> int:
    """``v``'s measured same-processor lag (the CPU time before it on its thread), else 0."""
    for j in range(int(graph.sp_ptr[v]), int(graph.sp_ptr[v + 1])):
        u = int(graph.sp_src[j])
        if graph.sp_kind[j] in (EdgeKind.CPU_THREAD, EdgeKind.STREAM) and graph.proc[u] == graph.proc[v]:
            return max(int(graph.sp_lag[j]), 0)
    return 0
