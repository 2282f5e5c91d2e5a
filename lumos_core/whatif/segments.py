"""Label every event of one iteration with its place in the training step: which phase (forward or
backward of a layer, embedding, head and loss, optimizer), which layer, which microbatch.

This is the "group the tasks by layers" step of the paper's pipeline rewrite (§3.4). Sources, best
first:

* forward-layer annotations (``record_function("layer.3")``, Megatron-style ``decoder.layers.3``,
  ``nn.Module: Block_3``) and their ``.backward`` twins;
* for backward work without annotations, the autograd ``Sequence number`` that ties every backward
  operator to the forward operator it differentiates;
* GPU work takes the label of the CPU call that launched it;
* what is left is labelled by position: before the first layer of a microbatch (embedding), between
  its last forward and first backward layer (head and loss), after its last backward layer
  (embedding backward), and after the last microbatch (optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from lumos_core.errors import ConfigError
from lumos_core.trace.model import CPU_TASK_KINDS, GPU_ACTIVITY_KINDS, CollectiveKind, Kind, RankTrace
from lumos_core.whatif.layer_names import layer_index


class Phase(IntEnum):
    OUTSIDE = -1
    PROLOGUE = 0  # iteration start, before the first microbatch (data loading, zero_grad)
    PRE_F = 1  # embedding forward (first pipeline stage)
    F = 2  # a layer's forward
    MID = 3  # head and loss, forward and the start of backward (last pipeline stage)
    B = 4  # a layer's backward
    POST_B = 5  # embedding backward (first pipeline stage)
    STEP = 6  # after the last microbatch: gradient sync, optimizer
    P2P = 7  # pipeline send/recv (rebuilt by the rewrite, never copied)


_P2P = np.asarray([CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV], np.int8)


@dataclass
class Segmentation:
    """Per-event labels of one iteration of one rank (-1 outside it)."""

    rank: int
    iteration: int
    window: tuple[int, int]
    phase: np.ndarray  # int8 Phase
    layer: np.ndarray  # int16 global layer index or -1
    mb: np.ndarray  # int16 microbatch or -1
    layers: list[int] = field(default_factory=list)
    n_microbatches: int = 0
    source: str = ""


def steady_iteration(rank: RankTrace) -> int:
    """The iteration to take templates from: not the first (warm-up effects, work queued before the
    profiler started) nor the last (partial), when there are enough."""
    n = len(rank.iterations)
    return 1 if n >= 3 else 0


def segment_rank(rank: RankTrace, iteration: int | None = None) -> Segmentation:
    """Label the events of one iteration of ``rank`` (see the module docstring)."""
    if not rank.iterations:
        raise ConfigError(f"rank {rank.rank} has no ProfilerStep iterations: cannot find its training steps")
    k = steady_iteration(rank) if iteration is None else iteration
    its = rank.iterations
    lo = its[k].cpu_start
    hi = its[k + 1].cpu_start if k + 1 < len(its) else its[k].cpu_end
    n = len(rank)
    phase = np.full(n, Phase.OUTSIDE, np.int8)
    layer = np.full(n, -1, np.int16)
    mb = np.full(n, -1, np.int16)
    cpu = np.isin(rank.kind, CPU_TASK_KINDS)
    in_window = cpu & (rank.start >= lo) & (rank.start < hi)

    fwd_spans = _layer_spans(rank, lo, hi, backward=False)
    if not fwd_spans:
        if _label_by_kernel_pattern(rank, lo, hi, phase, layer, mb, in_window):
            _label_p2p(rank, phase)
            _label_gpu(rank, phase, layer, mb, lo, hi)
            layers = sorted({int(x) for x in layer[phase == Phase.F].tolist() if x >= 0})
            return Segmentation(
                rank.rank, k, (lo, hi), phase, layer, mb, layers, 1, "repeated kernel pattern"
            )
        raise ConfigError(
            f"rank {rank.rank}: no layer annotations in iteration {its[k].name} and no repeated layer "
            "pattern in its kernels; the layer structure is needed to change layers or pipeline stages "
            "(record layers with record_function)"
        )
    bwd_spans = _layer_spans(rank, lo, hi, backward=True)
    source = "layer annotations"
    _label_spans(rank, fwd_spans, Phase.F, phase, layer, mb, in_window)
    if bwd_spans:
        _label_spans(rank, bwd_spans, Phase.B, phase, layer, mb, in_window)
    else:
        source = "layer annotations + autograd sequence numbers"
        _label_backward_by_sequence(rank, phase, layer, mb, in_window)
    for names, ph in (
        (_EMBEDDING_FWD, Phase.PRE_F),
        (_HEAD_FWD, Phase.MID),
        (_HEAD_BWD, Phase.MID),
        (_EMBEDDING_BWD, Phase.POST_B),
    ):
        _label_named_spans(rank, names, ph, phase, layer, mb, in_window, lo, hi)
    n_mb = int(mb.max()) + 1 if (mb >= 0).any() else 1
    _label_by_position(rank, phase, layer, mb, in_window, n_mb)
    _label_p2p(rank, phase)
    _label_gpu(rank, phase, layer, mb, lo, hi)
    layers = sorted({int(x) for x in layer[phase == Phase.F].tolist() if x >= 0})
    return Segmentation(rank.rank, k, (lo, hi), phase, layer, mb, layers, n_mb, source)


# Megatron-style module annotations around the layers (our synthetic traces write these too).
_EMBEDDING_FWD = ("embedding",)
_EMBEDDING_BWD = ("embedding.backward",)
_HEAD_FWD = ("output_layer", "loss", "lm_head", "final_layernorm")
_HEAD_BWD = ("output_layer.backward", "loss.backward", "lm_head.backward", "final_layernorm.backward")


def _label_named_spans(
    rank: RankTrace,
    names: tuple[str, ...],
    ph: Phase,
    phase: np.ndarray,
    layer: np.ndarray,
    mb: np.ndarray,
    mask: np.ndarray,
    lo: int,
    hi: int,
) -> None:
    ids = [i for i, s in enumerate(rank.strings) if s in names]
    if not ids:
        return
    rows = np.flatnonzero(
        np.isin(rank.name, ids) & np.isin(rank.kind, CPU_TASK_KINDS) & (rank.start >= lo) & (rank.start < hi)
    )
    seen: dict[int, int] = {}
    for i in sorted(rows.tolist(), key=lambda j: int(rank.start[j])):
        name = int(rank.name[i])
        m = seen.get(name, 0)
        seen[name] = m + 1
        _label_subtree(rank, i, ph, -1, m, phase, layer, mb)


def _layer_spans(rank: RankTrace, lo: int, hi: int, backward: bool) -> list[tuple[int, int, int, int]]:
    """(start, end, lane, layer) of forward (or ``.backward``) layer annotations in [lo, hi)."""
    suffix = ".backward"
    ids: dict[int, int] = {}
    for i, s in enumerate(rank.strings):
        if backward:
            if s.endswith(suffix):
                v = layer_index(s[: -len(suffix)])
                if v is not None:
                    ids[i] = v
        else:
            v = layer_index(s)
            if v is not None:
                ids[i] = v
    if not ids:
        return []
    rows = np.flatnonzero(
        np.isin(rank.name, list(ids))
        & np.isin(rank.kind, CPU_TASK_KINDS)
        & (rank.start >= lo)
        & (rank.start < hi)
    )
    return sorted(
        (int(rank.start[i]), int(rank.start[i] + rank.dur[i]), int(rank.lane[i]), ids[int(rank.name[i])])
        for i in rows
    )


def _label_spans(
    rank: RankTrace,
    spans: list[tuple[int, int, int, int]],
    ph: Phase,
    phase: np.ndarray,
    layer: np.ndarray,
    mb: np.ndarray,
    mask: np.ndarray,
) -> None:
    seen: dict[int, int] = {}
    for s, e, lane, lyr in spans:
        m = seen.get(lyr, 0)
        seen[lyr] = m + 1
        sl = rank.lane_slice(lane)
        idx = np.arange(sl.start, sl.stop)
        inside = idx[(rank.start[sl] >= s) & (rank.start[sl] + rank.dur[sl] <= e) & mask[sl]]
        phase[inside] = ph
        layer[inside] = lyr
        mb[inside] = m


def _label_backward_by_sequence(
    rank: RankTrace, phase: np.ndarray, layer: np.ndarray, mb: np.ndarray, mask: np.ndarray
) -> None:
    """Backward operators carry the forward operator's sequence number: inherit its layer and microbatch.
    Forward operators outside any layer tell which sequence numbers belong to embedding and head."""
    seq = _sequence_numbers(rank, mask)
    fwd_label: dict[int, tuple[int, int, int]] = {}
    for i, s in seq.items():
        if phase[i] == Phase.F and not _is_backward(rank, i):
            fwd_label.setdefault(s, (int(Phase.F), int(layer[i]), int(mb[i])))
    if not fwd_label:
        return
    # Forward ops outside layers (embedding before, head/loss after) map by where they fall.
    f_seqs = np.asarray(sorted(fwd_label))
    for i, s in seq.items():
        if _is_backward(rank, i):
            lab = fwd_label.get(s)
            if lab is not None:
                _label_subtree(rank, i, Phase.B, lab[1], lab[2], phase, layer, mb)
            else:
                # Before the microbatch's first layer: embedding; after its last: head and loss.
                pos = int(np.searchsorted(f_seqs, s))
                if pos == 0:
                    _label_subtree(rank, i, Phase.POST_B, -1, fwd_label[int(f_seqs[0])][2], phase, layer, mb)
                elif pos >= len(f_seqs):
                    _label_subtree(rank, i, Phase.MID, -1, fwd_label[int(f_seqs[-1])][2], phase, layer, mb)
                else:
                    prev_lab = fwd_label[int(f_seqs[pos - 1])]
                    next_lab = fwd_label[int(f_seqs[pos])]
                    if prev_lab[2] != next_lab[2]:  # between microbatches: the next one's embedding
                        _label_subtree(rank, i, Phase.POST_B, -1, next_lab[2], phase, layer, mb)


def _sequence_numbers(rank: RankTrace, mask: np.ndarray) -> dict[int, int]:
    out: dict[int, int] = {}
    tops = np.flatnonzero(mask & (rank.kind == Kind.CPU_OP))
    for i in tops.tolist():
        a = rank.args_of(i)
        s = a.get("Sequence number")
        if isinstance(s, int) and s >= 0:
            out[i] = s
    return out


def _is_backward(rank: RankTrace, i: int) -> bool:
    name = rank.strings[int(rank.name[i])]
    return (
        name.startswith("autograd::engine::evaluate_function")
        or name.endswith("Backward0")
        or name.endswith("Backward1")
        or "Backward" in name
    )


def _label_subtree(
    rank: RankTrace, i: int, ph: Phase, lyr: int, m: int, phase: np.ndarray, layer: np.ndarray, mb: np.ndarray
) -> None:
    """Label ``i`` and every event nested inside it on its lane (unless already labelled)."""
    sl = rank.lane_slice(int(rank.lane[i]))
    end = rank.start[i] + rank.dur[i]
    j = i
    while j < sl.stop and rank.start[j] < end:
        if rank.start[j] + rank.dur[j] <= end and (phase[j] < 0 or j == i):
            phase[j], layer[j], mb[j] = ph, lyr, m
        j += 1


def _label_by_position(
    rank: RankTrace, phase: np.ndarray, layer: np.ndarray, mb: np.ndarray, mask: np.ndarray, n_mb: int
) -> None:
    """Unlabelled CPU events of the iteration, by their place relative to the labelled ones."""
    labelled = mask & (phase >= 0)
    if not labelled.any():
        return
    t_lab = rank.start[labelled]
    ph_lab = phase[labelled]
    mb_lab = mb[labelled]
    order = np.argsort(t_lab, kind="stable")
    t_lab, ph_lab, mb_lab = t_lab[order], ph_lab[order], mb_lab[order]
    first_f = {
        m: int(t_lab[(ph_lab == Phase.F) & (mb_lab == m)].min())
        for m in range(n_mb)
        if ((ph_lab == Phase.F) & (mb_lab == m)).any()
    }
    last_f = {m: int(t_lab[(ph_lab == Phase.F) & (mb_lab == m)].max()) for m in first_f}
    b_times = {m: t_lab[(ph_lab == Phase.B) & (mb_lab == m)] for m in range(n_mb)}
    first_b = {m: int(v.min()) for m, v in b_times.items() if len(v)}
    last_b = {m: int(v.max()) for m, v in b_times.items() if len(v)}
    if not first_f:
        return
    todo = np.flatnonzero(mask & (phase < 0))
    starts = rank.start[todo]
    last_any = max(last_b.values()) if last_b else max(last_f.values())
    for i, s in zip(todo.tolist(), starts.tolist()):
        m = max((k for k, v in first_f.items() if v <= s), default=-1)
        if m < 0:
            phase[i] = Phase.PROLOGUE if s < min(first_f.values()) else Phase.STEP
            continue
        if s > last_any and m == max(first_f):
            phase[i] = Phase.STEP
        elif s <= last_f[m]:
            phase[i], mb[i] = Phase.F, m  # between layers of the forward: belongs to the forward
            layer[i] = _nearest_layer(rank, i, phase, layer)
        elif m in first_b and s < first_b[m]:
            phase[i], mb[i] = Phase.MID, m
        elif m in last_b and s > last_b[m]:
            phase[i], mb[i] = Phase.POST_B, m
        elif m in first_b:
            phase[i], mb[i] = Phase.B, m
            layer[i] = _nearest_layer(rank, i, phase, layer)
        else:
            phase[i], mb[i] = Phase.MID, m


def _nearest_layer(rank: RankTrace, i: int, phase: np.ndarray, layer: np.ndarray) -> int:
    """Layer of the closest labelled event before ``i`` on its lane (the gap belongs to that layer)."""
    sl = rank.lane_slice(int(rank.lane[i]))
    j = i - 1
    while j >= sl.start:
        if layer[j] >= 0:
            return int(layer[j])
        j -= 1
    return -1


def _label_p2p(rank: RankTrace, phase: np.ndarray) -> None:
    """Pipeline sends/receives and the CPU calls that issue them: rebuilt, never copied."""
    c = rank.collectives
    p2p = np.isin(c.kind, _P2P)
    for ev in c.event[p2p].tolist():
        phase[ev] = Phase.P2P
        op = int(rank.launch[ev])
        while op >= 0:
            if rank.kind[op] in (Kind.RUNTIME, Kind.CPU_OP, Kind.USER_ANNOTATION):
                phase[op] = Phase.P2P
            parent = int(rank.parent[op])
            if parent < 0 or rank.strings[int(rank.name[parent])].startswith("ProfilerStep"):
                break
            if rank.strings[int(rank.name[parent])] in ("record_param_comms",) or rank.strings[
                int(rank.name[parent])
            ].startswith(("nccl:send", "nccl:recv", "c10d::send", "c10d::recv", "nccl:batch_isend_irecv")):
                op = parent
                continue
            break


def _label_gpu(
    rank: RankTrace, phase: np.ndarray, layer: np.ndarray, mb: np.ndarray, lo: int, hi: int
) -> None:
    """GPU work takes its launch call's label; work without one follows its stream predecessor."""
    gpu = np.flatnonzero(np.isin(rank.kind, GPU_ACTIVITY_KINDS))
    launched = gpu[rank.launch[gpu] >= 0]
    src = rank.launch[launched]
    keep = phase[launched] != Phase.P2P
    phase[launched[keep]] = phase[src[keep]]
    layer[launched[keep]] = layer[src[keep]]
    mb[launched[keep]] = mb[src[keep]]
    for lane in rank.lanes:
        if not lane.is_gpu:
            continue
        sl = rank.lane_slice(lane.index)
        prev = (-1, -1, -1)
        for j in range(sl.start, sl.stop):
            if rank.kind[j] not in GPU_ACTIVITY_KINDS:
                continue
            if phase[j] >= 0:
                prev = (int(phase[j]), int(layer[j]), int(mb[j]))
            elif rank.launch[j] < 0 and lo <= rank.start[j] < hi and prev[0] >= 0:
                phase[j], layer[j], mb[j] = prev


