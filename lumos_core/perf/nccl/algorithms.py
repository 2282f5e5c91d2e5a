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
    PAT_BW_SHARE,
    PAT_HOP_SHARE,
    PAT_PER_RANK_US,
    RING_CHANNELS,
    TREE_DIP,
    CommParams,
)
from lumos_core.perf.nccl.topology import GroupShape
from lumos_core.trace.model import CollectiveKind

__all__ = ["Candidate", "candidates", "simple_ramp", "tree_dip"]

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


def tree_dip(size_bytes: float, protocol: str) -> float:
    """Fraction of its bandwidth model a tree reaches at this size (NCCL's mid-size correction,
    linear in log2(size) between its measured points)."""
    knots = TREE_DIP[protocol]
    x = math.log2(max(size_bytes, 1.0))
    if x <= knots[0][0] or x >= knots[-1][0]:
        return 1.0 if x >= knots[-1][0] else knots[0][1]
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return 1.0


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


# NCCL drives a point-to-point transfer over a couple of channels per peer, not the 16+ of a ring
# collective, so its Simple pipeline fills after about an eighth of the bytes (an assumption: the
# published data only covers all-reduce).
P2P_RAMP_SHARE = 1 / 8


def _protocol_bw(
    simple_bw: float,
    protocol: str,
    p: CommParams,
    size: float,
    per_node: int,
    ramp_share: float = 1.0,
    nodes: int = 1,
) -> float:
    if protocol == "Simple":
        return simple_bw * simple_ramp(size, p.ramp_bytes * ramp_share)
    if protocol == "LL128":
        return simple_bw * (0.92 if per_node >= 2 else 0.7)
    return min(p.ll_max_bw(nodes), 0.5 * simple_bw)  # LL


def _ring_latency(kind: CollectiveKind, shape: GroupShape, protocol: str) -> float:
    """µs: NCCL's ring latency, nsteps hops of which the node-crossing ones pay network latency.
    With one GPU per node nothing hides a hop's network latency: it costs a tree's (NCCL's tuner
    does the same)."""
    n, nodes = shape.ranks, shape.nodes
    if kind in _REDUCE_KINDS:
        steps, inter = 2 * (n - 1), 2 * (nodes - 1)
    else:
        steps, inter = n - 1, nodes - 1
    intra_hop = NVLINK_HOP_US["ring"][protocol]
    if nodes > 1:
        intra_hop = max(intra_hop, NET_OVERHEAD_US[protocol])
    net_hop = NETWORK_HOP_US["tree" if shape.per_node == 1 else "ring"][protocol]
    return BASE_LATENCY_US["ring"][protocol] + (steps - inter) * intra_hop + inter * net_hop


def candidates(kind: CollectiveKind, size: float, shape: GroupShape, p: CommParams) -> list[Candidate]:
    """Every (algorithm, protocol) for ``kind`` of ``size`` bytes (NCCL-tests convention) on ``shape``."""
    lat_scale = p.latency_scale(shape.nodes) * 1e-6
    if kind in _P2P_KINDS or kind == CollectiveKind.ALL_TO_ALL:
        return _p2p(kind, size, shape, p, lat_scale)
    out = _ring(kind, size, shape, p, lat_scale)
    if kind in _REDUCE_KINDS and shape.nodes > 1:
        out += _tree(size, shape, p, lat_scale)
    if kind in _REDUCE_KINDS and p.nvls and shape.per_node >= 2:
        out += _nvls(size, shape, p, lat_scale)
    if kind in _GATHER_KINDS and shape.nodes > 1 and shape.per_node == 1:
        out += _pat(size, shape, p, lat_scale)
    return out


def _factor(kind: CollectiveKind, n: int) -> float:
    if kind in _REDUCE_KINDS:
        return 2.0 * (n - 1) / n
    if kind in _GATHER_KINDS:
        return (n - 1) / n
    return 1.0


def _ring(
    kind: CollectiveKind, size: float, shape: GroupShape, p: CommParams, lat_scale: float
) -> list[Candidate]:
    """Ring: bus bandwidth of the slowest link class (NVLink, or the node's NICs), latency linear
    in the ring's steps."""
    n, nodes, ppn = shape.ranks, shape.nodes, shape.per_node
    ring_bw = p.ring_busbw(nodes, ppn)
    factor = _factor(kind, n)
    # NCCL's plateau: once each rank's share per channel fills a line, a multi-node Simple ring
    # all-reduce pays its per-step latency ~1.4x (the pipeline no longer hides the flushes).
    plateau = (
        p.ring_plateau if kind in _REDUCE_KINDS and nodes > 1 and size / (RING_CHANNELS * n) >= 64 else 1.0
    )
    out = []
    for proto in ("LL", "LL128", "Simple"):
        bw = _protocol_bw(ring_bw, proto, p, size, ppn, nodes=nodes)
        lat = _ring_latency(kind, shape, proto) * (plateau if proto == "Simple" else 1.0)
        out.append(Candidate("ring", proto, lat * lat_scale, size * factor / bw))
    return out


