"""Accelerators: datasheet peaks and the efficiencies that turn them into step times.

Peaks are the vendors' dense figures (sparsity doubles the tensor numbers on the
datasheets and never applies to inference). The efficiencies and overheads are those of
the closed-form step model (see roofline.py): what fraction of a peak a real vLLM step
reaches, and the fixed costs a step pays whatever it computes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

import yaml


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: dense tensor peaks in TFLOPS, memory in GB as datasheets count
    it (binary: CUDA reports the RTX PRO 6000's "96 GB" as 94.97 GiB), bandwidth in
    TB/s, and the efficiencies and overheads of the step model."""

    name: str
    bf16_tflops: float
    fp8_tflops: float | None  # None: no FP8 tensor cores (A100)
    memory_gb: float
    bandwidth_tbps: float
    # Between two GPUs of one server, each direction, in GB/s: NVLink where the GPU has it,
    # else its PCIe link. Tensor-parallel all-reduces move their bytes at this rate.
    link_gbps: float = 450.0
    # Where GPUs are linked each to each rather than through a switch (MI300X's Infinity
    # Fabric mesh): the bandwidth to one peer, so a group of n reaches (n-1) times it, at
    # most link_gbps. 0: a switch (NVSwitch) or PCIe, link_gbps whatever the group.
    link_gbps_per_peer: float = 0.0
    # Between servers, each direction, per GPU, in GB/s: one 400 Gb/s NIC per GPU
    # (InfiniBand NDR or RoCE, as on DGX/HGX H100 and later). A group of more than
    # `gpus_per_server` GPUs (wide expert parallelism) moves its bytes at this rate.
    network_gbps: float = 50.0
    gpus_per_server: int = 8
    # The coefficients of the step model (roofline.py), one set fitted to the calibration
    # set of 13 real vLLM runs on H100 (bench/sim_to_real.py: scipy's least_squares over
    # each stage's mean TTFT and ITL, soft-L1 loss, within physical bounds; efficiencies
    # at most 1, compute at most 0.85, about what large cuBLAS GEMMs reach on H100).
    # docs/timing-model.md gives each one's source. Fractions of a peak are at most 1.
    # Fraction of peak bandwidth a decode step reaches streaming weights.
    weight_bandwidth_efficiency: float = 0.849
    # The same for KV cache reads, gathered block by block by the attention kernels.
    kv_bandwidth_efficiency: float = 0.701
    # Model FLOPs utilisation of a compute-bound (prefill) step.
    compute_efficiency: float = 0.808
    # The same for an MoE model's routed-expert matmuls: fused MoE kernels group each
    # expert's tokens and reach less of the peak than one dense GEMM over every token.
    moe_compute_efficiency: float = 0.1
    # vLLM's CPU time of one step whatever it holds: scheduling, input preparation,
    # sampling, the output's hand-over to the API server.
    step_overhead_s: float = 0.000792
    # Per decoder layer and step: kernel boundaries a CUDA graph keeps.
    layer_overhead_s: float = 1.55e-6
    # Per MoE layer and step: routing, the tokens' permutation to their experts and back,
    # and the grouped expert matmuls' launches, which a dense layer has not.
    moe_layer_overhead_s: float = 40e-6
    # Per decoder layer of a step that holds a prefill chunk: such steps run outside the
    # full CUDA graph (piecewise graphs, attention launched eagerly).
    prefill_layer_overhead_s: float = 38.1e-6
    # Per scheduled sequence and step: input preparation, sampling, detokenization.
    per_request_overhead_s: float = 1.37e-6
    # The fixed latency of one tensor-parallel all-reduce (launch and synchronization);
    # its bytes cost 2 (n-1)/n of the message over link_gbps on top. A layer has two.
    allreduce_s: float = 12.9e-6
    # vLLM's API server per request, from its arrival to the engine's scheduler: HTTP,
    # the chat template, tokenization, the hand-over to the engine core.
    api_server_s: float = 0.00137
    # The same per prompt token (tokenizing and hashing the prompt's blocks).
    api_server_s_per_token: float = 16.8e-6
    # What an hour of one GPU costs, in dollars, for capacity planning: indicative
    # on-demand cloud prices (they vary by provider and contract: --gpu-cost or a
    # --gpu-spec-file sets the ones that apply). 0: unknown.
    cost_per_hour: float = 0.0
    # Dense FP4 tensor peak (NVFP4/MXFP4 matmuls), TFLOPS; 0: no FP4 tensor cores, 4-bit
    # weights are dequantized into 16-bit matmuls.
    fp4_tflops: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("a GPU needs a name")
        for field in fields(self):
            if field.name == "name":
                continue
            value = getattr(self, field.name)
            if value is None and field.name == "fp8_tflops":
                continue
            _check_number(field.name, value, f"GPU {self.name!r}")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * (1 << 30)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_tbps * 1e12

    def link_bytes_per_s(self, gpus: int) -> float:
        """Each direction, from one GPU to the rest of a group of `gpus` (across servers,
        when the group is larger than one, the network's rate)."""
        if gpus > self.gpus_per_server:
            return min(self.link_gbps, self.network_gbps) * 1e9
        gbps = self.link_gbps
        if self.link_gbps_per_peer:
            gbps = min(gbps, self.link_gbps_per_peer * max(gpus - 1, 1))
        return gbps * 1e9