# ------------------------------------------------------------------- layers from the kernel stream


def layer_count_from_kernels(rank: RankTrace) -> int | None:
    """Layers of an iteration without annotations (e.g. a torch.compile'd model): the number of
    times the forward pass repeats its layer block, seen as kernels that recur that many times."""
    if not rank.iterations:
        return None
    k = steady_iteration(rank)
    its = rank.iterations
    lo = its[k].cpu_start
    hi = its[k + 1].cpu_start if k + 1 < len(its) else its[k].cpu_end
    regions = _forward_backward(rank, lo, hi)
    if regions is None:
        return None
    fwd = _kernel_sequence(rank, regions[0], regions[1])
    bwd = _kernel_sequence(rank, regions[1], regions[2])
    lf, lb = _repeat_count(rank, fwd), _repeat_count(rank, bwd)
    return lf if lf and lf == lb else None


def _forward_backward(rank: RankTrace, lo: int, hi: int) -> tuple[int, int, int] | None:
    """(forward start, backward start, step start): backward begins with the first autograd
    operator; the step with the optimizer (or after the last autograd operator)."""
    auto = rank.names_matching(lambda s: s.startswith("autograd::engine::evaluate_function"))
    in_win = (rank.start >= lo) & (rank.start < hi) & np.isin(rank.kind, CPU_TASK_KINDS)
    rows = np.flatnonzero(in_win & auto[rank.name])
    if len(rows) == 0:
        return None
    bwd = int(rank.start[rows].min())
    opt = rank.names_matching(lambda s: s.startswith("Optimizer.step"))
    o = np.flatnonzero(in_win & opt[rank.name] & (rank.start > bwd))
    step = int(rank.start[o].min()) if len(o) else int((rank.start[rows] + rank.dur[rows]).max())
    return lo, bwd, step


