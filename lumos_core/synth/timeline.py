"""The causal simulation that gives every event of a synthetic rank its time.

:func:`run_rank` interprets a rank's :class:`~.plan.StagePlan` in program order and assigns
integer-nanosecond times with the rules a dependency-driven replay also uses:

* CPU work on a thread runs in order, separated by (jittered) Python gaps; a kernel is launched
  from inside its ``cpu_op`` and starts at ``max(launch end + launch latency, end of the previous
  kernel on its stream, events its stream waits for)``;
* ``cudaEventRecord`` captures the end of the last kernel queued on a stream and
  ``cudaStreamWaitEvent`` makes another stream wait for it (PyTorch's NCCL stream handshake:
  the NCCL stream waits for the compute stream before a collective, the compute stream waits for
  the NCCL stream on ``work.wait()``);
* a collective instance (or a send/recv pair) *ends at the same time on all participants*:
  ``max(ready of every participant) + duration``, each rank's kernel starting at its own ready
  time (early ranks show longer kernels, as in real NCCL traces);
* ``cudaStreamSynchronize`` blocks its thread until the stream is idle; the autograd thread starts
  a backward step after the main thread handed off, and the main thread resumes after it.

Because collective end times couple ranks, the job is simulated twice. Pass 1
(:func:`simulate_collectives`) runs all ranks' generators in lock step, without emitting events:
a generator yields the key of an instance whose end it needs but which not every participant has
reached yet, and is resumed once it resolves. Only instance end times are kept (a few per layer
and microbatch). Pass 2 re-runs one rank at a time with the table complete, emitting its events
(:class:`.emit.Emitter`); the arithmetic is identical, so both passes agree exactly. Memory is
bounded by the instance table, never by the number of events.

Randomness: each rank draws CPU and GPU jitter from its own ``random.Random`` seeded by
(seed, rank), in program order, so passes 1 and 2 draw identical sequences; a collective
instance's duration jitter is a hash of (seed, instance key), the same on all participants.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from lumos_core.errors import LumosError
from lumos_core.synth.plan import (
    N_STREAMS,
    OP_BEGIN,
    OP_COLL,
    OP_END,
    OP_HANDOFF,
    OP_KERNEL,
    OP_MEMCPY,
    OP_P2P,
    OP_STEP_BEGIN,
    OP_STEP_END,
    OP_SYNC,
    OP_WAIT,
    ROLE_PREV,
    THREAD_MAIN,
)
from lumos_core.synth.rank_setup import RankSetup
from lumos_core.trace.model import CollectiveKind

if TYPE_CHECKING:  # emit imports this module
    from lumos_core.synth.emit import Emitter

__all__ = ["InstanceTable", "RankSetup", "run_rank", "simulate_collectives", "unit_hash"]

MASK64 = (1 << 64) - 1

# Nominal CPU-side costs (ns), before jitter. Python between two ops of Megatron's forward is a few
# µs; the autograd engine's C++ loop is faster. Launch calls take ~4-8 µs, as in real H100 traces.
GAP_NS = (4_000, 1_500)  # per thread: main, autograd
LAUNCH_NS = 4_500
NCCL_LAUNCH_NS = 7_000
LAUNCH_LATENCY_NS = 1_000  # launch call end -> earliest kernel start
HANDOFF_NS = 12_000  # main <-> autograd thread wake-up
STEP_OVERHEAD_NS = 30_000  # prof.step() and the training loop between iterations
HICCUP_PROBABILITY = 0.002  # occasional long CPU stalls (GC, page faults) of 20-300 µs
COLL_JITTER = 0.05  # +-5% per collective instance
GPU_JITTER = 0.03  # +-3% per kernel
GPU_SPEED_SPREAD = 0.01  # +-1% per GPU (silicon and clock variation)


def unit_hash(*values: int) -> float:
    """A deterministic uniform number in [0, 1) from integers (splitmix64 over the values)."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & MASK64)) & MASK64
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        x = z ^ (z >> 31)
    return (x >> 11) / float(1 << 53)


