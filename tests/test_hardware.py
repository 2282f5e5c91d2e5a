"""GPU profiles and name resolution."""

from __future__ import annotations

import pickle

import pytest

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import DEFAULT_GPU, GPUS, get_gpu, known_gpu_names


def test_default_is_h100_with_datasheet_numbers():
    h = get_gpu()
    assert DEFAULT_GPU == "H100" and h.name == "H100"
    assert h.peak_bf16_flops == pytest.approx(989.4e12)  # 1,979 TFLOPS sparse / 2
    assert h.hbm_bandwidth == pytest.approx(3.35e12)
    assert h.nvlink_bandwidth == pytest.approx(450e9)  # 900 GB/s bidirectional / 2
    assert h.network_bandwidth == pytest.approx(50e9)  # 400 Gb/s ConnectX-7 per GPU
    assert h.sm_count == 132 and h.compute_capability == (9, 0) and h.gpus_per_node == 8


def test_all_profiles_present_and_ordered_by_generation():
    assert known_gpu_names() == ["H100", "H200", "A100", "B200", "V100"]
    assert (
        GPUS["V100"].peak_bf16_flops
        < GPUS["A100"].peak_bf16_flops
        < GPUS["H100"].peak_bf16_flops
        < GPUS["B200"].peak_bf16_flops
    )
    assert GPUS["H200"].hbm_bandwidth == pytest.approx(4.8e12)
    assert GPUS["A100"].peak_bf16_flops == pytest.approx(312e12)
    assert GPUS["V100"].peak_fp32_flops == pytest.approx(15.7e12)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("H100", "H100"),
        ("h100", "H100"),
        ("h100-sxm", "H100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_trace_device_names_resolve(name, expected):
    assert get_gpu(name).name == expected


def test_unknown_gpu_lists_known_names():
    with pytest.raises(ConfigError) as info:
        get_gpu("AMD Instinct MI250X")
    message = str(info.value)
    assert "MI250X" in message and "H100, H200, A100, B200, V100" in message
    with pytest.raises(ConfigError):
        get_gpu("")


def test_profiles_are_frozen_and_picklable():
    h = get_gpu("H100")
    with pytest.raises(AttributeError):
        h.peak_bf16_flops = 1.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(h)) == h
    assert get_gpu(h) is h
