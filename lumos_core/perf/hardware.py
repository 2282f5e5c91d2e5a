"""GPU hardware profiles shared by the cost models, the estimator and the trace generator.

A :class:`GpuProfile` holds public peak numbers of one accelerator (from the vendor's datasheet,
cited next to each profile) plus *efficiency defaults*: the fraction of a peak that real kernels
reach. Peaks are facts; efficiencies are modelling choices, documented here so that the estimator
and ``lumos synth`` use the same ones. Bandwidths are bytes/s, FLOP rates FLOP/s, times seconds.

Conventions:

* ``nvlink_bandwidth`` is the per-GPU, per-direction NVLink bandwidth (half the bidirectional
  figure NVIDIA quotes). ``network_bandwidth`` is the per-GPU NIC line rate (one NIC per GPU in
  DGX/HGX systems). NCCL's achievable *bus bandwidth* is these times ``nvlink_efficiency`` /
  ``network_efficiency`` (see :func:`lumos_core.perf.costs.link_params`).
* ``nvlink_latency`` / ``network_latency`` are per *step* of a collective algorithm (one hop of a
  ring or tree), so a ring all-reduce over n GPUs pays 2(n-1) of them. They are modelling
  defaults chosen to reproduce NCCL-tests small-message times (~10-20 µs intra-node), not specs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lumos_core.errors import ConfigError

__all__ = ["DEFAULT_GPU", "GPUS", "GpuProfile", "get_gpu", "known_gpu_names"]

GB = 1e9
TB = 1e12
TFLOPS = 1e12


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """Peak capabilities of one GPU model and realistic efficiency defaults."""

    name: str  # canonical short name used on the command line ("H100")
    device_name: str  # what CUDA reports and Kineto writes into deviceProperties
    peak_bf16_flops: float  # dense (no sparsity) tensor-core BF16/FP16 FLOP/s
    peak_fp32_flops: float  # non-tensor FP32 FLOP/s
    hbm_bandwidth: float  # B/s
    memory_bytes: int
    nvlink_bandwidth: float  # B/s per GPU per direction
    nvlink_latency: float  # s per collective step inside a node
    network_bandwidth: float  # B/s per GPU across nodes (NIC line rate)
    network_latency: float  # s per collective step across nodes
    gpus_per_node: int
    sm_count: int
    compute_capability: tuple[int, int]
    # Fractions of the peaks that production kernels reach (modelling defaults).
    gemm_efficiency: float = 0.70
    attention_efficiency: float = 0.45
    memory_efficiency: float = 0.80
    nvlink_efficiency: float = 0.80
    network_efficiency: float = 0.85
    kernel_floor: float = 2.0e-6  # no kernel is shorter than this (launch + tail effects)
    # Multipliers of the NCCL model's per-step latencies (:mod:`lumos_core.perf.nccl.params`) for
    # this system, inside a node and across nodes: priors fitted on published nccl-tests (1.0: the
    # tuner-like tables as they are). A trace's own collectives refine them (``calibrate``).
    comm_latency_scale_intra: float = 1.0
    comm_latency_scale_inter: float = 1.0
    # Fixed time a GEMM costs beyond its FLOPs at ``gemm_efficiency`` (partial waves, epilogue):
    # what keeps small GEMMs far from peak (see :mod:`lumos_core.perf.kernel_curves`).
    gemm_fixed: float = 4.0e-6
    # Host/framework time per operator relative to the nominal per-op CPU costs of ``lumos synth``
    # (drawn from H100 PyTorch traces: 1.0). Covers the overhead-bound regime of small models.
    host_scale: float = 1.0
    aliases: tuple[str, ...] = ()

    @property
    def gpu_memory_gib(self) -> float:
        return self.memory_bytes / 2**30


# NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 tensor 1,979 TFLOPS *with sparsity*, so
# 989.4 dense; FP32 67 TFLOPS; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s bidirectional; 132 SMs.
# DGX H100: eight ConnectX-7 400 Gb/s NICs, one per GPU (50 GB/s). cuBLAS reaches ~700 TFLOPS on
# large BF16 GEMMs (~0.70); FlashAttention-2 ~350-450 TFLOPS (~0.45); NCCL-tests all-reduce bus
# bandwidth on 8x H100 ~360 GB/s of 450 (~0.80).
H100 = GpuProfile(
    name="H100",
    device_name="NVIDIA H100 80GB HBM3",
    peak_bf16_flops=989.4 * TFLOPS,
    peak_fp32_flops=67 * TFLOPS,
    hbm_bandwidth=3.35 * TB,
    memory_bytes=85_028_372_480,
    nvlink_bandwidth=450 * GB,
    nvlink_latency=1.0e-6,
    network_bandwidth=50 * GB,
    network_latency=5.0e-6,
    gpus_per_node=8,
    sm_count=132,
    compute_capability=(9, 0),
    # Not fitted (no dense H100 end-to-end row in ../shared): the A100 fit's ratio to its datasheet
    # prior (0.748 / 0.75 = 1.0, with tile/wave quantisation in perf/costs) applied to cuBLAS's
    # ~0.70, and the A100's fitted fixed GEMM time scaled by the peak ratio (20 us x 312 / 989).
    gemm_efficiency=0.70,
    gemm_fixed=6.3e-6,
    attention_efficiency=0.45,
    memory_efficiency=0.80,
    nvlink_efficiency=0.80,
    network_efficiency=0.94,
    aliases=("H100-SXM", "H100-SXM5", "H100 SXM"),
)

# NVIDIA H200 datasheet (SXM): same Hopper compute as H100 (BF16 1,979 TFLOPS sparse = 989.4
# dense, FP32 67 TFLOPS), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s; DGX H200 has 8x 400 Gb/s.
H200 = GpuProfile(
    name="H200",
    device_name="NVIDIA H200",
    peak_bf16_flops=989.4 * TFLOPS,
    peak_fp32_flops=67 * TFLOPS,
    hbm_bandwidth=4.8 * TB,
    memory_bytes=150_754_820_096,
    nvlink_bandwidth=450 * GB,
    nvlink_latency=1.0e-6,
    network_bandwidth=50 * GB,
    network_latency=5.0e-6,
    gpus_per_node=8,
    sm_count=132,
    compute_capability=(9, 0),
    # Not fitted (no dense H100 end-to-end row in ../shared): the A100 fit's ratio to its datasheet
    # prior (0.748 / 0.75 = 1.0, with tile/wave quantisation in perf/costs) applied to cuBLAS's
    # ~0.70, and the A100's fitted fixed GEMM time scaled by the peak ratio (20 us x 312 / 989).
    gemm_efficiency=0.70,
    gemm_fixed=6.3e-6,
    attention_efficiency=0.45,
    memory_efficiency=0.80,
    nvlink_efficiency=0.80,
    network_efficiency=0.94,
    aliases=("H200-SXM", "H200 SXM"),
)

# NVIDIA A100 datasheet (SXM4 80GB): BF16 tensor 312 TFLOPS dense, FP32 19.5 TFLOPS, HBM2e
# 2,039 GB/s, NVLink 3 600 GB/s bidirectional, 108 SMs. DGX A100: eight 200 Gb/s HDR NICs (25 GB/s
# per GPU). cuBLAS ~230-250 TFLOPS on large BF16 GEMMs (~0.75); FlashAttention-2 up to ~70%.
A100 = GpuProfile(
    name="A100",
    device_name="NVIDIA A100-SXM4-80GB",
    peak_bf16_flops=312 * TFLOPS,
    peak_fp32_flops=19.5 * TFLOPS,
    hbm_bandwidth=2.039 * TB,
    memory_bytes=85_899_345_920,
    nvlink_bandwidth=300 * GB,
    nvlink_latency=1.5e-6,
    network_bandwidth=25 * GB,
    network_latency=6.0e-6,
    gpus_per_node=8,
    sm_count=108,
    compute_capability=(8, 0),
    # Priors fitted by bench/bench_published.py --fit on its FIT part (Korthikanti Table 4 layer
    # timings and half of vTrain's 1,440 single-node runs; coordinate descent of 4 physical
    # parameters; a third pass leaves them): GEMMs reach 0.748 of peak asymptotically, on the FLOPs
    # their SMs are busy for (tile and wave quantisation, each tile's pipeline fill and epilogue:
    # perf/costs.wave_factor), plus 20 us each (the fit's upper bound), attention 0.55, and the
    # host/framework time per operator is 9.2x the nominal H100/PyTorch-2 costs (Megatron-DeepSpeed's
    # hooks and Python on vTrain's node: its overhead-bound regime). Hold-out: Narayanan T1 2.8 %,
    # T2 2.8 %, Korthikanti T3/5 3.0 %, vTrain 7.7 % mean |error| vs 5.9 / 11.6 / 18.3 / 58.3 % for a
    # constant 45 % of peak (vTrain rows with the per-layer host-GPU sync of their activation
    # checkpointing, ``layer_sync``). Without the shape terms the same fit gave 0.675.
    gemm_efficiency=0.748,
    gemm_fixed=20e-6,
    host_scale=9.2,
    attention_efficiency=0.55,
    memory_efficiency=0.85,
    nvlink_efficiency=0.78,
    # Achieved, not line rate: nccl-tests all-reduce across 2 nodes x 8 A100 with one 200 Gb/s HDR
    # NIC per GPU (Azure ND A100 v4, ../shared/ground-truth/nccl/echo-a100) peaks at ~128 GB/s bus
    # bandwidth, 0.64 of 8 x 25 GB/s; fitted jointly with the latency scales below (bench/fit_priors.py:
    # network 0.68, per-step latency x2.0 inside a node, x1.5 across nodes; median error 5 % on the
    # 16-GPU sweep, in-sample).
    network_efficiency=0.68,
    comm_latency_scale_intra=2.0,
    comm_latency_scale_inter=1.5,
    kernel_floor=2.5e-6,
    aliases=("A100-SXM", "A100-SXM4", "A100-80GB", "A100 SXM"),
)

# NVIDIA HGX/DGX B200 datasheet (8 GPUs): FP16/BF16 tensor 36 PFLOPS sparse -> 2.25 PFLOPS dense
# per GPU; FP32 600 TFLOPS -> 75 per GPU; 1,440 GB HBM3e at 64 TB/s -> 180 GB at 8 TB/s per GPU;
# NVLink 5 1.8 TB/s bidirectional per GPU; DGX B200: eight ConnectX-7 400 Gb/s; 148 SMs.
B200 = GpuProfile(
    name="B200",
    device_name="NVIDIA B200",
    peak_bf16_flops=2250 * TFLOPS,
    peak_fp32_flops=75 * TFLOPS,
    hbm_bandwidth=8.0 * TB,
    memory_bytes=193_273_528_320,
    nvlink_bandwidth=900 * GB,
    nvlink_latency=1.0e-6,
    network_bandwidth=50 * GB,
    network_latency=5.0e-6,
    gpus_per_node=8,
    sm_count=148,
    compute_capability=(10, 0),
    gemm_efficiency=0.65,  # 0.65 x the A100 fit's 1.0 (0.748 / 0.75), as for H100
    gemm_fixed=2.8e-6,  # 20 us x 312 / 2250
    attention_efficiency=0.45,
    memory_efficiency=0.80,
    nvlink_efficiency=0.80,
    network_efficiency=0.94,
    aliases=("B200-SXM", "HGX B200"),
)

# NVIDIA Tesla V100 datasheet (SXM2 16GB): FP16 tensor 125 TFLOPS (Volta has no BF16; FP16 is its
# half-precision tensor peak), FP32 15.7 TFLOPS, HBM2 900 GB/s, NVLink 2 300 GB/s bidirectional,
# 80 SMs. DGX-1: four 100 Gb/s EDR NICs shared by 8 GPUs (6.25 GB/s per GPU).
V100 = GpuProfile(
    name="V100",
    device_name="Tesla V100-SXM2-16GB",
    peak_bf16_flops=125 * TFLOPS,
    peak_fp32_flops=15.7 * TFLOPS,
    hbm_bandwidth=0.9 * TB,
    memory_bytes=17_179_869_184,
    nvlink_bandwidth=150 * GB,
    nvlink_latency=2.0e-6,
    network_bandwidth=6.25 * GB,
    network_latency=8.0e-6,
    gpus_per_node=8,
    sm_count=80,
    compute_capability=(7, 0),
    gemm_efficiency=0.70,
    attention_efficiency=0.35,
    memory_efficiency=0.80,
    nvlink_efficiency=0.80,
    network_efficiency=0.85,
    kernel_floor=3.0e-6,
    aliases=("V100-SXM2", "V100-SXM2-16GB", "V100-SXM2-32GB", "Tesla V100"),
)

GPUS: dict[str, GpuProfile] = {p.name: p for p in (H100, H200, A100, B200, V100)}
DEFAULT_GPU = "H100"

# Device names found in traces contain the model as a token ("NVIDIA H100 80GB HBM3",
# "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", "NVIDIA H100 PCIe"). PCIe and 40 GB variants
# resolve to the same family profile: close enough for what-if estimates, and better than failing.
_FAMILY_TOKENS = (("h200", "H200"), ("h100", "H100"), ("a100", "A100"), ("b200", "B200"), ("v100", "V100"))


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


def known_gpu_names() -> list[str]:
    return list(GPUS)


def get_gpu(name: str | GpuProfile | None = None) -> GpuProfile:
    """The profile for a short name ("H100"), an alias or a device name from a trace.

    ``None`` gives the default (H100). Raises :class:`ConfigError` listing known names otherwise.
    """
    if isinstance(name, GpuProfile):
        return name
    if name is None:
        return GPUS[DEFAULT_GPU]
    key = _normalise(name)
    if key:
        for profile in GPUS.values():
            if key == _normalise(profile.name) or key == _normalise(profile.device_name):
                return profile
            if any(key == _normalise(a) for a in profile.aliases):
                return profile
        for token, family in _FAMILY_TOKENS:
            if token in key:
                return GPUS[family]
    raise ConfigError(
        f"unknown GPU {name!r}: known GPUs are {', '.join(GPUS)} "
        "(device names such as 'NVIDIA H100 80GB HBM3' also work)"
    )
