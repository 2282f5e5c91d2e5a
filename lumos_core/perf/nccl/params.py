"""The parameters of the collective model: per-link bandwidth ceilings, per-step latencies, and the
corrections fitted to a trace. A :class:`CommParams` is plain, frozen, picklable data, so a
calibration (``lumos calibrate``, or a trace's own collectives) can be stored and reused.

Where the numbers come from:

* Bandwidth ceilings are line rates from the vendor datasheets (:mod:`lumos_core.perf.hardware`)
  times the efficiencies NCCL maintainers quote for them (``../shared/ground-truth/nccl``): a ring
  over NVLink reaches ~370 of H100's 450 GB/s (0.82); NVLink SHARP (NVLS) moves ~275 GB/s of
  algorithm bandwidth on 8 GPUs, i.e. 0.686 of the line rate per GPU once the n/(n+1) share of
  traffic that goes back through the switch is taken out; a 400 Gb/s NIC carries 46-48 of its
  50 GB/s (0.94).
* Per-step latencies (µs) follow the structure of NCCL's tuner (``src/graph/tuning.cc``): a base
  latency per (algorithm, protocol) and a per-hop latency per link class and protocol. The values
  are of the same order as NCCL's tables; they are modelling defaults, not measurements.
* ``ll_max_busbw_gbps``: the bus bandwidth the LL protocol saturates at (its flag polling limits
  it), per GPU generation, of the order NCCL's tuner assumes (Volta ~39, Ampere ~88, Hopper ~141).
  Across nodes the host's proxy, not the GPU, limits LL: NCCL's tuner assumes ~39 GB/s (Intel
  hosts) or ~22 (AMD) on 2 nodes and ~20 on more (``ll_max_busbw_2nodes_gbps``,
  ``ll_max_busbw_more_nodes_gbps``).
* Scale: a ring's latency grows with its steps (2(n-1) for all-reduce, n-1 for the others); a
  tree's with log2(nodes); PAT (all-gather/reduce-scatter, one GPU per node) with log2(nodes) plus
  a small per-rank term NCCL's own tuner keeps (``PAT_PER_RANK_US``); an all-to-all with its peers
  (every remote peer costs the proxy a post for its send and one for its receive,
  ``NET_OVERHEAD_US`` each). Trees fall short of their bandwidth model at mid sizes (NCCL corrects
  its tuner with a measured table, ``TREE_DIP``), and a multi-node ring
  all-reduce with Simple pays its per-step latency ~1.4x once the per-rank chunk fills a line per
  channel (NCCL's "plateau" correction, ``RING_PLATEAU``).
* ``ramp_bytes``: the Simple protocol moves data in large pipelined chunks (~512 KiB per channel
  and step, 16+ channels), so its bandwidth only approaches the ceiling for messages well above
  channels x chunk. NCCL corrects its own tree model for the same mid-size dip with a table
  (``treeCorrectionFactor``); here efficiency = 1 / (1 + sqrt(ramp_bytes / size)), one smooth
  curve whose single size is fitted to the published DGX H100 all-reduce sweep.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from lumos_core.perf.hardware import GpuProfile, get_gpu

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "CommParams",
    "params_for_gpu",
]

ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "pat", "p2p")
PROTOCOLS = ("LL", "LL128", "Simple")

# Base latency (µs) per algorithm and protocol: launch and set-up paid once per collective.
BASE_LATENCY_US: dict[str, dict[str, float]] = {
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"Simple": 0.0},
    "nvls_tree": {"Simple": 0.0},
    "pat": {"Simple": 8.4},
    "p2p": {"LL": 6.6, "Simple": 8.4},
}
# Latency (µs) per hop over NVLink inside a node, by algorithm and protocol. NVLS pays one
# switch round trip, which NCCL also models as one large constant.
NVLINK_HOP_US: dict[str, dict[str, float]] = {
    "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "nvls": {"Simple": 25.0},
    "nvls_tree": {"Simple": 25.0},
    "pat": {"Simple": 3.4},
    "p2p": {"LL": 0.6, "Simple": 3.4},
}
# Latency (µs) per hop across the network.
NETWORK_HOP_US: dict[str, dict[str, float]] = {
    "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
    "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    "nvls": {"Simple": 18.0},
    "nvls_tree": {"Simple": 14.0},
    "pat": {"Simple": 14.0},
    "p2p": {"LL": 2.7, "Simple": 14.0},
}
# A hop inside a node of a ring that also crosses nodes costs at least the proxy's network
# overhead (~1 µs, three round trips for Simple's flushes).
NET_OVERHEAD_US = {"LL": 1.0, "LL128": 1.0, "Simple": 3.0}

# Trees fall short of their bandwidth model at mid sizes. NCCL corrects its tuner with a measured
# factor per power-of-two size (``treeCorrectionFactor`` in src/graph/tuning.cc); these are its
# values as (log2 bytes, factor) knots, linear in log2(size) between them, the first knot's
# value below them and 1.0 beyond (NCCL applies none from 512 MiB).
# fmt: off
TREE_DIP: dict[str, tuple[tuple[float, float], ...]] = {
    "LL": ((9, 1.0), (10, 0.9), (11, 0.8), (12, 0.7), (15, 0.7), (16, 0.6), (17, 0.5), (18, 0.4),
           (19, 0.4), (20, 0.5), (21, 0.6), (22, 0.7), (23, 0.8), (24, 0.9), (25, 1.0)),
    "LL128": ((10, 1.0), (11, 0.9), (12, 0.8), (14, 0.8), (15, 0.7), (16, 0.6), (21, 0.6),
              (22, 0.8), (23, 0.9), (26, 0.9), (27, 1.0)),
    "Simple": ((6, 0.9), (12, 0.9), (13, 0.8), (14, 0.7), (15, 0.6), (16, 0.6), (17, 0.5),
               (20, 0.5), (21, 0.6), (22, 0.7), (23, 0.8), (24, 0.7), (25, 0.7), (26, 0.8),
               (27, 0.9), (28, 0.9), (29, 1.0)),
}
# fmt: on
# PAT: each step pays a fraction of a network hop (NCCL: interLat / 3.5), and a linear part per
# rank that NCCL's tuner still models (2.8 µs); it reaches ~0.75 of the ring's bandwidth.
PAT_HOP_SHARE = 1 / 3.5
PAT_PER_RANK_US = 2.8
PAT_BW_SHARE = 0.75
# Multi-node ring all-reduce on Simple: per-step latency x1.4 (x1.9 before Ampere) once each
# rank's share per channel is >= 64 B (NCCL's plateau correction), with this many ring channels.
RING_PLATEAU = {7: 1.9, 8: 1.4, 9: 1.4, 10: 1.4}
RING_CHANNELS = 16

# LL's bus-bandwidth ceiling (GB/s) by compute capability major: flag polling, not links, limits it.
_LL_MAX_BUSBW = {7: 39.0, 8: 87.7, 9: 141.0, 10: 141.0}
# Across nodes (2 nodes, more): the host CPU's vendor decides; DGX A100 and Azure ND A100 v4 have
# AMD EPYC hosts, DGX H100/H200/B200 Intel Xeon (NCCL's tuner: AMD 22.5/19.0, Intel 39.0/20.4).
_LL_MAX_BUSBW_NET = {8: (22.5, 19.0)}
_LL_MAX_BUSBW_NET_DEFAULT = (39.0, 20.4)


@dataclass(frozen=True, slots=True)
class CommParams:
    """Everything the collective model needs about one system; bandwidths in GB/s (1e9 B/s).

    The ``*_scale`` fields are the corrections a calibration fitted (1.0: the profile as is);
    ``source_intra``/``source_inter`` say where the scope's numbers come from.
    """

    gpu: str
    gpus_per_node: int
    nvlink_gbps: float  # per GPU, per direction, line rate
    network_gbps: float  # per NIC, line rate
    nics_per_node: int
    nvls: bool  # NVSwitch with NVLink SHARP (Hopper and later HGX/DGX systems)
    ring_efficiency: float = 0.82
    nvls_efficiency: float = 0.686
    network_efficiency: float = 0.94
    ll_max_busbw_gbps: float = 141.0
    ll_max_busbw_2nodes_gbps: float = _LL_MAX_BUSBW_NET_DEFAULT[0]
    ll_max_busbw_more_nodes_gbps: float = _LL_MAX_BUSBW_NET_DEFAULT[1]
    ring_plateau: float = 1.4
    ramp_bytes: float = 7.0e6
    latency_scale_intra: float = 1.0
    bandwidth_scale_intra: float = 1.0
    latency_scale_inter: float = 1.0
    bandwidth_scale_inter: float = 1.0
    source_intra: str = "profile"
    source_inter: str = "profile"

    # ----------------------------------------------------------------- link ceilings (B/s)

    def ring_busbw(self, nodes: int, per_node: int) -> float:
        """Simple-protocol ring bus bandwidth: NVLink inside a node; across nodes the ring's
        traffic leaves each node through as many NICs as the group has GPUs there."""
        intra = self.nvlink_gbps * 1e9 * self.ring_efficiency * self.bandwidth_scale_intra
        if nodes <= 1:
            return intra
        return min(intra, self.node_network_bw(per_node))

    def node_network_bw(self, per_node: int) -> float:
        """Bytes/s one node's share of a group can push across the network."""
        nics = max(1, min(per_node, self.nics_per_node))
        return nics * self.network_gbps * 1e9 * self.network_efficiency * self.bandwidth_scale_inter

    def gpu_network_bw(self, per_node: int) -> float:
        """Bytes/s one GPU can push across the network when ``per_node`` GPUs share the NICs."""
        return self.node_network_bw(per_node) / max(per_node, 1)

    def nvls_bw(self) -> float:
        """Per-GPU NVLS throughput before the n/(n+1) share (B/s)."""
        return self.nvlink_gbps * 1e9 * self.nvls_efficiency * self.bandwidth_scale_intra

    def p2p_bw(self) -> float:
        return self.nvlink_gbps * 1e9 * self.ring_efficiency * self.bandwidth_scale_intra

    def ll_max_bw(self, nodes: int = 1) -> float:
        """LL's bus-bandwidth ceiling: the GPU's flag polling inside a node, the host's proxy
        across nodes."""
        if nodes <= 1:
            return self.ll_max_busbw_gbps * 1e9 * self.bandwidth_scale_intra
        gbps = self.ll_max_busbw_2nodes_gbps if nodes == 2 else self.ll_max_busbw_more_nodes_gbps
        return gbps * 1e9 * self.bandwidth_scale_inter

    def latency_scale(self, nodes: int) -> float:
        return self.latency_scale_inter if nodes > 1 else self.latency_scale_intra

    def with_links(
        self,
        *,
        gpus_per_node: int | None = None,
        nvlink_gbps: float | None = None,
        network_gbps: float | None = None,
    ) -> CommParams:
        """The same system with other links (``lumos comm --nvlink-gbps``, a what-if's cluster)."""
        gpn = gpus_per_node or self.gpus_per_node
        return replace(
            self,
            gpus_per_node=gpn,
            nics_per_node=gpn if gpus_per_node else self.nics_per_node,
            nvlink_gbps=nvlink_gbps or self.nvlink_gbps,
            network_gbps=network_gbps or self.network_gbps,
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def params_for_gpu(gpu: GpuProfile | str | None = None) -> CommParams:
    """The uncalibrated parameters of a GPU profile's system (DGX/HGX: one NIC per GPU)."""
    g = get_gpu(gpu)
    ll_net = _LL_MAX_BUSBW_NET.get(g.compute_capability[0], _LL_MAX_BUSBW_NET_DEFAULT)
    return CommParams(
        gpu=g.name,
        gpus_per_node=g.gpus_per_node,
        nvlink_gbps=g.nvlink_bandwidth / 1e9,
        network_gbps=g.network_bandwidth / 1e9,
        nics_per_node=g.gpus_per_node,
        nvls=g.compute_capability[0] >= 9,
        ll_max_busbw_gbps=_LL_MAX_BUSBW.get(g.compute_capability[0], 87.7),
        ll_max_busbw_2nodes_gbps=ll_net[0],
        ll_max_busbw_more_nodes_gbps=ll_net[1],
        ring_plateau=RING_PLATEAU.get(g.compute_capability[0], 1.4),
        # Achieved NIC efficiency and latency priors of the profile (fitted on published
        # nccl-tests where the profile says so); a trace's calibration multiplies the scales.
        network_efficiency=g.network_efficiency,
        latency_scale_intra=g.comm_latency_scale_intra,
        latency_scale_inter=g.comm_latency_scale_inter,
    )
