"""The algorithms and protocols NCCL can run a collective with, each as (latency, transfer time).

Per collective kind and group shape this lists every (algorithm, protocol) NCCL would consider,
with the latency it pays (base + hops x per-hop latency, hops growing with the group: a ring
all-reduce makes 2(n-1) hops, 2(nodes-1) of them across the network; a tree 2 log2(nodes)
network hops) and the time its bytes take at the bandwidth ceiling of the links it uses:

* ring: NVLink inside a node; across nodes the ring leaves every node through the NICs of the
  group's GPUs there (8 NICs for a full DGX node, one for a group with one GPU per node).
* tree (all-reduce across nodes): chains inside nodes, a double binary tree across them; half the
  bus bandwidth of a ring in NCCL's model, but log2(nodes) network hops instead of nodes.
* NVLS (all-reduce, NVSwitch with SHARP): the switch reduces; each GPU moves ~(n+1)/n x the
  message, so its algorithm bandwidth is nvls_bw x n/(n+1), independent of the bus factor.
* NVLS-tree (all-reduce across NVLS nodes): NVLS inside nodes, a tree across them.
* PAT (all-gather/reduce-scatter with one GPU per node): log2(n) network hops at ring bandwidth.
* p2p (send/recv, all-to-all): direct copies, NVLink or the GPU's share of the NICs.

Protocols: LL (8-byte lines, half of them flags: low latency, bandwidth capped), LL128 (~92 % of
Simple's bandwidth, more latency), Simple (full bandwidth, pipelined in large chunks so it ramps
up with size, see :mod:`lumos_core.perf.nccl.params`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lumos_core.perf.nccl.params import (
    BASE_LATENCY_US,
    NET_OVERHEAD_US,
    NETWORK_HOP_US,
    NVLINK_HOP_US,
    CommParams,
)
from lumos_core.perf.nccl.topology import GroupShape
from lumos_core.trace.model import CollectiveKind

__all__ = ["Candidate", "candidates", "simple_ramp"]

_REDUCE_KINDS = (CollectiveKind.ALL_REDUCE, CollectiveKind.UNKNOWN, CollectiveKind.BARRIER)
_GATHER_KINDS = (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
_ROOTED_KINDS = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_P2P_KINDS = (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to run a collective: seconds of latency plus seconds of transfer."""

    algorithm: str
    protocol: str
    latency: float
    transfer: float

    @property
    def time(self) -> float:
        return self.latency + self.transfer


def simple_ramp(size_bytes: float, ramp_bytes: float) -> float:
    """Fraction of the bandwidth ceiling the Simple protocol reaches for a message of this size."""
    if size_bytes <= 0 or ramp_bytes <= 0:
        return 1.0
    return 1.0 / (1.0 + math.sqrt(ramp_bytes / size_bytes))


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


# NCCL drives a point-to-point transfer over a couple of channels per peer, not the 16+ of a ring
# collective, so its Simple pipeline fills after about an eighth of the bytes (an assumption: the
# published data only covers all-reduce).
P2P_RAMP_SHARE = 1 / 8


def _protocol_bw(
    simple_bw: float, protocol: str, p: CommParams, size: float, per_node: int, ramp_share: float = 1.0
) -> float:
    if protocol == "Simple":
        return simple_bw * simple_ramp(size, p.ramp_bytes * ramp_share)
    if protocol == "LL128":
        return simple_bw * (0.92 if per_node >= 2 else 0.7)
    return min(p.ll_max_bw(), 0.5 * simple_bw)  # LL


def _ring_latency(kind: CollectiveKind, shape: GroupShape, protocol: str) -> float:
    """µs: NCCL's ring latency, nsteps hops of which the node-crossing ones pay network latency."""
    n, nodes = shape.ranks, shape.nodes
    if kind in _REDUCE_KINDS:
        steps, inter = 2 * (n - 1), 2 * (nodes - 1)
    else:
        steps, inter = n - 1, nodes - 1
    intra_hop = NVLINK_HOP_US["ring"][protocol]
    if nodes > 1:
        intra_hop = max(intra_hop, NET_OVERHEAD_US[protocol])
    return (
        BASE_LATENCY_US["ring"][protocol]
        + (steps - inter) * intra_hop
        + inter * NETWORK_HOP_US["ring"][protocol]
    )