class InstanceTable:
    """End times of collective instances, filled by pass 1 and read by pass 2.

    Keys: ``pg_index << 32 | seq`` for collectives (PyTorch's per-group sequence number) and
    ``1 << 62 | src << 42 | dst << 21 | seq`` for the seq-th transfer from rank src to rank dst
    (NCCL pairs sends and receives per peer and direction, in order).
    """

    __slots__ = ("arrivals", "expected", "n_arrived", "resolved", "woken")

    def __init__(self) -> None:
        self.resolved: dict[int, int] = {}
        self.arrivals: dict[int, list[int]] = {}
        self.woken: list[int] = []
        self.n_arrived = 0
        self.expected = 0

    def arrive(self, key: int, n: int, ready: int, dur: int) -> None:
        self.n_arrived += 1
        a = self.arrivals.get(key)
        if a is None:
            if n <= 1:
                self.resolved[key] = ready + dur
                self.woken.append(key)
                return
            self.arrivals[key] = [1, ready]
            return
        a[0] += 1
        if ready > a[1]:
            a[1] = ready
        if a[0] >= n:
            self.resolved[key] = a[1] + dur
            del self.arrivals[key]
            self.woken.append(key)


def p2p_key(src: int, dst: int, seq: int) -> int:
    return (1 << 62) | (src << 42) | (dst << 21) | seq


