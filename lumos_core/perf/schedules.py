"""Pipeline-parallel schedules: the order of forward (F) and backward (B) microbatches per stage.

:func:`schedule` gives the compute order only, e.g. 1F1B for stage 0 of 4 with 8 microbatches:
F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8 (printed 1-based; the lists are 0-based).

:func:`pipeline_steps` adds the point-to-point transfers exactly where Megatron-LM's
``forward_backward_pipelining_without_interleaving`` (1F1B) or a plain GPipe loop issues them,
grouped per ``p2p_communication._communicate`` call: a group is issued together and waited on
together. Inside a group the transfers are ordered as Megatron's ``_p2p_ops`` does (even stages
send first, odd stages receive first), which makes the k-th group of a stage with its next stage
match the k-th group of that stage with its previous one -- no deadlock with blocking semantics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lumos_core.errors import ConfigError

__all__ = [
    "P2P",
    "SCHEDULES",
    "Step",
    "format_schedule",
    "interleaved_order",
    "interleaved_steps",
    "pipeline_steps",
    "schedule",
    "warmup_count",
]

SCHEDULES = ("1f1b", "gpipe")

Phase = Literal["F", "B"]


@dataclass(frozen=True, slots=True)
class P2P:
    """One point-to-point transfer of a stage: its direction, peer stage and payload."""

    op: Literal["send", "recv"]
    peer: Literal["prev", "next"]
    payload: Literal["act", "grad"]  # activations flow forward, gradients backward
    microbatch: int


@dataclass(frozen=True, slots=True)
class Step:
    """A compute step (``phase`` "F" or "B" of ``microbatch``) or a group of p2p transfers."""

    phase: Literal["F", "B", "P2P"]
    microbatch: int = -1
    transfers: tuple[P2P, ...] = ()
    chunk: int = 0  # the model chunk (virtual stage) of an interleaved schedule's F or B


def _check(kind: str, stage: int, n_stages: int, n_microbatches: int) -> None:
    if kind not in SCHEDULES:
        raise ConfigError(f"unknown pipeline schedule {kind!r}: use one of {', '.join(SCHEDULES)}")
    if n_stages < 1:
        raise ConfigError(f"pipeline stages must be >= 1, got {n_stages}")
    if not 0 <= stage < n_stages:
        raise ConfigError(f"stage {stage} is outside 0..{n_stages - 1}")
    if n_microbatches < 1:
        raise ConfigError(f"microbatches must be >= 1, got {n_microbatches}")


def warmup_count(kind: str, stage: int, n_stages: int, n_microbatches: int) -> int:
    """Forwards a stage runs before its first backward: min(P - s - 1, m) for 1F1B, m for GPipe."""
    _check(kind, stage, n_stages, n_microbatches)
    if kind == "gpipe":
        return n_microbatches
    return min(n_stages - stage - 1, n_microbatches)


def schedule(kind: str, stage: int, n_stages: int, n_microbatches: int) -> list[tuple[Phase, int]]:
    """Compute order of one stage as ("F"|"B", microbatch) pairs, microbatches 0-based.

    1F1B: warm-up of min(P - s - 1, m) forwards, then alternating F/B, then the cool-down backwards.
    GPipe: all forwards, then all backwards.
    """
    return [
        (s.phase, s.microbatch)
        for s in pipeline_steps(kind, stage, n_stages, n_microbatches)
        if s.phase != "P2P"
    ]  # type: ignore[misc]


def format_schedule(steps: list[tuple[Phase, int]], one_based: bool = True) -> str:
    """ "F1 F2 B1 ..." as the paper prints schedules."""
    off = 1 if one_based else 0
    return " ".join(f"{p}{m + off}" for p, m in steps)


def _ordered(
    stage: int, send_next: P2P | None, recv_prev: P2P | None, send_prev: P2P | None, recv_next: P2P | None
) -> tuple[P2P, ...]:
    # Megatron-LM p2p_communication._p2p_ops: even ranks send first, odd ranks receive first.
    if stage % 2 == 0:
        order = (send_next, recv_prev, send_prev, recv_next)
    else:
        order = (recv_prev, send_next, recv_next, send_prev)
    return tuple(t for t in order if t is not None)


def pipeline_steps(kind: str, stage: int, n_stages: int, n_microbatches: int) -> list[Step]:
    """The compute steps and p2p groups of one stage in issue order (see the module doc)."""
    _check(kind, stage, n_stages, n_microbatches)
    first = stage == 0
    last = stage == n_stages - 1
    m = n_microbatches
    steps: list[Step] = []

    def comm(
        send_next: P2P | None = None,
        recv_prev: P2P | None = None,
        send_prev: P2P | None = None,
        recv_next: P2P | None = None,
    ) -> None:
        group = _ordered(stage, send_next, recv_prev, send_prev, recv_next)
        if group:
            steps.append(Step("P2P", transfers=group))

    def recv_forward(mb: int) -> None:
        if not first:
            comm(recv_prev=P2P("recv", "prev", "act", mb))

    def send_forward(mb: int) -> None:
        if not last:
            comm(send_next=P2P("send", "next", "act", mb))

    def recv_backward(mb: int) -> None:
        if not last:
            comm(recv_next=P2P("recv", "next", "grad", mb))

    def send_backward(mb: int) -> None:
        if not first:
            comm(send_prev=P2P("send", "prev", "grad", mb))

    if kind == "gpipe":
        for mb in range(m):
            recv_forward(mb)
            steps.append(Step("F", mb))
            send_forward(mb)
        for mb in range(m):
            recv_backward(mb)
            steps.append(Step("B", mb))
            send_backward(mb)
        return steps

    warmup = min(n_stages - stage - 1, m)
    remaining = m - warmup
    for mb in range(warmup):
        recv_forward(mb)
        steps.append(Step("F", mb))
        send_forward(mb)
    if remaining > 0:
        recv_forward(warmup)
    for i in range(remaining):
        fwd_mb = warmup + i
        steps.append(Step("F", fwd_mb))
        if not last:  # send_forward_recv_backward
            comm(send_next=P2P("send", "next", "act", fwd_mb), recv_next=P2P("recv", "next", "grad", i))
        steps.append(Step("B", i))
        if i == remaining - 1:
            send_backward(i)
        elif not first:  # send_backward_recv_forward
            comm(send_prev=P2P("send", "prev", "grad", i), recv_prev=P2P("recv", "prev", "act", fwd_mb + 1))
    for i in range(warmup):
        mb = remaining + i
        recv_backward(mb)
        steps.append(Step("B", mb))
        send_backward(mb)
    return steps


def _interleaved_warmup(stage: int, p: int, v: int, m: int) -> int:
    """Forwards before the first backward of interleaved 1F1B (Megatron-LM's num_warmup_microbatches)."""
    total = m * v
    if v == 1:
        return min(p - stage - 1, m)
    if m == p:
        return total
    return min((p - stage - 1) * 2 + (v - 1) * p, total)


def _virtual(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(microbatch, model chunk) of the k-th forward or backward of interleaved 1F1B."""
    group = k % (p * v)
    chunk = group // p if forward else v - 1 - group // p
    return (k // (p * v)) * p + k % p, chunk


def interleaved_order(
    stage: int, n_stages: int, n_chunks: int, n_microbatches: int
) -> list[tuple[Phase, int, int]]:
    """Compute order of one stage under Megatron-LM's interleaved 1F1B
    (``forward_backward_pipelining_with_interleaving``): ("F"|"B", microbatch, model chunk).

    Each rank holds ``n_chunks`` model chunks (virtual stages; chunk c of stage s is model piece
    c * P + s). Microbatches run in groups of P per chunk; the warm-up is (P - s - 1) * 2 + (v - 1)
    * P forwards, so the pipeline bubble shrinks to (P - 1) / (v * m) of the ideal time. With one
    chunk this is plain 1F1B. Needs m to be a multiple of P (as Megatron does).
    """
    _check("1f1b", stage, n_stages, n_microbatches)
    p, v, m = n_stages, n_chunks, n_microbatches
    if v < 1:
        raise ConfigError(f"virtual stages must be >= 1, got {v}")
    if v > 1 and m % p:
        raise ConfigError(f"interleaved 1F1B needs microbatches ({m}) to be a multiple of stages ({p})")
    total = m * v
    warmup = _interleaved_warmup(stage, p, v, m)

    def virtual(k: int, forward: bool) -> tuple[int, int]:
        return _virtual(k, p, v, forward)

    order: list[tuple[Phase, int, int]] = []
    for k in range(warmup):
        order.append(("F", *virtual(k, True)))
    for i in range(total - warmup):
        order.append(("F", *virtual(warmup + i, True)))
        order.append(("B", *virtual(i, False)))
    for k in range(total - warmup, total):
        order.append(("B", *virtual(k, False)))
    return order


def interleaved_steps(stage: int, n_stages: int, n_chunks: int, n_microbatches: int) -> list[Step]:
    """The compute steps (with their model chunk) and p2p groups of one stage under interleaved
    1F1B, where Megatron-LM's ``forward_backward_pipelining_with_interleaving`` issues them (without
    ``overlap_p2p_comm``): after each warm-up forward one group sends its output on and receives
    the next forward's input; in the steady state one group after each forward + backward pair
    sends both results and receives the next pair's inputs; in the cool-down one group per
    backward. The stages form a ring: the last stage's chunk c feeds stage 0's chunk c + 1, so
    stage 0's "prev" is the last stage and the last stage's "next" is stage 0. The compute order
    is :func:`interleaved_order`'s. One chunk: plain 1F1B (:func:`pipeline_steps`)."""
    order = interleaved_order(stage, n_stages, n_chunks, n_microbatches)  # checks the arguments
    p, v = n_stages, n_chunks
    if v == 1:
        return pipeline_steps("1f1b", stage, p, n_microbatches)
    total = len(order) // 2
    warmup = _interleaved_warmup(stage, p, v, n_microbatches)
    first_stage, last_stage = stage == 0, stage == p - 1
    steps: list[Step] = []

    def f(k: int) -> tuple[int, int]:
        return _virtual(k, p, v, True)

    def b(k: int) -> tuple[int, int]:
        return _virtual(k, p, v, False)

    def comm(
        send: int | None = None,
        recv_prev: int | None = None,
        send_back: int | None = None,
        recv_next: int | None = None,
    ) -> None:
        """One group: the forward output of microbatch ``send`` to the next piece, the input of
        ``recv_prev`` from the previous one, the input gradient of ``send_back`` to the previous
        piece, the output gradient of ``recv_next`` from the next one (None: not in the group)."""
        group = _ordered(
            stage,
            P2P("send", "next", "act", send) if send is not None else None,
            P2P("recv", "prev", "act", recv_prev) if recv_prev is not None else None,
            P2P("send", "prev", "grad", send_back) if send_back is not None else None,
            P2P("recv", "next", "grad", recv_next) if recv_next is not None else None,
        )
        if group:
            steps.append(Step("P2P", transfers=group))

    def sends_on(k: int) -> int | None:  # forward k's output goes on unless it is the last piece
        mb, chunk = f(k)
        return None if last_stage and chunk == v - 1 else mb

    def sends_back(k: int) -> int | None:  # backward k's input gradient goes back unless piece 0
        mb, chunk = b(k)
        return None if first_stage and chunk == 0 else mb

    if not first_stage:
        comm(recv_prev=f(0)[0])
    for k in range(warmup):
        steps.append(Step("F", f(k)[0], chunk=f(k)[1]))
        recv = k + 1 < total and not (first_stage and f(k + 1)[1] == 0)
        nxt = f(k + 1)[0] if recv else None
        if k == warmup - 1 and warmup < total:
            comm(send=sends_on(k), recv_prev=nxt, recv_next=None if last_stage else b(0)[0])
        else:
            comm(send=sends_on(k), recv_prev=nxt)
    steady = total - warmup
    for i in range(steady):
        fk = warmup + i
        steps.append(Step("F", f(fk)[0], chunk=f(fk)[1]))
        steps.append(Step("B", b(i)[0], chunk=b(i)[1]))
        # what the peers send next: stage 0 gets no input for a chunk-0 forward (it reads data),
        # the last stage no gradient for its last chunk (it computes the loss)
        recv = not (first_stage and f(fk - (p - 1))[1] == v - 1) if first_stage else True
        recv_grad = not (last_stage and b(i - (p - 1))[1] == 0) if last_stage else True
        if i == steady - 1:
            recv = False
        comm(
            send=sends_on(fk),
            recv_prev=f(fk + 1)[0] if recv else None,
            send_back=sends_back(i),
            recv_next=b(i + 1)[0] if recv_grad else None,
        )
    if warmup == total and not (last_stage and b(0)[1] == v - 1):
        comm(recv_next=b(0)[0])
    for k in range(steady, total):
        steps.append(Step("B", b(k)[0], chunk=b(k)[1]))
        recv_grad = k + 1 < total and not (last_stage and b(k + 1)[1] == v - 1)
        comm(send_back=sends_back(k), recv_next=b(k + 1)[0] if recv_grad else None)
    return steps
