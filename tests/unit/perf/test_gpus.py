"""GPU datasheets: lookup by the names people and CUDA use, and overrides from a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_sim.perf import GPUS, GpuSpec, gpu_spec, load_gpu_overrides


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("H100", "H100"),
        ("h100-sxm", "H100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("h200", "H200"),
        ("a100", "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("l4", "L4"),
        ("L40S", "L40S"),
        ("rtx-pro-6000", "RTX-PRO-6000"),
        ("RTX PRO 6000", "RTX-PRO-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"),
        ("H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("AMD Instinct MI300X", "MI300X"),
        ("b200", "B200"),
        ("gb200", "GB200"),
        ("h20", "H20"),
    ],
)
def test_lookup_by_alias(name: str, expected: str) -> None:
    assert gpu_spec(name) is GPUS[expected]


@pytest.mark.parametrize("name", ["H800", "tpu-v5e", "", "L40"])
def test_an_unknown_gpu_lists_the_known_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"known: H100, H100-PCIe, .*, RTX-PRO-6000, MI300X"):
        gpu_spec(name)


def test_datasheet_figures_are_dense() -> None:
    assert (GPUS["H100"].bf16_tflops, GPUS["H100"].fp8_tflops) == (989, 1979)
    assert (GPUS["L4"].bf16_tflops, GPUS["L4"].fp8_tflops) == (121, 242)
    assert GPUS["L40S"].fp8_tflops == 733
    assert GPUS["A100-80GB"].fp8_tflops is None
    assert GPUS["RTX-PRO-6000"].bandwidth_tbps == 1.6
    assert GPUS["RTX-PRO-6000"].memory_gb == 96
    assert GPUS["H100"].memory_bytes == 80 * 2**30
    assert GPUS["H200"].bandwidth_bytes_per_s == 4.8e12


def test_default_coefficients_are_inside_their_physical_bounds() -> None:
    """The fitted coefficients (gpus.py, docs/timing-model.md): bandwidth efficiencies
    inside the spec's 0.5-0.9 (BLIS's 0.513 KV, stream benchmarks' 0.9 ceiling), compute
    at most the 0.85 cuBLAS reaches, overheads of a step well under a millisecond."""
    spec = GPUS["H100"]
    assert 0.68 <= spec.weight_bandwidth_efficiency <= 0.9
    assert 0.513 <= spec.kv_bandwidth_efficiency <= 0.9
    assert 0.55 <= spec.compute_efficiency <= 0.85
    assert 0 < spec.step_overhead_s + 80 * spec.layer_overhead_s < 0.002
    assert 0 < spec.allreduce_s < 30e-6 <= GPUS["L40S"].allreduce_s
    assert 0 < spec.api_server_s < 0.05
    assert GPUS["RTX-PRO-6000"].compute_efficiency == 0.61  # set B's 1024-token prefill


def test_every_gpu_has_its_link() -> None:
    nvlink = {"H100": 450, "H200": 450, "H20": 450, "B200": 900, "GB200": 900, "A100-80GB": 300}
    pcie = {"L4": 32, "L40S": 32, "RTX-4090": 32, "A100-80GB-PCIe": 32, "RTX-PRO-6000": 64}
    for name, gbps in (nvlink | pcie).items():
        assert GPUS[name].link_gbps == gbps, name


def test_json_overrides_merge_into_the_base(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"bandwidth_tbps": 3.0, "compute_efficiency": 0.5}))
    spec = load_gpu_overrides(path, GPUS["H100"])
    assert (spec.name, spec.bandwidth_tbps, spec.compute_efficiency) == ("H100", 3.0, 0.5)
    assert spec.bf16_tflops == 989
    assert spec.weight_bandwidth_efficiency == GPUS["H100"].weight_bandwidth_efficiency


def test_yaml_overrides_merge_into_the_base(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text("step_overhead_s: 0\nallreduce_s: 2.0e-5\nfp8_tflops: null\n")
    spec = load_gpu_overrides(path, GPUS["L40S"])
    assert (spec.step_overhead_s, spec.allreduce_s, spec.fp8_tflops) == (0, 2e-5, None)
    assert spec.memory_gb == 48


def test_a_complete_file_defines_a_new_gpu(tmp_path: Path) -> None:
    path = tmp_path / "b200.yml"
    path.write_text("name: B200\nbf16_tflops: 2250\nmemory_gb: 180\nbandwidth_tbps: 8\n")
    spec = load_gpu_overrides(path)
    assert spec == GpuSpec("B200", 2250, None, 180, 8)
    # A base does not leak into a complete definition.
    assert load_gpu_overrides(path, GPUS["H100"]) == spec


def test_an_incomplete_file_without_a_base_names_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text("name: X\nbf16_tflops: 100\n")
    with pytest.raises(ValueError, match="a new GPU needs memory_gb, bandwidth_tbps"):
        load_gpu_overrides(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"bandwith_tbps": 3}', "unknown key 'bandwith_tbps'"),
        ('{"bandwidth_tbps": 0}', "bandwidth_tbps must be positive"),
        ('{"memory_gb": -80}', "memory_gb must be positive"),
        ('{"step_overhead_s": -0.001}', "step_overhead_s must be positive"),
        ('{"bf16_tflops": "989"}', "bf16_tflops must be a number"),
        ('{"bf16_tflops": true}', "bf16_tflops must be a number"),
        ('{"compute_efficiency": 1.5}', "compute_efficiency is a fraction of peak"),
        ('{"name": ""}', "name must be a non-empty string"),
        ("[1, 2]", "must hold a mapping"),
        ("{", "not valid JSON or YAML"),
    ],
)
def test_bad_overrides_are_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        load_gpu_overrides(path, GPUS["H100"])
    assert str(path) in str(error.value)


def test_an_unreadable_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be read"):
        load_gpu_overrides(tmp_path / "absent.yaml", GPUS["H100"])


def test_a_spec_checks_its_numbers() -> None:
    with pytest.raises(ValueError, match="bandwidth_tbps must be positive"):
        GpuSpec("X", 100, None, 24, 0)
    with pytest.raises(ValueError, match="needs a name"):
        GpuSpec(" ", 100, None, 24, 1)