def run_rank(setup: RankSetup, table: InstanceTable, em: Emitter | None = None) -> Generator[int, None, None]:
    """Interpret one rank's plan for all iterations; yields instance keys it must wait for.

    With ``em`` (an :class:`.emit.Emitter`) every event is emitted; then the table must be
    complete (pass 2) and the generator never yields.
    """
    plan = setup.plan
    ops = plan.ops
    kernels = plan.kernels
    comms = plan.comms
    comm_ns = setup.comm_ns
    resolved = table.resolved
    rank = setup.rank
    seed = setup.seed
    speed = setup.gpu_speed
    rng = random.Random((seed & 0xFFFFFFFF) << 32 | rank)
    rand = rng.random

    clock = [setup.start_ns, setup.start_ns]  # per thread
    avail = [0] * N_STREAMS  # per stream: end of the last kernel queued on it
    pend = [0] * N_STREAMS  # per stream: unresolved instance key of its last kernel, 0 if none
    seqs = [0, 0]  # per TP, DP group
    # per peer (pipeline prev, next; CP ring next, prev): [receives, sends]
    pseqs = [[0, 0], [0, 0], [0, 0], [0, 0]]
    if setup.peers[0] == setup.peers[1] >= 0:  # a two-stage ring (interleaved): one peer both ways,
        pseqs[1] = pseqs[0]  # and NCCL pairs its sends and receives in order whichever the stream
    stacks: tuple[list, list] = ([], [])

    for iteration in range(setup.iterations):
        handles: dict[int, tuple] = {}
        step_start = 0
        gpu_first = -1
        gpu_last = 0
        for op in ops:
            code = op[0]
            if code == OP_KERNEL:
                th = op[1]
                d = kernels[op[2]]
                g = rand()
                j = 0.8 + 0.4 * rand()
                gap = GAP_NS[th] * (0.6 + 0.8 * g)
                if g < HICCUP_PROBABILITY:
                    gap += 20_000 + 280_000 * g / HICCUP_PROBABILITY
                t0 = clock[th] + int(gap)
                l0 = t0 + int(d.cpu_ns * 0.6 * j)
                l1 = l0 + int(LAUNCH_NS * j)
                t1 = l1 + int(d.cpu_ns * 0.4 * j)
                start = l1 + LAUNCH_LATENCY_NS
                if avail[0] > start:
                    start = avail[0]
                end = start + int(d.gpu_ns * speed * (1.0 - GPU_JITTER + 2 * GPU_JITTER * rand())) + 1
                avail[0] = end
                clock[th] = t1
                if gpu_first < 0:
                    gpu_first = start
                gpu_last = end
                if em is not None:
                    em.compute(th, d, t0, t1, l0, l1, start, end)

            elif code in (OP_COLL, OP_P2P):
                th = op[1]
                if code == OP_COLL:
                    items = ((op[2], op[3]),)
                else:
                    items = tuple((cd, -2) for cd in op[2])
                issued = []
                for cd, handle in items:
                    c = comms[cd]
                    role = c.role
                    s = role + 1
                    if role < ROLE_PREV:
                        seqs[role] += 1
                        key = setup.group_index[role] << 32 | seqs[role]
                        n = setup.group_size[role]
                    else:
                        p = role - ROLE_PREV
                        sending = c.kind == CollectiveKind.SEND
                        pseqs[p][sending] += 1
                        src, dst = (rank, setup.peers[p]) if sending else (setup.peers[p], rank)
                        key = p2p_key(src, dst, pseqs[p][sending])
                        n = 2
                    j = 0.8 + 0.4 * rand()
                    t0 = clock[th] + int(GAP_NS[th] * (0.6 + 0.8 * rand()))
                    a0 = t0 + int(3_000 * j)
                    r0 = a0 + int(2_500 * j)
                    r1 = r0 + int(1_500 * j)
                    ev = avail[0]  # cudaEventRecord on the compute stream
                    w0 = r1 + int(800 * j)
                    w1 = w0 + int(1_200 * j)
                    k = pend[s]
                    if k:
                        e = resolved.get(k)
                        if e is None:
                            yield k
                            e = resolved[k]
                        avail[s] = e
                        pend[s] = 0
                    if ev > avail[s]:  # cudaStreamWaitEvent: the NCCL stream waits for compute
                        avail[s] = ev
                    l0 = w1 + int(5_000 * j)
                    l1 = l0 + int(NCCL_LAUNCH_NS * j)
                    ready = l1 + LAUNCH_LATENCY_NS
                    if avail[s] > ready:
                        ready = avail[s]
                    if key not in resolved:
                        dur = int(comm_ns[cd] * (1.0 - COLL_JITTER + 2 * COLL_JITTER * unit_hash(seed, key)))
                        table.arrive(key, n, ready, dur)
                    pend[s] = key
                    q0 = l1 + int(1_500 * j)
                    q1 = q0 + int(1_000 * j)
                    a1 = q1 + int(800 * j)
                    t1 = a1 + int(1_200 * j)
                    clock[th] = t1
                    issued.append((key, s, cd, handle, ready, t0, t1, a0, a1, r0, r1, w0, w1, l0, l1, q0, q1))
                    if handle >= 0:
                        handles[handle] = (key, s)
                for key, s, cd, handle, ready, t0, t1, a0, a1, r0, r1, w0, w1, l0, l1, q0, q1 in issued:
                    wait = handle < 0
                    if wait:  # work.wait(): the compute stream waits for the NCCL stream
                        x0 = clock[th] + int(1_500 * (0.8 + 0.4 * rand()))
                        x1 = x0 + 1_200
                        e = resolved.get(key)
                        if e is None:
                            yield key
                            e = resolved[key]
                        if e > avail[0]:
                            avail[0] = e
                        if pend[s] == key:
                            avail[s] = e
                            pend[s] = 0
                        clock[th] = x1
                    else:
                        x0 = x1 = 0
                    if em is not None:
                        em.collective(
                            th,
                            comms[cd],
                            setup,
                            key,
                            s,
                            cd,
                            t0,
                            t1,
                            a0,
                            a1,
                            r0,
                            r1,
                            w0,
                            w1,
                            l0,
                            l1,
                            ready,
                            resolved[key],
                            q0,
                            q1,
                            x0,
                            x1,
                            wait,
                            handle,
                        )

            elif code == OP_WAIT:
                th = op[1]
                for handle in op[2]:
                    key, s = handles[handle]
                    x0 = clock[th] + int(1_500 * (0.8 + 0.4 * rand()))
                    x1 = x0 + 1_200
                    e = resolved.get(key)
                    if e is None:
                        yield key
                        e = resolved[key]
                    if e > avail[0]:
                        avail[0] = e
                    if pend[s] == key:
                        avail[s] = e
                        pend[s] = 0
                    clock[th] = x1
                    if em is not None:
                        em.wait_handle(th, handle, s, x0, x1)

            elif code == OP_BEGIN:
                th = op[1]
                t = clock[th] + int(800 * (0.8 + 0.4 * rand()))
                stacks[th].append((op[2], op[3], t, em.next_ext() if em is not None else 0))
                clock[th] = t + 700

            elif code == OP_END:
                th = op[1]
                t = clock[th] + int(600 * (0.8 + 0.4 * rand()))
                name, cat, t0, ext = stacks[th].pop()
                clock[th] = t
                if em is not None:
                    em.range(th, name, cat, t0, t, ext)

            elif code == OP_HANDOFF:
                t = clock[op[1]] + int(HANDOFF_NS * (0.8 + 0.4 * rand()))
                if t > clock[op[2]]:
                    clock[op[2]] = t

            elif code == OP_MEMCPY:
                th = op[1]
                t0 = clock[th] + int(GAP_NS[th] * (0.6 + 0.8 * rand()))
                l1 = t0 + int(LAUNCH_NS * 2 * (0.8 + 0.4 * rand()))
                start = max(l1 + LAUNCH_LATENCY_NS, avail[0])
                end = start + 1_400 + op[2] // 10
                avail[0] = end
                gpu_last = end
                clock[th] = l1
                if em is not None:
                    em.memcpy(th, op[2], t0, l1, start, end)

            elif code == OP_SYNC:
                th = op[1]
                t0 = clock[th] + int(GAP_NS[th] * (0.6 + 0.8 * rand()))
                s0 = t0 + 800
                s1 = max(s0 + 500, avail[0])
                t1 = s1 + int(1_500 * (0.8 + 0.4 * rand()))
                clock[th] = t1
                if em is not None:
                    em.stream_sync(th, t0, t1, s0, s1)

            elif code == OP_STEP_BEGIN:
                step_start = clock[THREAD_MAIN] + 1_000
                if em is not None:
                    em.step_begin(iteration)
                clock[THREAD_MAIN] = step_start + 2_000
                gpu_first = -1

            elif code == OP_STEP_END:
                t = clock[THREAD_MAIN] + 1_000
                if em is not None:
                    em.step_end(iteration, step_start, t, gpu_first, gpu_last)
                t += int(STEP_OVERHEAD_NS * (0.8 + 0.4 * rand()))
                clock[THREAD_MAIN] = t
                if clock[1] < t:
                    clock[1] = t
        if em is not None:
            em.flush()


