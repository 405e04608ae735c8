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
    # Fraction of peak bandwidth a decode step reaches streaming weights (BLIS's fitted
    # 0.735; Vidur measures 0.68-0.69 without CUDA graphs, the set B batch-1 step 0.79).
    weight_bandwidth_efficiency: float = 0.735
    # The same for KV cache reads, which are gathered block by block. BLIS fits 0.513,
    # and set B's per-step profile agrees; but real runs decode large batches faster
    # than that: with 0.513 the replay of set B's own 300-request vLLM run comes out
    # 17% slow per token and the BLIS H100 run at 20 req/s 12% slow. 0.6 keeps every
    # set B step within 9% and brings both runs within 8% (bench/fidelity.py).
    kv_bandwidth_efficiency: float = 0.6
    # End-to-end model FLOPs utilisation of a compute-bound step. The set B 1024-token
    # prefill (47.9 ms on the RTX PRO 6000's 503.8 TFLOPS) implies 0.61 once the step
    # overhead is taken off; 0.6 is that, rounded, and inside the spec's range: Vidur's
    # 0.55-0.65 for GEMMs, where BLIS's 0.38-0.45 folds in overheads that are separate
    # terms here. Decode-only steps are memory-bound and do not depend on it.
    compute_efficiency: float = 0.6
    # Launch, scheduling and sampling cost of a step, the spec's 0.5 ms (BLIS fits
    # 126 us + 32 us per layer).
    step_overhead_s: float = 0.0005
    # Per scheduled sequence: input preparation, sampling, detokenization (BLIS: 4.4 us).
    per_request_overhead_s: float = 4.4e-6
    # One tensor-parallel all-reduce of a layer's activations; a layer has two.
    allreduce_s: float = 15e-6
    # What an hour of one GPU costs, in dollars, for capacity planning: indicative
    # on-demand cloud prices (they vary by provider and contract: --gpu-cost or a
    # --gpu-spec-file sets the ones that apply). 0: unknown.
    cost_per_hour: float = 0.0

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


# Overheads may be switched off; every other number must be positive, efficiencies at
# most 1.
_MAY_BE_ZERO: Final = frozenset(
    {"step_overhead_s", "per_request_overhead_s", "allreduce_s", "cost_per_hour"}
)
_FRACTIONS: Final = frozenset(
    {"weight_bandwidth_efficiency", "kv_bandwidth_efficiency", "compute_efficiency"}
)
_REQUIRED: Final = ("name", "bf16_tflops", "memory_gb", "bandwidth_tbps")


def _check_number(key: str, value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {key} must be a number, not {value!r}")
    if value < 0 or (value == 0 and key not in _MAY_BE_ZERO):
        raise ValueError(f"{where}: {key} must be positive, not {value!r}")
    if key in _FRACTIONS and value > 1:
        raise ValueError(f"{where}: {key} is a fraction of peak, at most 1, not {value!r}")


GPUS: Final[Mapping[str, GpuSpec]] = {
    spec.name: spec
    for spec in (
        GpuSpec(
            "H100",
            bf16_tflops=989,
            fp8_tflops=1979,
            memory_gb=80,
            bandwidth_tbps=3.35,
            cost_per_hour=3.0,
        ),
        GpuSpec(
            "H200",
            bf16_tflops=989,
            fp8_tflops=1979,
            memory_gb=141,
            bandwidth_tbps=4.8,
            cost_per_hour=3.8,
        ),
        # SXM; the PCIe card has the same peaks and 1.935 TB/s.
        GpuSpec(
            "A100-80GB",
            bf16_tflops=312,
            fp8_tflops=None,
            memory_gb=80,
            bandwidth_tbps=2.039,
            cost_per_hour=1.8,
        ),
        GpuSpec(
            "L4",
            bf16_tflops=121,
            fp8_tflops=242,
            memory_gb=24,
            bandwidth_tbps=0.3,
            cost_per_hour=0.8,
        ),
        GpuSpec(
            "L40S",
            bf16_tflops=362,
            fp8_tflops=733,
            memory_gb=48,
            bandwidth_tbps=0.864,
            cost_per_hour=1.2,
        ),
        # Blackwell GB202, 188 SMs: NVIDIA's RTX Blackwell figures are 503.8 dense
        # BF16/FP16 tensor TFLOPS (1007.6 sparse) and 1007.6 dense FP8 (2015 sparse), as
        # spec listings (e.g. hmc-tech.com) reproduce them. The datasheet bandwidth is
        # 1.792 TB/s; 1.6 is the figure LLMServingSim's set B profile is modelled with,
        # and the calibration in the tests is against that profile.
        GpuSpec(
            "RTX-PRO-6000",
            bf16_tflops=503.8,
            fp8_tflops=1007.6,
            memory_gb=96,
            bandwidth_tbps=1.6,
            cost_per_hour=1.8,
        ),
    )
}

# Other spellings of the known GPUs, compared without case, punctuation or spaces, and
# without a leading "nvidia" (so the device names CUDA reports match too).
_ALIASES: Final = {
    "H100": ("h100sxm", "h100sxm5", "h10080gb", "h10080gbhbm3", "h100sxm580gb"),
    "H200": ("h200sxm", "h200141gb", "h200sxm141gb", "h200141gbhbm3e"),
    "A100-80GB": ("a100", "a100sxm", "a100sxm4", "a100sxm480gb", "a10080gbsxm", "a100sxm80gb"),
    "L4": (),
    "L40S": (),
    "RTX-PRO-6000": (
        "rtxpro6000blackwell",
        "rtxpro6000blackwellserveredition",
        "rtxpro6000blackwellworkstationedition",
        "rtx6000pro",
        "pro6000",
    ),
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
    # YAML is a superset of JSON, so a file not named .json is read as YAML.
    is_json = path.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path}: not valid JSON or YAML: {reason}") from None
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise ValueError(f"{path}: must hold a mapping of GpuSpec field names to values")
    return data