def _kernel_sequence(rank: RankTrace, a: int, b: int) -> np.ndarray:
    """GPU kernels launched from CPU calls in [a, b), in launch order."""
    k = np.flatnonzero((rank.kind == Kind.KERNEL) & (rank.launch >= 0))
    ls = rank.start[rank.launch[k]]
    k = k[(ls >= a) & (ls < b)]
    return k[np.argsort(rank.start[rank.launch[k]], kind="stable")]


def _repeat_count(rank: RankTrace, seq: np.ndarray) -> int | None:
    """How many times a block repeats: the highest count shared by several kernel names."""
    if len(seq) < 8:
        return None
    counts = np.bincount(rank.name[seq])
    by_count: dict[int, int] = {}
    for c in counts[counts >= 2].tolist():
        by_count[c] = by_count.get(c, 0) + 1
    shared = [c for c, names in by_count.items() if names >= 2]
    return max(shared) if shared else None


def _block_starts(rank: RankTrace, seq: np.ndarray, n: int) -> list[int] | None:
    """Positions in ``seq`` where each of the ``n`` repeats of the layer block starts."""
    names = rank.name[seq]
    counts = np.bincount(names)
    cands = np.flatnonzero(counts == n)
    if len(cands) == 0:
        return None
    anchor = min(cands.tolist(), key=lambda c: int(np.flatnonzero(names == c)[0]))
    pos = np.flatnonzero(names == anchor)
    gap = int(np.diff(pos).min()) if len(pos) > 1 else len(seq)
    shift = 0
    # Walk back from the anchor while most repeats agree on the kernel before it: that is still the
    # same block (layers need not be identical: a few may skip a kernel).
    while shift + 1 < gap and pos[0] - shift - 1 >= 0:
        before = names[pos - shift - 1]
        if np.count_nonzero(before == before[0]) < 0.7 * n:
            break
        shift += 1
    return (pos - shift).tolist()