def simulate_collectives(
    setups: Callable[[int], RankSetup],
    world_size: int,
    table: InstanceTable,
    progress: Callable[[float, str], None] | None = None,
) -> InstanceTable:
    """Pass 1: run every rank in lock step and fill ``table`` with all instance end times."""
    gens: list[Generator[int, None, None] | None] = [run_rank(setups(r), table) for r in range(world_size)]
    ready: deque[int] = deque(range(world_size))
    waiting: dict[int, list[int]] = {}
    finished = 0
    steps = 0
    woken = table.woken
    while ready:
        r = ready.popleft()
        gen = gens[r]
        assert gen is not None
        try:
            key = next(gen)
        except StopIteration:
            gens[r] = None
            finished += 1
        else:
            waiting.setdefault(key, []).append(r)
        if woken:
            for k in woken:
                ready.extend(waiting.pop(k, ()))
            woken.clear()
        steps += 1
        if progress is not None and steps % 4096 == 0:
            progress(table.n_arrived / max(1, table.expected), "simulating collectives")
    if finished < world_size:
        stuck = sorted(waiting.items())[:5]
        raise LumosError(
            f"synthetic job deadlocked: {world_size - finished} ranks wait on instances "
            + ", ".join(f"{k:#x} (ranks {v[:4]})" for k, v in stuck)
        )
    return table