# Overheads may be switched off; every other number must be positive, efficiencies at
# most 1.
_MAY_BE_ZERO: Final = frozenset(
    {
        "step_overhead_s",
        "layer_overhead_s",
        "prefill_layer_overhead_s",
        "moe_layer_overhead_s",
        "per_request_overhead_s",
        "allreduce_s",
        "api_server_s",
        "api_server_s_per_token",
        "cost_per_hour",
        "link_gbps_per_peer",
        "fp4_tflops",
    }
)
_FRACTIONS: Final = frozenset(
    {
        "weight_bandwidth_efficiency",
        "kv_bandwidth_efficiency",
        "compute_efficiency",
        "moe_compute_efficiency",
    }
)
_REQUIRED: Final = ("name", "bf16_tflops", "memory_gb", "bandwidth_tbps")


def _check_number(key: str, value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {key} must be a number, not {value!r}")
    if value < 0 or (value == 0 and key not in _MAY_BE_ZERO):
        raise ValueError(f"{where}: {key} must be positive, not {value!r}")
    if key in _FRACTIONS and value > 1:
        raise ValueError(f"{where}: {key} is a fraction of peak, at most 1, not {value!r}")


# Link figures, each direction: NVLink 3 (A100) 300 GB/s, NVLink 4 (H100, H200, H20)
# 450, NVLink 5 (B200, GB200) 900, the H100 NVL's NVLink bridge 300 (pairs); PCIe 4.0 x16
# 32 GB/s, PCIe 5.0 x16 64; MI300X's Infinity Fabric 64 GB/s to each of its 7 peers.
# One all-reduce's fixed latency: NVLink GPUs keep the fitted value (vLLM's custom
# all-reduce); over PCIe vLLM falls back to NCCL through the host bridge, two PCIe round
# trips more per collective: 30 us, an estimate (no PCIe run is in the calibration set).
_PCIE_ALLREDUCE_S: Final = 30e-6
_PCIE4, _PCIE5 = 32.0, 64.0

GPUS: Final[Mapping[str, GpuSpec]] = {
    spec.name: spec
    for spec in (
        GpuSpec(
            "H100",  # SXM5
            bf16_tflops=989,
            fp8_tflops=1979,
            memory_gb=80,
            bandwidth_tbps=3.35,
            cost_per_hour=3.0,
        ),
        GpuSpec(
            "H100-PCIe",
            bf16_tflops=756,
            fp8_tflops=1513,
            memory_gb=80,
            bandwidth_tbps=2.0,
            link_gbps=_PCIE5,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=2.5,
        ),
        GpuSpec(
            "H100-NVL",
            bf16_tflops=835,
            fp8_tflops=1671,
            memory_gb=94,
            bandwidth_tbps=3.9,
            link_gbps=300,
            cost_per_hour=2.8,
        ),
        GpuSpec(
            "H200",
            bf16_tflops=989,
            fp8_tflops=1979,
            memory_gb=141,
            bandwidth_tbps=4.8,
            cost_per_hour=3.8,
        ),
        GpuSpec(
            "H20",
            bf16_tflops=148,
            fp8_tflops=296,
            memory_gb=96,
            bandwidth_tbps=4.0,
            cost_per_hour=1.5,
        ),
        GpuSpec(
            "B200",
            bf16_tflops=2250,
            fp8_tflops=4500,
            memory_gb=180,
            bandwidth_tbps=8.0,
            link_gbps=900,
            cost_per_hour=5.5,
            fp4_tflops=9000,
        ),
        GpuSpec(
            "GB200",  # one Blackwell GPU of a Grace Blackwell superchip (NVL72)
            bf16_tflops=2500,
            fp8_tflops=5000,
            memory_gb=186,
            bandwidth_tbps=8.0,
            link_gbps=900,
            cost_per_hour=6.5,
            fp4_tflops=10000,
        ),
        GpuSpec(
            "A100-80GB",  # SXM4
            bf16_tflops=312,
            fp8_tflops=None,
            memory_gb=80,
            bandwidth_tbps=2.039,
            link_gbps=300,
            cost_per_hour=1.8,
        ),
        GpuSpec(
            "A100-40GB",  # SXM4
            bf16_tflops=312,
            fp8_tflops=None,
            memory_gb=40,
            bandwidth_tbps=1.555,
            link_gbps=300,
            cost_per_hour=1.3,
        ),
        GpuSpec(
            "A100-80GB-PCIe",
            bf16_tflops=312,
            fp8_tflops=None,
            memory_gb=80,
            bandwidth_tbps=1.935,
            link_gbps=_PCIE4,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=1.6,
        ),
        GpuSpec(
            "A100-40GB-PCIe",
            bf16_tflops=312,
            fp8_tflops=None,
            memory_gb=40,
            bandwidth_tbps=1.555,
            link_gbps=_PCIE4,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=1.2,
        ),
        GpuSpec(
            "L4",
            bf16_tflops=121,
            fp8_tflops=242,
            memory_gb=24,
            bandwidth_tbps=0.3,
            link_gbps=_PCIE4,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=0.8,
        ),
        GpuSpec(
            "L40S",
            bf16_tflops=362,
            fp8_tflops=733,
            memory_gb=48,
            bandwidth_tbps=0.864,
            link_gbps=_PCIE4,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=1.2,
        ),
        # GeForce figures with FP32 accumulation, which vLLM's GEMMs use (the FP16-
        # accumulate tensor rate is twice these).
        GpuSpec(
            "RTX-4090",
            bf16_tflops=165.2,
            fp8_tflops=330.3,
            memory_gb=24,
            bandwidth_tbps=1.008,
            link_gbps=_PCIE4,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=0.4,
        ),
        # Blackwell GB202, 188 SMs: NVIDIA's RTX Blackwell figures are 503.8 dense
        # BF16/FP16 tensor TFLOPS (1007.6 sparse) and 1007.6 dense FP8 (2015 sparse). The
        # datasheet bandwidth is 1.792 TB/s; 1.6 is the figure LLMServingSim's set B
        # profile is modelled with, and the calibration in the tests is against that
        # profile. Its efficiencies are set B's: the 1024-token prefill (47.9 ms) implies
        # 0.61 of the compute peak, the batch-1 decode step (12.8 ms for 15 GB of
        # weights) 0.81 of the bandwidth, once the step's overheads are taken off.
        GpuSpec(
            "RTX-PRO-6000",
            bf16_tflops=503.8,
            fp8_tflops=1007.6,
            memory_gb=96,
            bandwidth_tbps=1.6,
            compute_efficiency=0.61,
            weight_bandwidth_efficiency=0.81,
            # Its GDDR7 under the attention kernels: set B's decode grid alone fits 0.51,
            # its saturated trace 0.64; 0.58 keeps both within their bounds (grid 12.9%,
            # trace TPOT +6.3%).
            kv_bandwidth_efficiency=0.58,
            link_gbps=_PCIE5,
            allreduce_s=_PCIE_ALLREDUCE_S,
            cost_per_hour=1.8,
        ),
        GpuSpec(
            "MI300X",
            bf16_tflops=1307.4,
            fp8_tflops=2614.9,
            memory_gb=192,
            bandwidth_tbps=5.3,
            link_gbps=448,
            link_gbps_per_peer=64,
            cost_per_hour=3.0,
        ),
    )
}

# Other spellings of the known GPUs, compared without case, punctuation or spaces, and
# without a leading "nvidia" (so the device names CUDA reports match too).
_ALIASES: Final = {
    "H100": ("h100sxm", "h100sxm5", "h10080gb", "h10080gbhbm3", "h100sxm580gb"),
    "H100-PCIe": ("h100pcie80gb", "h100pcie5"),
    "H100-NVL": ("h100nvl94gb",),
    "H200": ("h200sxm", "h200141gb", "h200sxm141gb", "h200141gbhbm3e"),
    "H20": (),
    "B200": ("b200sxm", "b200180gb", "hgxb200"),
    "GB200": ("gb200nvl72", "gb200nvl"),
    "A100-80GB": ("a100", "a100sxm", "a100sxm4", "a100sxm480gb", "a10080gbsxm", "a100sxm80gb"),
    "A100-40GB": ("a100sxm440gb", "a10040gbsxm", "a100sxm40gb"),
    "A100-80GB-PCIe": ("a100pcie", "a100pcie80gb", "a10080gbpcie"),
    "A100-40GB-PCIe": ("a100pcie40gb", "a10040gbpcie"),
    "L4": (),
    "L40S": (),
    "RTX-4090": ("geforcertx4090", "4090"),
    "RTX-PRO-6000": (
        "rtxpro6000blackwell",
        "rtxpro6000blackwellserveredition",
        "rtxpro6000blackwellworkstationedition",
        "rtx6000pro",
        "pro6000",
    ),
    "MI300X": ("amdinstinctmi300x", "instinctmi300x", "amdmi300x"),
}


def _compact(name: str) -> str:
    compact = re.sub(r"[^0-9a-z]", "", name.lower())
    return compact.removeprefix("nvidia")


_BY_ALIAS: Final = {
    alias: GPUS[key] for key, aliases in _ALIASES.items() for alias in (_compact(key), *aliases)
}


def gpu_spec(name: str) -> GpuSpec:
    """The GPU called `name` (any case; "h100-sxm", "a100", "rtx-pro-6000" and CUDA's
    device names are accepted); ValueError listing the known ones otherwise."""
    spec = _BY_ALIAS.get(_compact(name))
    if spec is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return spec


def load_gpu_overrides(path: Path, base: GpuSpec | None = None) -> GpuSpec:
    """`base` with the fields a JSON or YAML file sets (keys are GpuSpec field names).
    A file that names a GPU and gives its peaks, memory and bandwidth defines a new one
    (efficiencies default unless given), and then `base` is not needed. Raises
    ValueError naming the file and the offending key."""
    values = _read_mapping(path)
    known = {field.name for field in fields(GpuSpec)}
    for key, value in values.items():
        if key not in known:
            raise ValueError(f"{path}: unknown key {key!r}; known: {', '.join(sorted(known))}")
        if key == "name":
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{path}: name must be a non-empty string")
        elif not (key == "fp8_tflops" and value is None):
            _check_number(key, value, str(path))
    if all(key in values for key in _REQUIRED):
        return GpuSpec(**{"fp8_tflops": None, **values})
    if base is None:
        missing = ", ".join(key for key in _REQUIRED if key not in values)
        raise ValueError(f"{path}: a new GPU needs {missing}")
    return replace(base, **values)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read: {error}") from None
    return parse_mapping(text, path, str(path), "a mapping of GpuSpec field names to values")


def parse_mapping(text: str, path: Path, where: str, expected: str) -> dict[str, Any]:
    """The string-keyed mapping in `text`, the contents of settings file `path`: JSON for
    a .json file, else YAML (a superset of JSON). ValueError starting with `where` when it
    is not valid or not a mapping (`expected` says what it must hold)."""
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{where}: not valid JSON or YAML: {reason}") from None
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise ValueError(f"{where}: must hold {expected}")
    return data