def _label_by_kernel_pattern(
    rank: RankTrace, lo: int, hi: int, phase: np.ndarray, layer: np.ndarray, mb: np.ndarray, mask: np.ndarray
) -> bool:
    """One microbatch, no annotations: cut forward and backward kernels into their repeated layer
    blocks and give each kernel's launch call the block's label."""
    regions = _forward_backward(rank, lo, hi)
    if regions is None:
        return False
    fwd = _kernel_sequence(rank, regions[0], regions[1])
    bwd = _kernel_sequence(rank, regions[1], regions[2])
    n = _repeat_count(rank, fwd)
    if not n or n != _repeat_count(rank, bwd):
        return False
    fs, bs = _block_starts(rank, fwd, n), _block_starts(rank, bwd, n)
    if fs is None or bs is None:
        return False
    block = int(np.median(np.diff(fs))) if n > 1 else len(fwd) - fs[0]
    bblock = int(np.median(np.diff(bs))) if n > 1 else len(bwd) - bs[0]

    def label(seq: np.ndarray, starts: list[int], width: int, forward: bool) -> None:
        for i, kern in enumerate(seq.tolist()):
            j = int(np.searchsorted(starts, i, side="right")) - 1
            if j < 0:
                ph, lyr = (Phase.PRE_F, -1) if forward else (Phase.MID, -1)
            elif j == n - 1 and i >= starts[-1] + width:
                ph, lyr = (Phase.MID, -1) if forward else (Phase.POST_B, -1)
            else:
                ph, lyr = (Phase.F, j) if forward else (Phase.B, n - 1 - j)
            call = int(rank.launch[kern])
            phase[call], layer[call], mb[call] = ph, lyr, 0

    label(fwd, fs, block, True)
    label(bwd, bs, bblock, False)
    _label_by_position(rank, phase, layer, mb, mask, 1)
    # CPU calls between launches belong with the launch that follows them on their thread.
    for lane in rank.lanes:
        if lane.is_gpu:
            continue
        sl = rank.lane_slice(lane.index)
        nxt = (-1, -1)
        for i in range(sl.stop - 1, sl.start - 1, -1):
            if not mask[i]:
                continue
            if rank.kind[i] == Kind.RUNTIME and phase[i] in (Phase.F, Phase.B) and layer[i] >= 0:
                nxt = (int(phase[i]), int(layer[i]))
            elif phase[i] in (Phase.F, Phase.B) and layer[i] < 0 and nxt[0] >= 0:
                phase[i], layer[i] = nxt
    return True