def candidates(kind: CollectiveKind, size: float, shape: GroupShape, p: CommParams) -> list[Candidate]:
    """Every (algorithm, protocol) for ``kind`` of ``size`` bytes (NCCL-tests convention) on ``shape``."""
    n, nodes, ppn = shape.ranks, shape.nodes, shape.per_node
    lat_scale = p.latency_scale(nodes) * 1e-6
    out: list[Candidate] = []
    if kind in _P2P_KINDS or kind == CollectiveKind.ALL_TO_ALL:
        return _p2p(kind, size, shape, p, lat_scale)
    ring_bw = p.ring_busbw(nodes, ppn)
    if kind in _REDUCE_KINDS:
        factor = 2.0 * (n - 1) / n
    elif kind in _GATHER_KINDS:
        factor = (n - 1) / n
    else:
        factor = 1.0
    for proto in ("LL", "LL128", "Simple"):
        bw = _protocol_bw(ring_bw, proto, p, size, ppn)
        out.append(
            Candidate("ring", proto, _ring_latency(kind, shape, proto) * lat_scale, size * factor / bw)
        )
    if kind in _REDUCE_KINDS and nodes > 1:
        # NCCL's tree: ~0.9 of the ring's bus bandwidth, algorithm bandwidth half of that.
        for proto, extra in (("LL", 1 / 3.8), ("LL128", 0.915), ("Simple", 1.0)):
            bw = 0.5 * 0.9 * ring_bw * extra
            if proto == "Simple":
                bw *= simple_ramp(size, p.ramp_bytes)
            elif proto == "LL":
                bw = min(bw, 0.5 * p.ll_max_bw())
            lat = BASE_LATENCY_US["tree"][proto] + 2 * (
                (ppn - 1) * NVLINK_HOP_US["tree"][proto] + _log2(nodes) * NETWORK_HOP_US["tree"][proto]
            )
            out.append(Candidate("tree", proto, lat * lat_scale, size / bw))
    if kind in _REDUCE_KINDS and p.nvls and ppn >= 2:
        nvls = p.nvls_bw() * ppn / (ppn + 1) * simple_ramp(size, p.ramp_bytes)
        if nodes == 1:
            lat = NVLINK_HOP_US["nvls"]["Simple"]
            out.append(Candidate("nvls", "Simple", lat * lat_scale, size / nvls))
        else:
            # NVLS inside nodes, a tree across them: a node exchanges the whole reduced message
            # with one peer (2 nodes) or up and down a tree (2x, more nodes); NCCL's tree pattern
            # discount (0.85) for the imperfect overlap of the two stages.
            net = p.node_network_bw(ppn) / (1.0 if nodes == 2 else 2.0) * simple_ramp(size, p.ramp_bytes)
            lat = (
                NVLINK_HOP_US["nvls_tree"]["Simple"]
                + 2 * _log2(nodes) * NETWORK_HOP_US["nvls_tree"]["Simple"]
            )
            out.append(Candidate("nvls_tree", "Simple", lat * lat_scale, size / (0.85 * min(nvls, net))))
    if kind in _GATHER_KINDS and nodes > 1 and ppn == 1:
        bw = ring_bw * simple_ramp(size, p.ramp_bytes)
        lat = BASE_LATENCY_US["pat"]["Simple"] + _log2(n) * NETWORK_HOP_US["pat"]["Simple"]
        out.append(Candidate("pat", "Simple", lat * lat_scale, size * factor / bw))
    return out


def _p2p(
    kind: CollectiveKind, size: float, shape: GroupShape, p: CommParams, lat_scale: float
) -> list[Candidate]:
    """Send/recv moves the message to one peer; all-to-all sends (n-1)/n of it, the part for peers
    on other nodes through the GPU's share of the NICs, concurrently with the NVLink part."""
    n, nodes, ppn = shape.ranks, shape.nodes, shape.per_node
    hop = NETWORK_HOP_US if nodes > 1 else NVLINK_HOP_US
    out = []
    for proto in ("LL", "Simple"):
        if kind == CollectiveKind.ALL_TO_ALL:
            intra_bytes = size * (ppn - 1) / n
            inter_bytes = size * (n - ppn) / n
        elif nodes > 1:
            intra_bytes, inter_bytes = 0.0, size
        else:
            intra_bytes, inter_bytes = size, 0.0
        t = 0.0
        if intra_bytes > 0:
            t = max(t, intra_bytes / _protocol_bw(p.p2p_bw(), proto, p, intra_bytes, 2, P2P_RAMP_SHARE))
        if inter_bytes > 0:
            bw = p.gpu_network_bw(ppn)
            t = max(t, inter_bytes / _protocol_bw(bw, proto, p, inter_bytes, 2, P2P_RAMP_SHARE))
        lat = BASE_LATENCY_US["p2p"][proto] + hop["p2p"][proto]
        out.append(Candidate("p2p", proto, lat * lat_scale, t))
    return out