def _tree(size: float, shape: GroupShape, p: CommParams, lat_scale: float) -> list[Candidate]:
    """All-reduce across nodes: chains inside nodes, a double binary tree across them. ~0.9 of the
    ring's bus bandwidth, algorithm bandwidth half of it, 2 log2(nodes) network hops; short of
    that model at mid sizes (:func:`tree_dip`)."""
    ppn, nodes = shape.per_node, shape.nodes
    ring_bw = p.ring_busbw(nodes, ppn)
    out = []
    for proto, extra in (("LL", 1 / 3.8), ("LL128", 0.915), ("Simple", 1.0)):
        bw = 0.5 * 0.9 * ring_bw * extra
        if proto == "Simple":
            bw *= simple_ramp(size, p.ramp_bytes)
        elif proto == "LL":
            bw = min(bw, 0.5 * p.ll_max_bw(nodes))
        bw *= tree_dip(size, proto)
        lat = BASE_LATENCY_US["tree"][proto] + 2 * (
            (ppn - 1) * NVLINK_HOP_US["tree"][proto] + _log2(nodes) * NETWORK_HOP_US["tree"][proto]
        )
        out.append(Candidate("tree", proto, lat * lat_scale, size / bw))
    return out


def _nvls(size: float, shape: GroupShape, p: CommParams, lat_scale: float) -> list[Candidate]:
    """NVLink SHARP: the switch reduces; each GPU moves ~(n+1)/n x the message, so its algorithm
    bandwidth is nvls_bw x n/(n+1). Across nodes NVLS-tree: NVLS inside, a tree across."""
    ppn, nodes = shape.per_node, shape.nodes
    nvls = p.nvls_bw() * ppn / (ppn + 1) * simple_ramp(size, p.ramp_bytes)
    if nodes == 1:
        return [Candidate("nvls", "Simple", NVLINK_HOP_US["nvls"]["Simple"] * lat_scale, size / nvls)]
    # A node exchanges the whole reduced message with one peer (2 nodes) or up and down a tree
    # (2x, more nodes); NCCL's tree pattern discount (0.85) for the imperfect overlap of the stages.
    net = p.node_network_bw(ppn) / (1.0 if nodes == 2 else 2.0) * simple_ramp(size, p.ramp_bytes)
    lat = NVLINK_HOP_US["nvls_tree"]["Simple"] + 2 * _log2(nodes) * NETWORK_HOP_US["nvls_tree"]["Simple"]
    return [Candidate("nvls_tree", "Simple", lat * lat_scale, size / (0.85 * min(nvls, net)))]


def _pat(size: float, shape: GroupShape, p: CommParams, lat_scale: float) -> list[Candidate]:
    """PAT (all-gather/reduce-scatter with one GPU per node): log2(nodes) steps of a fraction of a
    network hop, a small per-rank term, ~0.75 of the ring's bandwidth."""
    n, nodes = shape.ranks, shape.nodes
    bw = PAT_BW_SHARE * p.ring_busbw(nodes, 1) * simple_ramp(size, p.ramp_bytes)
    lat = (
        BASE_LATENCY_US["pat"]["Simple"]
        + _log2(nodes) * NETWORK_HOP_US["pat"]["Simple"] * PAT_HOP_SHARE
        + n * PAT_PER_RANK_US
    )
    return [Candidate("pat", "Simple", lat * lat_scale, size * (n - 1) / n / bw)]


def _p2p(
    kind: CollectiveKind, size: float, shape: GroupShape, p: CommParams, lat_scale: float
) -> list[Candidate]:
    """Send/recv moves the message to one peer; all-to-all sends (n-1)/n of it, the part for peers
    on other nodes through the GPU's share of the NICs, concurrently with the NVLink part. An
    all-to-all also pays per peer: every remote peer's send and receive is a post by the GPU's
    network proxy (one thread), so its latency grows linearly with the peers off the node."""
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
            bw = _protocol_bw(p.p2p_bw(), proto, p, intra_bytes, 2, P2P_RAMP_SHARE)
            t = max(t, intra_bytes / bw)
        if inter_bytes > 0:
            # A send/recv talks to one peer node whatever the group's size.
            peers = nodes if kind == CollectiveKind.ALL_TO_ALL else 2
            bw = _protocol_bw(p.gpu_network_bw(ppn), proto, p, inter_bytes, 2, P2P_RAMP_SHARE, peers)
            t = max(t, inter_bytes / bw)
        lat = BASE_LATENCY_US["p2p"][proto] + hop["p2p"][proto]
        if kind == CollectiveKind.ALL_TO_ALL:
            # The proxy posts while earlier messages move: posting and transfer overlap, so the
            # time is the longer of the two (a post is a CPU action, the same for either protocol).
            posting = 2 * (n - ppn) * NET_OVERHEAD_US["LL"] + (ppn - 1) * NVLINK_HOP_US["p2p"][proto]
            lat += posting
            t = max(t - posting * lat_scale, 0.0)
        out.append(Candidate("p2p", proto, lat * lat_scale, t))
    return out
